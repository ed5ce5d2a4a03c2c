-- fencekeeper 007: which lock guards a table's own token column. A row here
-- binds the table `relation` (the row helpers fencedUpdate, fencedInsert,
-- fencedUpsert and fencedDelete write its token column) to one lock: its
-- kind ('lock' or 'election'), its name and the identity of the source that
-- grants it. Tokens of different locks are not comparable, so every row
-- helper's statement on a bound table carries a check against this row: a
-- sequencer of another lock, and a bare token, write nothing. A table with no
-- row here was never bound and takes bare tokens and sequencers alike. Rows
-- are written only by bindTable(), once: a binding is never replaced
-- implicitly.
--
-- The key is the table itself (regclass: its oid, shown and dumped as its
-- name), not the name it had when it was bound: renaming the table or moving
-- it to another schema keeps its binding, so a rename never unbinds it
-- silently; pg_dump writes the name and a restore resolves it again
-- (pg_upgrade keeps table oids, and accepts regclass columns). A
-- binding outlives DROP TABLE (nothing else removes a binding either): a
-- table created later under the same name is unbound.
CREATE TABLE IF NOT EXISTS fencekeeper_table_bindings (
  relation    regclass    PRIMARY KEY,
  kind        text        NOT NULL CHECK (kind IN ('lock', 'election')),
  lock        text        NOT NULL,
  source_kind text        NOT NULL,
  source_id   text        NOT NULL,
  bound_at    timestamptz NOT NULL DEFAULT now()
);

-- Re-checks a table's binding under REPEATABLE READ and SERIALIZABLE. The
-- row helpers' check reads the transaction's snapshot at those levels, so a
-- transaction whose snapshot predates a bindTable() that committed since would
-- write as if the table were unbound. As 003 does for tombstones, this probes
-- the table's key in fencekeeper_table_bindings with an INSERT ... ON CONFLICT
-- DO NOTHING inside a subtransaction that is rolled back: a binding committed
-- after the snapshot (or one still being written) ends the statement with
-- SQLSTATE 40001, which the caller retries as any serialization failure; the
-- retry's snapshot sees the binding and is checked against it. The row
-- helpers call it only outside READ COMMITTED, whose every statement takes a
-- fresh snapshot that sees every committed binding.
CREATE OR REPLACE FUNCTION fencekeeper_check_table_binding(p_relation regclass)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  BEGIN
    INSERT INTO fencekeeper_table_bindings (relation, kind, lock, source_kind, source_id)
    VALUES (p_relation, 'lock', '', '', '')
    ON CONFLICT DO NOTHING;
    -- Undo the probe: the subtransaction of this block rolls back.
    RAISE EXCEPTION USING ERRCODE = 'FK000';
  EXCEPTION
    WHEN SQLSTATE 'FK000' THEN NULL;
    WHEN serialization_failure THEN
      RAISE EXCEPTION 'table % was bound to a lock after this % transaction took its snapshot; retry the transaction', p_relation, upper(current_setting('transaction_isolation'))
        USING ERRCODE = 'serialization_failure',
              HINT = 'A transaction whose snapshot predates bindTable() fails its fenced writes to that table this way; a retry is checked against the binding.';
  END;
  RETURN true;
END
$$;
