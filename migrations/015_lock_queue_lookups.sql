-- fencekeeper 015: a release and a join of the PostgreSQL source cost the
-- same whatever the length of the name's queue. Statements under the name's
-- row lock read every entry of the name, on every enter and every leave
-- (the handoff path), however few of them they needed:
--   * the reap (010) joined the name's entries to their sessions to find
--     the expired ones: unless the planner's statistics steered it to start
--     from the sessions, it walked the whole queue and looked each entry's
--     session up (1,000 waiters: 1.4 ms per call on a test server). A table that
--     grew since it was last analyzed (a queue that filled in seconds, a
--     server with autovacuum off) planned it that way;
--   * the enter asked whether the name has any entry with PERFORM, which
--     runs its query to the end: it read the whole queue to learn that it
--     was not empty;
--   * the leave found its entry by session with `id = p_entry OR (p_entry
--     IS NULL AND request = p_request)`, which no index answers as an id:
--     it read every entry of the session (a process with many waiters);
--   * the hand-over found the first live waiter by joining the queue to the
--     sessions, ordered by entry id: planned for a name the statistics had
--     not seen yet (a queue that formed since the last ANALYZE: its name
--     estimated at a row or two), that became a hash join of the whole
--     queue and a sort, and the read-write and permit hand-overs' loops, and
--     the test for the head of the queue, were planned the same way.
-- Now the reap starts from the expired sessions (normally none: the
-- sessions table and its expiry index are small) and deletes each one's
-- entries of the name through an index on (session_id, kind, name); the
-- leave looks its entry up by primary key (by session and request key only
-- when the acquire's reply was lost); the next live waiter is found one
-- entry at a time through an index of waiters alone, its session looked up
-- by key (fencekeeper_lock_next_waiter); and whether a name has entries,
-- waiters, a writer holding, or how many permits, is asked of an index as a
-- row comparison in the index's own order, which no plan but a walk of that
-- index answers, whatever the statistics say (an EXISTS by `kind = ... AND
-- name = ...` was planned as a sequential scan once the statistics put the
-- name at a share of the table). What each function does is unchanged: the
-- same entries reaped (each DELETE still waits for a withLease transaction
-- that share-locked its entry), the same grants in the same order, tokens
-- still taken in the granting transaction under the name's row lock.
-- The heartbeat, last below, asks for each name's head and holder once.

-- A session's entries of one name: the reap's and the session close's
-- DELETE, the close's list of names, and (by its first column) every
-- lookup by session that the index on session_id alone served.
CREATE INDEX IF NOT EXISTS fencekeeper_lock_entries_session_name ON fencekeeper_lock_entries (session_id, kind, name);
DROP INDEX IF EXISTS fencekeeper_lock_entries_session;

-- (The small lookups below are plpgsql, not SQL functions: a SQL function
-- with a subquery is not inlined, and is parsed and planned again in every
-- transaction that calls it, some 0.1 ms; plpgsql keeps its plans for the
-- connection.)

-- A name's waiters in arrival order, holders left out: the next waiter is
-- this index's first entry of the name, however many hold (a semaphore's
-- permits, a read lock's readers).
CREATE INDEX IF NOT EXISTS fencekeeper_lock_entries_waiters ON fencekeeper_lock_entries (kind, name, id) WHERE token IS NULL;

-- Delete the entries of a name whose sessions have expired (under the name's
-- row lock). The DELETE locks each entry, so it waits for a withLease
-- transaction that share-locked it. Answers how many it deleted.
CREATE OR REPLACE FUNCTION fencekeeper_lock_reap(p_kind text, p_name text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_session bigint;
  v_deleted integer;
  v_count integer := 0;
BEGIN
  -- From the expired sessions to their entries, never from the name's queue
  -- to its sessions: the queue may be thousands long, expired sessions are few.
  FOR v_session IN SELECT s.id FROM fencekeeper_lock_sessions s WHERE s.expires_at <= clock_timestamp() ORDER BY s.id LOOP
    DELETE FROM fencekeeper_lock_entries e WHERE e.session_id = v_session AND e.kind = p_kind AND e.name = p_name;
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    v_count := v_count + v_deleted;
  END LOOP;
  RETURN v_count;
END $$;

-- Whether a name has any entry: the first entry at or after (kind, name)
-- in the queue index, and is it this name's. Not PERFORM (which reads the
-- whole queue to set FOUND), nor EXISTS with `kind = p_kind AND name =
-- p_name` (which, with statistics that put a name's entries at a share of
-- the table, was planned as a sequential scan that read other names' first):
-- ordered by the index's columns, only the index answers it.
CREATE OR REPLACE FUNCTION fencekeeper_lock_queued(p_kind text, p_name text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT e.kind = p_kind AND e.name = p_name FROM fencekeeper_lock_entries e
                    WHERE (e.kind, e.name) >= (p_kind, p_name) ORDER BY e.kind, e.name LIMIT 1), false);
END $$;

-- Whether a name has a waiter, asked of the waiters index in its order.
CREATE OR REPLACE FUNCTION fencekeeper_lock_waiting(p_kind text, p_name text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT e.kind = p_kind AND e.name = p_name FROM fencekeeper_lock_entries e
                    WHERE (e.kind, e.name) >= (p_kind, p_name) AND e.token IS NULL ORDER BY e.kind, e.name LIMIT 1), false);
END $$;

-- A semaphore's number of permits, as its first entry in the queue index
-- says (NULL: no entry). Every entry of a semaphore carries the same.
CREATE OR REPLACE FUNCTION fencekeeper_lock_permits(p_name text) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT CASE WHEN e.kind = 'permit' AND e.name = p_name THEN e.permits END FROM fencekeeper_lock_entries e
           WHERE (e.kind, e.name) >= ('permit', p_name) ORDER BY e.kind, e.name LIMIT 1);
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
  IF NOT fencekeeper_lock_queued(p_kind, p_name) THEN
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
  -- Two statements, not one with an OR: each has an index that answers it.
  -- By primary key: `session_id + 0` is compared on the row found, never
  -- through an index (a session the statistics had not seen was estimated
  -- at no rows, and the plan read all its entries through the session index).
  IF p_entry IS NOT NULL THEN
    SELECT e.id, e.kind, e.name INTO v_id, v_kind, v_name FROM fencekeeper_lock_entries e
     WHERE e.id = p_entry AND e.session_id + 0 = p_session;
  ELSE
    SELECT e.id, e.kind, e.name INTO v_id, v_kind, v_name FROM fencekeeper_lock_entries e
     WHERE e.session_id = p_session AND e.request = p_request;
  END IF;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  PERFORM fencekeeper_lock_row(v_kind, v_name);
  DELETE FROM fencekeeper_lock_entries WHERE id = v_id;
  PERFORM fencekeeper_lock_reap(v_kind, v_name);
  RETURN fencekeeper_lock_promote(v_kind, v_name);
END $$;


-- The first waiter of a name after entry p_after (0: the first of all) whose
-- session is live: its entry, mode (read-write queues) and channel; NULLs
-- when there is none. One waiter at a time, in id order, each one's session
-- by its key: the cost is the waiters of expired sessions passed over
-- (reaped before every hand-over), never the queue's length.
CREATE OR REPLACE FUNCTION fencekeeper_lock_next_waiter(p_kind text, p_name text, p_after bigint,
  OUT next_id bigint, OUT next_mode text, OUT next_channel text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_after bigint := p_after;
  v_session bigint;
  v_ours boolean;
BEGIN
  LOOP
    -- The next entry of the waiters index after (kind, name, v_after), the
    -- name checked on the row found. Asked as a row comparison ordered by the
    -- index's three columns, which only an index on them answers without
    -- reading the table: with `kind = p_kind AND name = p_name ... ORDER BY
    -- id`, a name the statistics had not seen was estimated at a row or two,
    -- and the plan could walk the primary key from the table's first entry.
    SELECT e.id, e.mode, e.session_id, e.kind = p_kind AND e.name = p_name INTO next_id, next_mode, v_session, v_ours
      FROM fencekeeper_lock_entries e
     WHERE (e.kind, e.name, e.id) > (p_kind, p_name, v_after) AND e.token IS NULL
     ORDER BY e.kind, e.name, e.id
     LIMIT 1;
    IF NOT FOUND OR NOT v_ours THEN
      next_id := NULL;
      next_mode := NULL;
      RETURN;
    END IF;
    SELECT s.channel INTO next_channel FROM fencekeeper_lock_sessions s WHERE s.id = v_session AND s.expires_at > clock_timestamp();
    IF FOUND THEN
      RETURN;
    END IF;
    v_after := next_id;
  END LOOP;
END $$;

-- Whether no live waiter of the entry's name is ahead of it.
CREATE OR REPLACE FUNCTION fencekeeper_lock_is_head(p_kind text, p_name text, p_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT w.next_id FROM fencekeeper_lock_next_waiter(p_kind, p_name, 0) w) >= p_id, true);
END $$;

-- 013's hand-over of a plain lock or election, and the dispatch by kind:
-- with nobody holding the name, grant it to the first live waiter (its
-- token taken now, in this granting transaction) and NOTIFY that waiter's
-- session alone, on commit. Answers the entry granted, or NULL. The grant's
-- UPDATE locks the waiter's entry (013 locked it with FOR UPDATE first).
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
  IF EXISTS (SELECT 1 FROM fencekeeper_lock_entries WHERE kind = p_kind AND name = p_name AND token IS NOT NULL) THEN
    RETURN NULL;
  END IF;
  SELECT w.next_id, w.next_channel INTO v_id, v_channel FROM fencekeeper_lock_next_waiter(p_kind, p_name, 0) w;
  IF v_id IS NULL THEN
    RETURN NULL;
  END IF;
  PERFORM fencekeeper_lock_grant(v_id, v_channel, NULL);
  RETURN v_id;
END $$;

-- A read-write queue's hand-over: with no writer holding, grant the live
-- waiters in arrival order up to the first writer; that writer only if
-- nothing holds. Answers the first entry granted, or NULL.
CREATE OR REPLACE FUNCTION fencekeeper_lock_promote_rw(p_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_held integer;
  v_writer boolean;
  v_first bigint;
  v_after bigint := 0;
  v_id bigint;
  v_mode text;
  v_channel text;
BEGIN
  SELECT count(*), coalesce(bool_or(mode = 'write'), false) INTO v_held, v_writer
    FROM fencekeeper_lock_entries WHERE kind = 'rw' AND name = p_name AND token IS NOT NULL;
  IF v_writer THEN
    RETURN NULL;
  END IF;
  LOOP
    SELECT w.next_id, w.next_mode, w.next_channel INTO v_id, v_mode, v_channel FROM fencekeeper_lock_next_waiter('rw', p_name, v_after) w;
    EXIT WHEN v_id IS NULL;
    IF v_mode = 'write' AND v_held > 0 THEN
      EXIT;
    END IF;
    IF fencekeeper_lock_grant(v_id, v_channel, NULL) THEN
      v_first := coalesce(v_first, v_id);
      v_held := v_held + 1;
    END IF;
    EXIT WHEN v_mode = 'write';
    v_after := v_id;
  END LOOP;
  RETURN v_first;
END $$;

-- A semaphore's hand-over: each free slot, lowest first, to the next live
-- waiter in arrival order. Answers the first entry granted, or NULL.
CREATE OR REPLACE FUNCTION fencekeeper_lock_promote_permit(p_name text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_permits integer;
  v_slot integer;
  v_first bigint;
  v_after bigint := 0;
  v_id bigint;
  v_channel text;
BEGIN
  v_permits := fencekeeper_lock_permits(p_name);
  IF v_permits IS NULL THEN
    RETURN NULL;
  END IF;
  LOOP
    v_slot := fencekeeper_lock_free_slot(p_name, v_permits);
    EXIT WHEN v_slot IS NULL;
    SELECT w.next_id, w.next_channel INTO v_id, v_channel FROM fencekeeper_lock_next_waiter('permit', p_name, v_after) w;
    EXIT WHEN v_id IS NULL;
    IF fencekeeper_lock_grant(v_id, v_channel, v_slot) THEN
      v_first := coalesce(v_first, v_id);
    END IF;
    v_after := v_id;
  END LOOP;
  RETURN v_first;
END $$;

-- 013's join of a read-write queue or a semaphore, its check of the
-- semaphore's size by one entry.
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
  v_writer boolean;
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
    -- Every entry of a semaphore carries the same number of permits (each
    -- join is checked here, under the name's row lock): one entry tells.
    -- Asking for an entry with another number read the whole queue when
    -- there was none.
    permits_in_use := fencekeeper_lock_permits(p_name);
    IF permits_in_use = p_permits THEN
      permits_in_use := NULL;
    ELSIF permits_in_use IS NOT NULL THEN
      status := 'mismatch';
      RETURN;
    END IF;
  END IF;
  PERFORM fencekeeper_lock_promote(p_kind, p_name);
  -- After the hand-over, the queue is settled: a reader waits only behind a
  -- writer, a permit only while every slot is held.
  -- (Asked of the indexes in their order, as fencekeeper_lock_queued says
  -- why: a writer goes now if the queue is empty; a reader if nobody waits,
  -- every waiter being behind a writer, and no writer holds, a writer
  -- holding alone.)
  IF p_kind = 'rw' THEN
    IF p_mode = 'write' THEN
      v_now := NOT fencekeeper_lock_queued(p_kind, p_name);
    ELSE
      SELECT e.kind = p_kind AND e.name = p_name AND e.mode = 'write' INTO v_writer FROM fencekeeper_lock_entries e
       WHERE (e.kind, e.name) >= (p_kind, p_name) AND e.token IS NOT NULL ORDER BY e.kind, e.name LIMIT 1;
      v_now := NOT coalesce(v_writer, false) AND NOT fencekeeper_lock_waiting(p_kind, p_name);
    END IF;
  ELSE
    v_now := NOT fencekeeper_lock_waiting(p_kind, p_name);
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

-- The heartbeat (010), its report asked once per name rather than once per
-- entry: a session waiting with many entries on one name (a process with
-- hundreds of waiters) asked for that name's head and holder's lease once
-- for each of them, every third of a lease (125 waiting entries: some 11 ms
-- of the server's time per beat). An entry is at the head when no live
-- waiter is ahead of it: the name's first live waiter is it, or none is.
CREATE OR REPLACE FUNCTION fencekeeper_lock_heartbeat(p_session bigint, p_waiting bigint[],
  OUT renewed boolean, OUT ids text[], OUT tokens text[], OUT heads boolean[], OUT holder_ms text[])
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  UPDATE fencekeeper_lock_sessions SET expires_at = clock_timestamp() + lease_ms * interval '1 millisecond'
   WHERE id = p_session AND expires_at > clock_timestamp();
  renewed := FOUND;
  WITH ours AS MATERIALIZED (
    SELECT e.id, e.kind, e.name, e.token FROM fencekeeper_lock_entries e
     WHERE e.session_id = p_session AND e.id = ANY (p_waiting)
  ), names AS MATERIALIZED (
    SELECT n.kind, n.name,
           (SELECT w.next_id FROM fencekeeper_lock_next_waiter(n.kind, n.name, 0) w) AS head_id,
           fencekeeper_lock_holder_ms(n.kind, n.name) AS holder_ms
      FROM (SELECT DISTINCT o.kind, o.name FROM ours o) n
  )
  SELECT coalesce(array_agg(o.id::text ORDER BY o.id), '{}'),
         coalesce(array_agg(o.token::text ORDER BY o.id), '{}'),
         coalesce(array_agg(o.token IS NULL AND coalesce(n.head_id >= o.id, true) ORDER BY o.id), '{}'),
         coalesce(array_agg(n.holder_ms::text ORDER BY o.id), '{}')
    INTO ids, tokens, heads, holder_ms
    FROM ours o JOIN names n ON n.kind = o.kind AND n.name = o.name;
END $$;
