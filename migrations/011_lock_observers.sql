-- fencekeeper 011: observers of a PostgreSQL source's queues (observeLock).
-- An observer registers its (kind, name) under its session (deleted with it)
-- and LISTENs on the name's channel; a trigger on the queue NOTIFYs that
-- channel when the queue changes, and only while someone observes it (a
-- notifying commit takes a cluster-wide lock: unobserved queues never pay).

CREATE TABLE IF NOT EXISTS fencekeeper_lock_observers (
  session_id bigint NOT NULL REFERENCES fencekeeper_lock_sessions (id) ON DELETE CASCADE,
  kind       text   NOT NULL,
  name       text   NOT NULL,
  PRIMARY KEY (kind, name, session_id)
);
CREATE INDEX IF NOT EXISTS fencekeeper_lock_observers_session ON fencekeeper_lock_observers (session_id);

-- The channel of a name's observers: fixed length whatever the name (a channel is at most 63 bytes).
CREATE OR REPLACE FUNCTION fencekeeper_lock_observer_channel(p_kind text, p_name text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT 'fencekeeper_o_' || md5(p_kind || ':' || p_name)
$$;

CREATE OR REPLACE FUNCTION fencekeeper_lock_entries_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  v_kind text;
  v_name text;
BEGIN
  IF TG_OP = 'DELETE' THEN
    v_kind := OLD.kind;
    v_name := OLD.name;
  ELSE
    v_kind := NEW.kind;
    v_name := NEW.name;
  END IF;
  -- One notification per name and transaction: NOTIFY folds identical ones.
  PERFORM 1 FROM fencekeeper_lock_observers o WHERE o.kind = v_kind AND o.name = v_name LIMIT 1;
  IF FOUND THEN
    PERFORM pg_notify(fencekeeper_lock_observer_channel(v_kind, v_name), '');
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS fencekeeper_lock_entries_observed ON fencekeeper_lock_entries;
CREATE TRIGGER fencekeeper_lock_entries_observed
  AFTER INSERT OR UPDATE OR DELETE ON fencekeeper_lock_entries
  FOR EACH ROW EXECUTE FUNCTION fencekeeper_lock_entries_changed();

-- Register an observer of a name under a live session (idempotent); answers the channel to LISTEN on.
CREATE OR REPLACE FUNCTION fencekeeper_lock_observe(p_session bigint, p_kind text, p_name text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  INSERT INTO fencekeeper_lock_observers (session_id, kind, name) VALUES (p_session, p_kind, p_name) ON CONFLICT DO NOTHING;
  RETURN fencekeeper_lock_observer_channel(p_kind, p_name);
END $$;

CREATE OR REPLACE FUNCTION fencekeeper_lock_unobserve(p_session bigint, p_kind text, p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  DELETE FROM fencekeeper_lock_observers WHERE session_id = p_session AND kind = p_kind AND name = p_name;
END $$;

-- A name's queue for operators: live entries in grant order (the holder
-- first), and what the database says of its commit durability.
CREATE OR REPLACE FUNCTION fencekeeper_lock_queue(p_kind text, p_name text)
RETURNS TABLE (entry_id text, session_id text, owner text, token text, synchronous_commit text, synchronous_standby_names text)
LANGUAGE sql STABLE AS $$
  SELECT e.id::text, e.session_id::text, e.owner, e.token::text,
         current_setting('synchronous_commit'), current_setting('synchronous_standby_names')
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.kind = p_kind AND e.name = p_name AND s.expires_at > clock_timestamp()
   ORDER BY e.token IS NULL, e.id
$$;
