-- fencekeeper 012: withLease, a lease checked by the write (postgresSource's
-- grant and the resource in one database). The transaction share-locks the
-- grant's entry row first (not the session row: the heartbeat must still
-- renew), checks the session's lease on the database's clock, and bounds
-- itself by what is left of it; the statement sent with COMMIT checks again.
-- Every path that ends or hands over a grant (leave, reap, session close,
-- sweep, the session's ON DELETE CASCADE) deletes the entry and so waits for
-- that share lock: a successor is granted only after this transaction ends,
-- and a lease that passes in between cannot let it in first.

-- Begin: lock the entry FOR SHARE, check it is this database and the grant
-- is live. Answers the lease left in ms (> 0), -1 when the grant has ended,
-- -2 when the lock's source is another database.
CREATE OR REPLACE FUNCTION fencekeeper_lock_lease_begin(p_entry bigint, p_session bigint, p_token bigint, p_source text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_left bigint;
  v_source text;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  SELECT (SELECT c.system_identifier::text FROM pg_control_system() c) || '-' ||
         (SELECT d.oid::text FROM pg_database d WHERE d.datname = current_database())
    INTO v_source;
  IF v_source IS DISTINCT FROM p_source THEN
    RETURN -2;
  END IF;
  SELECT floor(extract(epoch FROM (s.expires_at - clock_timestamp())) * 1000)::bigint INTO v_left
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.id = p_entry AND e.session_id = p_session AND e.token = p_token
     FOR SHARE OF e;
  IF v_left IS NULL OR v_left <= 0 THEN
    RETURN -1;
  END IF;
  -- A paused holder must not block a takeover past its lease: its backend
  -- ends the transaction once it has been idle, or a statement has run, for
  -- what was left of the lease. (Each statement gets that much again:
  -- statements that together run past the lease are refused by the check
  -- sent with COMMIT, though they delay the successor meanwhile.)
  PERFORM set_config('idle_in_transaction_session_timeout', v_left::text, true);
  PERFORM set_config('statement_timeout', v_left::text, true);
  RETURN v_left;
END $$;

-- The check sent with COMMIT: raises (SQLSTATE FK410) unless the entry is
-- still ours, granted, and its session's lease still runs on the database's
-- clock; the COMMIT after it in the same message then never runs.
CREATE OR REPLACE FUNCTION fencekeeper_lock_lease_check(p_entry bigint, p_session bigint, p_token bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1
     FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
    WHERE e.id = p_entry AND e.session_id = p_session AND e.token = p_token AND s.expires_at > clock_timestamp();
  IF NOT FOUND THEN
    RAISE EXCEPTION 'fencekeeper: the lease of lock entry % ended before the commit', p_entry USING ERRCODE = 'FK410';
  END IF;
END $$;
