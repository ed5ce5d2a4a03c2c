-- fencekeeper 010: PostgreSQL as a token source (postgresSource in
-- fencekeeper/postgres). A session per process whose lease is kept on the
-- database's clock, a fair queue per lock, and tokens from one sequence.
--
-- Why the token is sound (the functions below keep all four rules):
--   * fencekeeper_lock_tokens is CACHE 1: a cached sequence hands each
--     session a block of values, so two sessions' nextval calls would come
--     out in an order unrelated to the order of the calls;
--   * NO CYCLE: a wrapped sequence would repeat a token;
--   * nextval is called only in the transaction that grants, after that
--     transaction holds the lock's row FOR UPDATE (never at enqueue): grants
--     of one lock are serialized by that row lock, so a later grant calls
--     nextval after an earlier one has committed, and gets a larger value;
--     a grant that rolls back keeps its value burnt (sequences do not roll
--     back), so no token is ever handed out twice;
--   * every transaction of the source runs with synchronous_commit = on
--     (set_config(..., true), i.e. SET LOCAL): its commit returns only once
--     the commit record, and the sequence's WAL record before it, are
--     flushed (and, with synchronous_standby_names, replicated). With 'off',
--     a crash right after an acknowledged grant loses both the grant and the
--     sequence's advance: after recovery the same token is granted again.
-- Election epochs come from the same sequence under the same rules.
--
-- Leases are measured on the database's clock (clock_timestamp(), not now():
-- now() is the transaction's start, which a transaction that waited for a
-- row lock would see in the past). A renewal never revives an expired
-- session: its UPDATE matches only while expires_at is still ahead.

CREATE SEQUENCE IF NOT EXISTS fencekeeper_lock_tokens AS bigint MINVALUE 1 START WITH 1 INCREMENT BY 1 CACHE 1 NO CYCLE;

-- One row per source (a process's postgresSource): its LISTEN channel and lease.
CREATE TABLE IF NOT EXISTS fencekeeper_lock_sessions (
  id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  channel    text        NOT NULL UNIQUE,
  owner      text        NOT NULL,
  lease_ms   integer     NOT NULL CHECK (lease_ms > 0),
  started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS fencekeeper_lock_sessions_expiry ON fencekeeper_lock_sessions (expires_at);

-- One row per lock or election name: the row every grant and hand-over of
-- that name locks FOR UPDATE first (kept, so it need not be made again).
CREATE TABLE IF NOT EXISTS fencekeeper_locks (
  kind text NOT NULL CHECK (kind IN ('lock', 'election')),
  name text NOT NULL,
  PRIMARY KEY (kind, name)
);

-- The queue: an entry per acquire or campaign, in arrival order (id); the
-- holder's entry carries the token (at most one per name), waiters none.
-- Every entry hangs on its session: deleting the session deletes them.
CREATE TABLE IF NOT EXISTS fencekeeper_lock_entries (
  id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind       text        NOT NULL,
  name       text        NOT NULL,
  session_id bigint      NOT NULL REFERENCES fencekeeper_lock_sessions (id) ON DELETE CASCADE,
  owner      text        NOT NULL,
  -- The acquire's own random key: an acquire whose reply was lost can still find (and delete) its entry.
  request    text        NOT NULL,
  token      bigint      CHECK (token > 0),
  joined_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  granted_at timestamptz,
  CHECK ((token IS NULL) = (granted_at IS NULL))
);
CREATE INDEX IF NOT EXISTS fencekeeper_lock_entries_queue ON fencekeeper_lock_entries (kind, name, id);
CREATE UNIQUE INDEX IF NOT EXISTS fencekeeper_lock_entries_holder ON fencekeeper_lock_entries (kind, name) WHERE token IS NOT NULL;
CREATE INDEX IF NOT EXISTS fencekeeper_lock_entries_session ON fencekeeper_lock_entries (session_id);

-- Lock a name's row (made on first use). The caller's transaction holds it
-- until it ends: every grant and hand-over of the name runs one at a time.
CREATE OR REPLACE FUNCTION fencekeeper_lock_row(p_kind text, p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM fencekeeper_locks WHERE kind = p_kind AND name = p_name FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO fencekeeper_locks (kind, name) VALUES (p_kind, p_name) ON CONFLICT DO NOTHING;
    PERFORM 1 FROM fencekeeper_locks WHERE kind = p_kind AND name = p_name FOR UPDATE;
  END IF;
END $$;

-- Delete the entries of a name whose sessions have expired (under the name's
-- row lock). The DELETE locks each entry, so it waits for a withLease
-- transaction that share-locked it. Answers how many it deleted.
CREATE OR REPLACE FUNCTION fencekeeper_lock_reap(p_kind text, p_name text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_count integer;
BEGIN
  DELETE FROM fencekeeper_lock_entries e
   USING fencekeeper_lock_sessions s
   WHERE e.kind = p_kind AND e.name = p_name AND s.id = e.session_id AND s.expires_at <= clock_timestamp();
  GET DIAGNOSTICS v_count = ROW_COUNT;
  RETURN v_count;
END $$;

-- With the name's row locked and its expired entries reaped: if nobody holds
-- the name, grant it to the first live waiter (its token taken now, in this
-- granting transaction) and NOTIFY that waiter's session alone, on commit.
-- Answers the entry granted, or NULL.
CREATE OR REPLACE FUNCTION fencekeeper_lock_promote(p_kind text, p_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
  v_channel text;
  v_token bigint;
BEGIN
  PERFORM 1 FROM fencekeeper_lock_entries WHERE kind = p_kind AND name = p_name AND token IS NOT NULL;
  IF FOUND THEN
    RETURN NULL;
  END IF;
  SELECT e.id, s.channel INTO v_id, v_channel
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.kind = p_kind AND e.name = p_name AND e.token IS NULL AND s.expires_at > clock_timestamp()
   ORDER BY e.id
   LIMIT 1
   FOR UPDATE OF e;
  IF v_id IS NULL THEN
    RETURN NULL;
  END IF;
  v_token := nextval('fencekeeper_lock_tokens');
  UPDATE fencekeeper_lock_entries SET token = v_token, granted_at = clock_timestamp() WHERE id = v_id;
  PERFORM pg_notify(v_channel, v_id::text || ' ' || v_token::text);
  RETURN v_id;
END $$;

-- How long (ms, on the database's clock) the holder of a name has left:
-- 0 when nobody holds it or its session has expired.
CREATE OR REPLACE FUNCTION fencekeeper_lock_holder_ms(p_kind text, p_name text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce(max(greatest(0, ceil(extract(epoch FROM (s.expires_at - clock_timestamp())) * 1000)))::bigint, 0)
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.kind = p_kind AND e.name = p_name AND e.token IS NOT NULL
$$;

-- Whether no live waiter of the entry's name is ahead of it.
CREATE OR REPLACE FUNCTION fencekeeper_lock_is_head(p_kind text, p_name text, p_id bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (
    SELECT 1 FROM fencekeeper_lock_entries w JOIN fencekeeper_lock_sessions s ON s.id = w.session_id
     WHERE w.kind = p_kind AND w.name = p_name AND w.token IS NULL AND w.id < p_id AND s.expires_at > clock_timestamp())
$$;

-- Open a session: its row, its lease from now on the database's clock, and
-- the identity of this database (cluster system identifier, database OID).
CREATE OR REPLACE FUNCTION fencekeeper_lock_session_open(p_channel text, p_owner text, p_lease_ms integer,
  OUT session_id bigint, OUT system_identifier text, OUT database_oid text)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  INSERT INTO fencekeeper_lock_sessions (channel, owner, lease_ms, expires_at)
  VALUES (p_channel, p_owner, p_lease_ms, clock_timestamp() + p_lease_ms * interval '1 millisecond')
  RETURNING id INTO session_id;
  SELECT c.system_identifier::text INTO system_identifier FROM pg_control_system() c;
  SELECT d.oid::text INTO database_oid FROM pg_database d WHERE d.datname = current_database();
END $$;

-- The heartbeat: renew the session's lease only while it has not expired
-- (never reviving one), and report on the entries the source still waits
-- with: granted (token), at the head, and how long the holder has left.
CREATE OR REPLACE FUNCTION fencekeeper_lock_heartbeat(p_session bigint, p_waiting bigint[],
  OUT renewed boolean, OUT ids text[], OUT tokens text[], OUT heads boolean[], OUT holder_ms text[])
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  UPDATE fencekeeper_lock_sessions SET expires_at = clock_timestamp() + lease_ms * interval '1 millisecond'
   WHERE id = p_session AND expires_at > clock_timestamp();
  renewed := FOUND;
  SELECT coalesce(array_agg(e.id::text ORDER BY e.id), '{}'),
         coalesce(array_agg(e.token::text ORDER BY e.id), '{}'),
         coalesce(array_agg(e.token IS NULL AND fencekeeper_lock_is_head(e.kind, e.name, e.id) ORDER BY e.id), '{}'),
         coalesce(array_agg(fencekeeper_lock_holder_ms(e.kind, e.name)::text ORDER BY e.id), '{}')
    INTO ids, tokens, heads, holder_ms
    FROM fencekeeper_lock_entries e
   WHERE e.session_id = p_session AND e.id = ANY (p_waiting);
END $$;

-- Join a name's queue (p_wait) or take it only if free (NOT p_wait).
-- status: 'granted' (token), 'waiting' (head, holder_ms), 'busy' (a try
-- that found it taken: nothing left behind), 'expired' (our session ended).
CREATE OR REPLACE FUNCTION fencekeeper_lock_enter(p_session bigint, p_kind text, p_name text, p_owner text, p_wait boolean, p_request text,
  OUT status text, OUT entry_id bigint, OUT token bigint, OUT head boolean, OUT holder_ms bigint, OUT reaped integer)
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  reaped := 0;
  PERFORM 1 FROM fencekeeper_lock_sessions WHERE id = p_session AND expires_at > clock_timestamp();
  IF NOT FOUND THEN
    status := 'expired';
    RETURN;
  END IF;
  PERFORM fencekeeper_lock_row(p_kind, p_name);
  reaped := fencekeeper_lock_reap(p_kind, p_name);
  PERFORM fencekeeper_lock_promote(p_kind, p_name);
  PERFORM 1 FROM fencekeeper_lock_entries e WHERE e.kind = p_kind AND e.name = p_name;
  IF NOT FOUND THEN
    token := nextval('fencekeeper_lock_tokens');
    INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, token, granted_at)
    VALUES (p_kind, p_name, p_session, p_owner, p_request, token, clock_timestamp())
    RETURNING id INTO entry_id;
    status := 'granted';
    RETURN;
  END IF;
  IF NOT p_wait THEN
    status := 'busy';
    RETURN;
  END IF;
  INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request) VALUES (p_kind, p_name, p_session, p_owner, p_request)
  RETURNING id INTO entry_id;
  head := fencekeeper_lock_is_head(p_kind, p_name, entry_id);
  holder_ms := fencekeeper_lock_holder_ms(p_kind, p_name);
  status := 'waiting';
END $$;

-- The head waiter's turn to look, at its holder's lease end: reap, promote,
-- and report on our entry ('gone' if it no longer exists).
CREATE OR REPLACE FUNCTION fencekeeper_lock_claim(p_session bigint, p_entry bigint,
  OUT status text, OUT token bigint, OUT head boolean, OUT holder_ms bigint, OUT reaped integer)
LANGUAGE plpgsql AS $$
DECLARE
  v_kind text;
  v_name text;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  reaped := 0;
  SELECT e.kind, e.name INTO v_kind, v_name FROM fencekeeper_lock_entries e WHERE e.id = p_entry AND e.session_id = p_session;
  IF NOT FOUND THEN
    status := 'gone';
    RETURN;
  END IF;
  PERFORM fencekeeper_lock_row(v_kind, v_name);
  reaped := fencekeeper_lock_reap(v_kind, v_name);
  PERFORM fencekeeper_lock_promote(v_kind, v_name);
  SELECT e.token INTO token FROM fencekeeper_lock_entries e WHERE e.id = p_entry;
  IF NOT FOUND THEN
    status := 'gone';
    RETURN;
  END IF;
  head := token IS NULL AND fencekeeper_lock_is_head(v_kind, v_name, p_entry);
  holder_ms := fencekeeper_lock_holder_ms(v_kind, v_name);
  status := CASE WHEN token IS NULL THEN 'waiting' ELSE 'granted' END;
END $$;

-- Leave a queue (a release, a resignation, a waiter that gives up): under
-- the name's row lock, delete our entry (waiting for a withLease transaction
-- on it to end) and hand the name to the next live waiter if it is free.
-- The entry is named by its id, or (p_entry NULL: an acquire whose reply was
-- lost) by its request key. Answers the entry granted, or NULL.
CREATE OR REPLACE FUNCTION fencekeeper_lock_leave(p_session bigint, p_entry bigint, p_request text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
  v_kind text;
  v_name text;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  SELECT e.id, e.kind, e.name INTO v_id, v_kind, v_name FROM fencekeeper_lock_entries e
   WHERE e.session_id = p_session AND (e.id = p_entry OR (p_entry IS NULL AND e.request = p_request));
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  PERFORM fencekeeper_lock_row(v_kind, v_name);
  DELETE FROM fencekeeper_lock_entries WHERE id = v_id;
  PERFORM fencekeeper_lock_reap(v_kind, v_name);
  RETURN fencekeeper_lock_promote(v_kind, v_name);
END $$;

-- End a session: every name it queues on, one at a time in (kind, name)
-- order, its entries deleted under the name's row lock and the name handed
-- on; then the session row. One transaction: every grant ends at once.
CREATE OR REPLACE FUNCTION fencekeeper_lock_session_close(p_session bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_count integer := 0;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  FOR r IN SELECT DISTINCT kind, name FROM fencekeeper_lock_entries WHERE session_id = p_session ORDER BY kind, name LOOP
    PERFORM fencekeeper_lock_row(r.kind, r.name);
    DELETE FROM fencekeeper_lock_entries WHERE session_id = p_session AND kind = r.kind AND name = r.name;
    PERFORM fencekeeper_lock_reap(r.kind, r.name);
    PERFORM fencekeeper_lock_promote(r.kind, r.name);
    v_count := v_count + 1;
  END LOOP;
  DELETE FROM fencekeeper_lock_sessions WHERE id = p_session;
  RETURN v_count;
END $$;

-- The bounded sweep: up to p_limit names with entries of expired sessions
-- are reaped and handed on (names another transaction has locked are
-- skipped: their next user reaps them), then expired sessions left without
-- entries are deleted. Answers the entries reaped.
CREATE OR REPLACE FUNCTION fencekeeper_lock_sweep(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_count integer := 0;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  FOR r IN
    SELECT l.kind, l.name FROM fencekeeper_locks l
     WHERE (l.kind, l.name) IN (
       SELECT e.kind, e.name FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
        WHERE s.expires_at <= clock_timestamp())
     ORDER BY l.kind, l.name
     LIMIT p_limit
     FOR UPDATE OF l SKIP LOCKED
  LOOP
    v_count := v_count + fencekeeper_lock_reap(r.kind, r.name);
    PERFORM fencekeeper_lock_promote(r.kind, r.name);
  END LOOP;
  DELETE FROM fencekeeper_lock_sessions s
   WHERE s.id IN (
     SELECT s2.id FROM fencekeeper_lock_sessions s2
      WHERE s2.expires_at <= clock_timestamp()
        AND NOT EXISTS (SELECT 1 FROM fencekeeper_lock_entries e WHERE e.session_id = s2.id)
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED);
  RETURN v_count;
END $$;
