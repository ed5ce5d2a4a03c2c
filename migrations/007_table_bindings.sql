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
