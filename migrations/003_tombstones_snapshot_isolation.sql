-- fencekeeper 003: the tombstone re-check under REPEATABLE READ and SERIALIZABLE.
-- Under those levels every query of a transaction reads the transaction's
-- snapshot, the VOLATILE function of 002 included. A stale holder whose
-- snapshot predates a newer holder's fencedDelete() sees neither the tombstone
-- nor (once the delete committed) a row in the way, so its fenced insert or
-- upsert would bring the deleted row back; SERIALIZABLE's own checks miss it
-- too when the deleter ran under READ COMMITTED.
--
-- The unique index sees what the snapshot does not: an INSERT ... ON CONFLICT
-- DO NOTHING whose conflicting row is not visible to the transaction's
-- snapshot fails with a serialization failure at these levels (the executor
-- checks the conflicting row against the snapshot: ExecCheckTupleVisible in
-- src/backend/executor/nodeModifyTable.c). So after the visible
-- check, the function probes the tombstone key that way inside a
-- subtransaction and rolls the probe back: a tombstone committed after the
-- snapshot (or one still being written) ends in SQLSTATE 40001, which the
-- caller retries as any serialization failure; the retry's snapshot then sees
-- the tombstone and is refused with FK409. READ COMMITTED skips the probe: its
-- fresh snapshot already sees every committed tombstone.
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
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    BEGIN
      INSERT INTO fencekeeper_tombstones (relation, row_key, token)
      VALUES (p_relation, p_row_key, p_token)
      ON CONFLICT DO NOTHING;
      -- Undo the probe: the subtransaction of this block rolls back.
      RAISE EXCEPTION USING ERRCODE = 'FK000';
    EXCEPTION
      WHEN SQLSTATE 'FK000' THEN NULL;
      WHEN serialization_failure THEN
        RAISE EXCEPTION 'a newer holder deleted the row % of % after this % transaction took its snapshot; retry the transaction', p_row_key, p_relation, upper(current_setting('transaction_isolation'))
          USING ERRCODE = 'serialization_failure',
                HINT = 'Under REPEATABLE READ and SERIALIZABLE a fenced insert or upsert racing a fenced delete fails this way; a retry sees the delete and is refused as stale.';
    END;
  END IF;
  RETURN true;
END
$$;
