-- What PostgreSQL's lock functions cost as one name's queue grows (issue #35: the
-- handoff p50 at 1,000 waiters). A throw-away schema with the lock-source migrations,
-- 8 sessions, one holder and :n waiters on one name (spread over the sessions as the
-- scale bench's 8 sources spread theirs), then each function the enter / leave /
-- heartbeat paths call, timed in a loop on the server's clock (no round trip), and the
-- plan of holder_ms's query as a function runs it (a generic plan: kind is a parameter).
--   psql -X -q -h 127.0.0.1 -p PORT -U root -d test -v n=1000 -f test/bench/scale/pg-queue-cost.sql
-- -v before=1: the functions as of migration 014 (without 015), for a baseline in the same run.
-- -v stale=1: the table's statistics from before the queue formed (analyzed while another
-- name had a short queue, as the scale bench's points and any queue that forms between two
-- autovacuum runs see them), instead of ANALYZE after the queue is made.
-- Run it against a server of your own (the scale bench's: FK_PG_PORT of test/bench/scale.sh).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS fk_queue_cost CASCADE;
CREATE SCHEMA fk_queue_cost;
SET search_path = fk_queue_cost;
\i migrations/010_lock_source.sql
\i migrations/011_lock_observers.sql
\i migrations/012_lock_lease.sql
\i migrations/013_lock_kinds.sql
\i migrations/014_lock_holder_index.sql
\if :{?before}
\else
\i migrations/015_lock_queue_lookups.sql
\endif
INSERT INTO fencekeeper_lock_sessions (channel, owner, lease_ms, expires_at)
  SELECT 'c' || g, 'o', 30000, clock_timestamp() + interval '1 hour' FROM generate_series(1, 8) g;
INSERT INTO fencekeeper_locks VALUES ('lock', 'L');
\if :{?stale}
ALTER TABLE fencekeeper_lock_entries SET (autovacuum_enabled = false);
INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request) SELECT 'lock', 'earlier', 1 + (g % 8), 'o', 'e' || g FROM generate_series(1, 100) g;
ANALYZE;
DELETE FROM fencekeeper_lock_entries;
\endif
INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, token, granted_at) VALUES ('lock', 'L', 1, 'o', 'r0', 1, clock_timestamp());
INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request) SELECT 'lock', 'L', 1 + (g % 8), 'o', 'r' || g FROM generate_series(1, :n) g;
\if :{?stale}
\else
ANALYZE;
\endif
SET client_min_messages = notice;
DO $$
DECLARE t0 timestamptz; k int; r int := 200; last bigint; w bigint[]; h bigint; hs bigint; leave_ms numeric; enter_ms numeric;
BEGIN
  SELECT max(id) INTO last FROM fencekeeper_lock_entries;
  SELECT array_agg(id) INTO w FROM fencekeeper_lock_entries WHERE session_id = 2;
  t0 := clock_timestamp(); FOR k IN 1..r LOOP PERFORM fencekeeper_lock_reap('lock', 'L'); END LOOP;
  RAISE NOTICE 'reap (enter, leave)             % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000 / r, 3);
  t0 := clock_timestamp(); FOR k IN 1..r LOOP PERFORM fencekeeper_lock_is_head('lock', 'L', last); END LOOP;
  RAISE NOTICE 'is_head of the last (enter)     % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000 / r, 3);
  t0 := clock_timestamp(); FOR k IN 1..r LOOP PERFORM fencekeeper_lock_holder_ms('lock', 'L'); END LOOP;
  RAISE NOTICE 'holder_ms (enter, heartbeat)    % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000 / r, 3);
  t0 := clock_timestamp(); FOR k IN 1..r LOOP PERFORM fencekeeper_lock_promote('lock', 'L'); END LOOP;
  RAISE NOTICE 'promote, name held (enter)      % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000 / r, 3);
  -- The handoff path: the holder leaves (the next waiter is granted), and joins again at the tail.
  leave_ms := 0; enter_ms := 0;
  FOR k IN 1..100 LOOP
    SELECT e.id, e.session_id INTO h, hs FROM fencekeeper_lock_entries e WHERE e.kind = 'lock' AND e.name = 'L' AND e.token IS NOT NULL;
    t0 := clock_timestamp(); PERFORM fencekeeper_lock_leave(hs, h, NULL); leave_ms := leave_ms + extract(epoch FROM clock_timestamp() - t0) * 1000;
    t0 := clock_timestamp(); PERFORM fencekeeper_lock_enter(hs, 'lock', 'L', 'o', true, 'again' || k); enter_ms := enter_ms + extract(epoch FROM clock_timestamp() - t0) * 1000;
  END LOOP;
  RAISE NOTICE 'leave of the holder (release)   % ms', round(leave_ms / 100, 3);
  RAISE NOTICE 'enter, waiting (join)           % ms', round(enter_ms / 100, 3);
  t0 := clock_timestamp(); FOR k IN 1..3 LOOP PERFORM fencekeeper_lock_heartbeat(2, w); END LOOP;
  RAISE NOTICE 'heartbeat of a session with % waiting   % ms', coalesce(array_length(w, 1), 0), round(extract(epoch FROM clock_timestamp() - t0) * 1000 / 3, 3);
END $$;
-- holder_ms's query with kind a parameter, as inside the function (generic plan).
SET plan_cache_mode = force_generic_plan;
PREPARE holder(text, text) AS
  SELECT coalesce(min(greatest(0, ceil(extract(epoch FROM (s.expires_at - clock_timestamp())) * 1000)))::bigint, 0)
    FROM fencekeeper_lock_entries e JOIN fencekeeper_lock_sessions s ON s.id = e.session_id
   WHERE e.kind = $1 AND e.name = $2 AND e.token IS NOT NULL;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE holder('lock', 'L');
SET client_min_messages = warning;
DROP SCHEMA fk_queue_cost CASCADE;
