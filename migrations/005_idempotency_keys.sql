-- fencekeeper 005: responses kept per Idempotency-Key, for the idempotency()
-- middleware's PostgresIdempotencyStore. One row per (scope, key): scope is
-- the server's partition of client keys (a client or tenant id; '' when the
-- server keeps one namespace), key the client's Idempotency-Key.
--
-- state: running    claimed by a request that has not answered yet (claim
--                   tells this request from a later one that claimed the key
--                   after the first ran past the store's limit);
--        completed  status, headers and body hold its response, replayed to
--                   retries with the same fingerprint until expires_at.
-- When the request writes through a PostgreSQL fence's transaction, the row
-- is written in that transaction and commits or rolls back with the
-- request's own writes.
CREATE TABLE IF NOT EXISTS fencekeeper_idempotency_keys (
  scope       text        NOT NULL,
  key         text        NOT NULL,
  -- sha256 of the request's method, target and body.
  fingerprint text        NOT NULL,
  state       text        NOT NULL CHECK (state IN ('running', 'completed')),
  claim       uuid        NOT NULL,
  status      integer,
  -- [[name, value], ...] of the selected response headers.
  headers     jsonb,
  -- NULL for a completed response whose body was too large to keep.
  body        bytea,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);

CREATE INDEX IF NOT EXISTS fencekeeper_idempotency_keys_expiry ON fencekeeper_idempotency_keys (expires_at);
