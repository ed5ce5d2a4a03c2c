-- fencekeeper 008: the table-binding re-check under REPEATABLE READ and
-- SERIALIZABLE (the bindings themselves are 007's table).
--
-- The row helpers' check of a table's binding reads the transaction's
-- snapshot at those levels, so a transaction whose snapshot predates a
-- bindTable() that committed since would write as if the table were unbound. As 003 does for tombstones, this probes
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
