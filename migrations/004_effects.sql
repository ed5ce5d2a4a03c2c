-- fencekeeper 004: the effect ledger, for side effects outside any fenced
-- resource (a payment API, an SMTP server: systems that cannot check a
-- fencing token). One row per effect, keyed by the fenced resource and the
-- caller's effect key. withEffect() reads and writes it only while holding
-- the resource's fence row (fencekeeper_fences), so a holder whose token is
-- stale can neither record an intent nor an outcome.
--
-- state: pending   the intent was recorded and the outcome is not known (the
--                  call may have happened, may still be on its way, or may
--                  never have been sent);
--        succeeded the effect happened (result: its JSON text, when it had one);
--        failed    the effect definitely did not happen (failure: why).
-- deadline: the wall-clock instant after which the pending call can no
-- longer land at the outside system (the service enforces it, e.g. from a
-- request-deadline header); grace_ms bounds the clock difference between
-- the machines and the service's own processing time. NULL: no deadline, so
-- a "did not happen" can never be trusted.
-- The result and the failure details are JSON text, not jsonb: jsonb refuses
-- some strings JSON allows (\u0000, lone surrogates), and a result that
-- cannot be stored would leave an effect that did happen looking pending.
CREATE TABLE IF NOT EXISTS fencekeeper_effects (
  resource        text        NOT NULL,
  effect_key      text        NOT NULL,
  -- The key the outside system sees (derived from resource, key and attempt).
  idempotency_key text        NOT NULL,
  attempt         integer     NOT NULL CHECK (attempt > 0),
  state           text        NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed')),
  -- The fencing token that recorded the current state.
  token           bigint      NOT NULL CHECK (token > 0),
  deadline        timestamptz,
  grace_ms        integer     NOT NULL DEFAULT 0 CHECK (grace_ms >= 0),
  -- succeeded: true when `result` holds the result (NULL result: the effect returned nothing);
  -- false: the result could not be stored as JSON.
  result_stored   boolean,
  result          text,
  -- The latest definite failure: {"message": ..., "details": ...} as JSON text
  -- (kept while a retried attempt is pending).
  failure         text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (resource, effect_key)
);

-- pendingEffects(): what an operator must reconcile, oldest first.
CREATE INDEX IF NOT EXISTS fencekeeper_effects_pending ON fencekeeper_effects (updated_at) WHERE state = 'pending';
