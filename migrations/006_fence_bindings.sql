-- fencekeeper 006: which lock guards a fence. A row here binds the fence of
-- `resource` (fencekeeper_fences) to one lock: its kind ('lock' or
-- 'election': they can share a name), its name and the identity of the
-- source that grants it. Tokens of different locks, or of different
-- sources, are not comparable, so an admission to a bound fence must present
-- a sequencer of exactly this lock: another lock's sequencer, and a bare
-- token, are refused and change nothing. A fence with no row here was never
-- bound and admits bare tokens and sequencers alike. Rows are written only
-- by bindFence(), once: a binding is never replaced implicitly.
CREATE TABLE IF NOT EXISTS fencekeeper_fence_bindings (
  resource    text        PRIMARY KEY,
  kind        text        NOT NULL CHECK (kind IN ('lock', 'election')),
  lock        text        NOT NULL,
  source_kind text        NOT NULL,
  source_id   text        NOT NULL,
  bound_at    timestamptz NOT NULL DEFAULT now()
);
