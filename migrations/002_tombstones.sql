-- fencekeeper 002: tombstones. fencedDelete() removes a row but must not erase
-- its fence: the deleting token is kept here, keyed by the table (resolved to
-- "schema"."table" on the server, so spelling does not matter) and the row's
-- key as canonical jsonb built from the key columns' typed values. fencedInsert()
-- and fencedUpsert() refuse to re-create a row whose tombstone holds a larger
-- token, so an old holder cannot resurrect what a newer holder deleted.
CREATE TABLE IF NOT EXISTS fencekeeper_tombstones (
  relation   text        NOT NULL,
  row_key    jsonb       NOT NULL,
  token      bigint      NOT NULL CHECK (token > 0),
  deleted_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (relation, row_key)
);

-- Re-checks a tombstone with a fresh snapshot. Called from the RETURNING clause
-- of a fenced insert/upsert: a statement's own snapshot predates a concurrent
-- delete that the insert's unique check waited for, so only a VOLATILE function
-- (which takes a new snapshot per query under READ COMMITTED) sees the
-- tombstone that delete committed. Raising aborts the statement, so the
-- re-created row never commits. SQLSTATE FK409 is mapped to StaleTokenError.
CREATE OR REPLACE FUNCTION fencekeeper_check_tombstone(p_relation text, p_row_key jsonb, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_current bigint;
BEGIN
  SELECT t.token INTO v_current FROM fencekeeper_tombstones t
   WHERE t.relation = p_relation AND t.row_key = p_row_key;
  IF v_current IS NOT NULL AND v_current > p_token THEN
    RAISE EXCEPTION 'stale fencing token for %: presented %, deleted at %', p_relation, p_token, v_current
      USING ERRCODE = 'FK409', DETAIL = v_current::text;
  END IF;
  RETURN true;
END
$$;
