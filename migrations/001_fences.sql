-- fencekeeper 001: the fence table. One row per resource: the largest fencing
-- token the resource has admitted (its high-water mark). A write carrying a
-- smaller token is refused; equal passes (the same holder writes many times);
-- larger advances the mark. withFence() and PostgresFenceStore hold this row's
-- lock for the whole transaction they protect, so holders of one resource are
-- serialized.
CREATE TABLE IF NOT EXISTS fencekeeper_fences (
  resource       text        PRIMARY KEY,
  token          bigint      NOT NULL CHECK (token > 0),
  -- The mark before the latest admission (NULL: the first token this resource saw).
  previous_token bigint,
  updated_at     timestamptz NOT NULL DEFAULT now()
);
