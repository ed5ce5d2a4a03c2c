-- fencekeeper 013: read-write locks and N-permit semaphores on the
-- PostgreSQL source (postgresSource's acquireReadLock / acquireWriteLock /
-- acquirePermit). Same tables, session, lease, reaping and withLease as the
-- plain lock (010-012): two more queue kinds.
--
--   kind 'rw'      one queue per name for its readers and writers (mode
--                  'read' / 'write'), apart from the plain lock's queue
--   kind 'permit'  one queue per name for its permits; a holder carries its
--                  slot in [0, permits), every entry the semaphore's size
--
-- Every grant and hand-over of a name still runs under its fencekeeper_locks
-- row lock, and a token is still nextval of fencekeeper_lock_tokens taken in
-- the granting transaction under that lock (010 says why that is strictly
-- increasing and never repeated). So:
--   * a writer is granted only once no entry holds: its token is larger
--     than every grant of the name before it, read or write; every grant
--     after it is larger than it. Readers granted together take theirs in
--     queue order, but hold together: a reader checks a fence, never
--     advances it;
--   * a permit takes its token when it claims its slot, under the name's
--     row lock (which covers every slot row of it): per slot, each holder's
--     token is larger than every earlier holder's of that slot, across
--     releases, crashes and expired sessions. A token taken at join time
--     would not be: holders leave slots in any order.
-- Fairness: waiters are granted in arrival order (entry id); a waiting
-- writer holds back every reader that joined after it; a permit waiter is
-- never overtaken by a later join (a join takes a free slot only while
-- nobody waits). Each grant NOTIFYs the one waiter it granted, on its
-- session's channel (payload "<entry> <token>" and, for a permit,
-- " <slot>"): a writer's release wakes the readers it lets in (each wake-up
-- a grant) or the next writer; a reader's or a permit's release wakes at
-- most the one waiter it lets in.

ALTER TABLE fencekeeper_locks DROP CONSTRAINT IF EXISTS fencekeeper_locks_kind_check;
ALTER TABLE fencekeeper_locks ADD CONSTRAINT fencekeeper_locks_kind_check CHECK (kind IN ('lock', 'election', 'rw', 'permit'));

ALTER TABLE fencekeeper_lock_entries
  ADD COLUMN IF NOT EXISTS mode    text    CHECK (mode IN ('read', 'write')),
  ADD COLUMN IF NOT EXISTS slot    integer CHECK (slot >= 0),
  ADD COLUMN IF NOT EXISTS permits integer CHECK (permits BETWEEN 1 AND 1024);
ALTER TABLE fencekeeper_lock_entries DROP CONSTRAINT IF EXISTS fencekeeper_lock_entries_kind_shape;
ALTER TABLE fencekeeper_lock_entries ADD CONSTRAINT fencekeeper_lock_entries_kind_shape CHECK (
  CASE kind
    WHEN 'rw' THEN mode IS NOT NULL AND slot IS NULL AND permits IS NULL
    WHEN 'permit' THEN mode IS NULL AND permits IS NOT NULL AND (slot IS NULL) = (token IS NULL) AND slot < permits
    ELSE mode IS NULL AND slot IS NULL AND permits IS NULL
  END);

-- One holder per plain lock or election (readers and permits hold together).
DROP INDEX IF EXISTS fencekeeper_lock_entries_holder;
CREATE UNIQUE INDEX IF NOT EXISTS fencekeeper_lock_entries_holder ON fencekeeper_lock_entries (kind, name) WHERE token IS NOT NULL AND kind IN ('lock', 'election');
-- One holder per slot of a semaphore.
CREATE UNIQUE INDEX IF NOT EXISTS fencekeeper_lock_entries_slot ON fencekeeper_lock_entries (name, slot) WHERE kind = 'permit' AND token IS NOT NULL;

-- The lowest free slot of a semaphore of p_permits permits (NULL: all held).
CREATE OR REPLACE FUNCTION fencekeeper_lock_free_slot(p_name text, p_permits integer) RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT min(g)::integer FROM generate_series(0, p_permits - 1) g
   WHERE NOT EXISTS (SELECT 1 FROM fencekeeper_lock_entries e WHERE e.kind = 'permit' AND e.name = p_name AND e.token IS NOT NULL AND e.slot = g)
$$;

-- Grant one waiting entry now (its token taken here) and NOTIFY its session.
CREATE OR REPLACE FUNCTION fencekeeper_lock_grant(p_id bigint, p_channel text, p_slot integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_token bigint;
BEGIN
  v_token := nextval('fencekeeper_lock_tokens');
  UPDATE fencekeeper_lock_entries SET token = v_token, granted_at = clock_timestamp(), slot = p_slot WHERE id = p_id AND token IS NULL;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM pg_notify(p_channel, p_id::text || ' ' || v_token::text || CASE WHEN p_slot IS NULL THEN '' ELSE ' ' || p_slot::text END);
  RETURN true;
END $$;

-- A read-write queue's hand-over: with no writer holding, grant the live
-- waiters in arrival order up to the first writer; that writer only if
-- nothing holds. Answers the first entry granted, or NULL.
CREATE OR REPLACE FUNCTION fencekeeper_lock_promote_rw(p_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_held integer;
  v_writer boolean;
  v_first bigint;
BEGIN
  SELECT count(*), coalesce(bool_or(mode = 'write'), false) INTO v_held, v_writer
    FROM fencekeeper_lock_entries WHERE kind = 'rw' AND name = p_name AND token IS NOT NULL;
  IF v_writer THEN
    RETURN NULL;
  END IF;
  FOR r IN
    SELECT e.id, e.mode, s.channel
      FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
     WHERE e.kind = 'rw' AND e.name = p_name AND e.token IS NULL AND s.expires_at > clock_timestamp()
     ORDER BY e.id
  LOOP
    IF r.mode = 'write' AND v_held > 0 THEN
      EXIT;
    END IF;
    IF fencekeeper_lock_grant(r.id, r.channel, NULL) THEN
      v_first := coalesce(v_first, r.id);
      v_held := v_held + 1;
    END IF;
    EXIT WHEN r.mode = 'write';
  END LOOP;
  RETURN v_first;
END $$;

-- A semaphore's hand-over: each free slot, lowest first, to the next live
-- waiter in arrival order. Answers the first entry granted, or NULL.
CREATE OR REPLACE FUNCTION fencekeeper_lock_promote_permit(p_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_permits integer;
  v_slot integer;
  v_first bigint;
BEGIN
  SELECT permits INTO v_permits FROM fencekeeper_lock_entries WHERE kind = 'permit' AND name = p_name LIMIT 1;
  IF v_permits IS NULL THEN
    RETURN NULL;
  END IF;
  FOR r IN
    SELECT e.id, s.channel
      FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
     WHERE e.kind = 'permit' AND e.name = p_name AND e.token IS NULL AND s.expires_at > clock_timestamp()
     ORDER BY e.id
  LOOP
    v_slot := fencekeeper_lock_free_slot(p_name, v_permits);
    EXIT WHEN v_slot IS NULL;
    IF fencekeeper_lock_grant(r.id, r.channel, v_slot) THEN
      v_first := coalesce(v_first, r.id);
    END IF;
  END LOOP;
  RETURN v_first;
END $$;

-- 010's hand-over, now by kind: every caller (enter, claim, leave, session
-- close, sweep) hands read-write queues and semaphores on by their rules.
CREATE OR REPLACE FUNCTION fencekeeper_lock_promote(p_kind text, p_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
  v_channel text;
BEGIN
  IF p_kind = 'rw' THEN
    RETURN fencekeeper_lock_promote_rw(p_name);
  ELSIF p_kind = 'permit' THEN
    RETURN fencekeeper_lock_promote_permit(p_name);
  END IF;
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
  PERFORM fencekeeper_lock_grant(v_id, v_channel, NULL);
  RETURN v_id;
END $$;

-- How long (ms, database clock) until a holder of the name may be gone: the
-- earliest lease end among its holders (a plain lock has one; a waiting
-- writer or permit is let in as soon as the first of several holders ends).
-- 0 when nobody holds it or a holder's session has expired.
CREATE OR REPLACE FUNCTION fencekeeper_lock_holder_ms(p_kind text, p_name text) RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT coalesce(min(greatest(0, ceil(extract(epoch FROM (s.expires_at - clock_timestamp())) * 1000)))::bigint, 0)
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.kind = p_kind AND e.name = p_name AND e.token IS NOT NULL
$$;

-- Join a read-write queue (p_mode 'read' / 'write') or a semaphore (p_kind
-- 'permit', p_permits), or take it only if that can be granted at once
-- (NOT p_wait). status as fencekeeper_lock_enter's, and 'mismatch': the
-- semaphore is in use with another number of permits (permits_in_use).
CREATE OR REPLACE FUNCTION fencekeeper_lock_enter_kind(p_session bigint, p_kind text, p_name text, p_owner text, p_wait boolean, p_request text,
  p_mode text, p_permits integer,
  OUT status text, OUT entry_id bigint, OUT token bigint, OUT slot integer, OUT head boolean, OUT holder_ms bigint, OUT reaped integer, OUT permits_in_use integer)
LANGUAGE plpgsql AS $$
DECLARE
  v_now boolean;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  reaped := 0;
  IF p_kind NOT IN ('rw', 'permit') THEN
    RAISE EXCEPTION 'fencekeeper_lock_enter_kind: unknown kind %', p_kind;
  END IF;
  PERFORM 1 FROM fencekeeper_lock_sessions WHERE id = p_session AND expires_at > clock_timestamp();
  IF NOT FOUND THEN
    status := 'expired';
    RETURN;
  END IF;
  PERFORM fencekeeper_lock_row(p_kind, p_name);
  reaped := fencekeeper_lock_reap(p_kind, p_name);
  IF p_kind = 'permit' THEN
    SELECT e.permits INTO permits_in_use FROM fencekeeper_lock_entries e WHERE e.kind = 'permit' AND e.name = p_name AND e.permits <> p_permits LIMIT 1;
    IF permits_in_use IS NOT NULL THEN
      status := 'mismatch';
      RETURN;
    END IF;
  END IF;
  PERFORM fencekeeper_lock_promote(p_kind, p_name);
  -- After the hand-over, the queue is settled: a reader waits only behind a
  -- writer, a permit only while every slot is held.
  IF p_kind = 'rw' THEN
    v_now := NOT EXISTS (SELECT 1 FROM fencekeeper_lock_entries e WHERE e.kind = 'rw' AND e.name = p_name AND (p_mode = 'write' OR e.mode = 'write'));
  ELSE
    v_now := NOT EXISTS (SELECT 1 FROM fencekeeper_lock_entries e WHERE e.kind = 'permit' AND e.name = p_name AND e.token IS NULL);
    IF v_now THEN
      slot := fencekeeper_lock_free_slot(p_name, p_permits);
      v_now := slot IS NOT NULL;
    END IF;
  END IF;
  IF v_now THEN
    token := nextval('fencekeeper_lock_tokens');
    INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, token, granted_at, mode, slot, permits)
    VALUES (p_kind, p_name, p_session, p_owner, p_request, token, clock_timestamp(), CASE WHEN p_kind = 'rw' THEN p_mode END, slot,
            CASE WHEN p_kind = 'permit' THEN p_permits END)
    RETURNING id INTO entry_id;
    status := 'granted';
    RETURN;
  END IF;
  slot := NULL;
  IF NOT p_wait THEN
    status := 'busy';
    RETURN;
  END IF;
  INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, mode, permits)
  VALUES (p_kind, p_name, p_session, p_owner, p_request, CASE WHEN p_kind = 'rw' THEN p_mode END, CASE WHEN p_kind = 'permit' THEN p_permits END)
  RETURNING id INTO entry_id;
  head := fencekeeper_lock_is_head(p_kind, p_name, entry_id);
  holder_ms := fencekeeper_lock_holder_ms(p_kind, p_name);
  status := 'waiting';
END $$;

-- A read-write queue or semaphore for operators: live entries, holders
-- first (in grant order), then waiters in arrival order, with mode and slot.
CREATE OR REPLACE FUNCTION fencekeeper_lock_queue_kind(p_kind text, p_name text)
RETURNS TABLE (entry_id text, session_id text, owner text, token text, mode text, slot integer, permits integer)
LANGUAGE sql STABLE AS $$
  SELECT e.id::text, e.session_id::text, e.owner, e.token::text, e.mode, e.slot, e.permits
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.kind = p_kind AND e.name = p_name AND s.expires_at > clock_timestamp()
   ORDER BY e.token IS NULL, e.token, e.id
$$;

-- An entry's slot (a permit granted by a claim or reported by a heartbeat: the NOTIFY carries it otherwise).
CREATE OR REPLACE FUNCTION fencekeeper_lock_slot(p_session bigint, p_entry bigint) RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT slot FROM fencekeeper_lock_entries WHERE id = p_entry AND session_id = p_session
$$;
