-- fencekeeper (MySQL/MariaDB) 001: the fence tables, applied by
-- migrate() from fencekeeper/mysql. The statements are run one at a time (a
-- pool need not allow multipleStatements), split at a `;` that ends a line:
-- no statement here holds one anywhere else. MySQL commits DDL implicitly, so
-- every statement is written to be run again harmlessly (IF NOT EXISTS).
--
-- Names are VARBINARY: compared byte for byte, so a resource never matches
-- another spelling by a collation's case folding or trailing-space padding.
-- Tokens are BIGINT (1..2^63-1) and are always read back as text.

-- One row per resource: the largest token it has admitted (its mark).
-- withFence() and MySqlFenceStore hold this row's lock (SELECT ... FOR
-- UPDATE) for the transaction they protect.
CREATE TABLE IF NOT EXISTS fencekeeper_fences (
  resource       VARBINARY(1024) NOT NULL PRIMARY KEY,
  token          BIGINT          NOT NULL,
  -- The mark before the latest advance (NULL: the first token this resource saw).
  previous_token BIGINT          NULL,
  updated_at     DATETIME(6)     NOT NULL,
  CONSTRAINT fencekeeper_fences_token_positive CHECK (token > 0)
) ENGINE = InnoDB;

-- fencedDelete() removes a row but keeps its fence here: the table
-- (`database.table`) and the row's key (JSON of the key columns' values as
-- text), with the deleting token. fencedInsert()/fencedUpsert() refuse to
-- re-create a row whose tombstone is larger.
CREATE TABLE IF NOT EXISTS fencekeeper_tombstones (
  relation   VARBINARY(256)  NOT NULL,
  row_key    VARBINARY(1024) NOT NULL,
  token      BIGINT          NOT NULL,
  deleted_at DATETIME(6)     NOT NULL,
  PRIMARY KEY (relation, row_key),
  CONSTRAINT fencekeeper_tombstones_token_positive CHECK (token > 0)
) ENGINE = InnoDB;

-- Which lock guards a fence (bindFence): admissions must present a
-- sequencer of exactly this lock. `lock_name`, not `lock`: LOCK is reserved.
CREATE TABLE IF NOT EXISTS fencekeeper_fence_bindings (
  resource    VARBINARY(1024) NOT NULL PRIMARY KEY,
  kind        VARBINARY(16)   NOT NULL,
  lock_name   VARBINARY(2048) NOT NULL,
  source_kind VARBINARY(256)  NOT NULL,
  source_id   VARBINARY(2048) NOT NULL,
  bound_at    DATETIME(6)     NOT NULL,
  CONSTRAINT fencekeeper_fence_bindings_kind CHECK (kind IN ('lock', 'election'))
) ENGINE = InnoDB;

-- Which lock guards a table's own token column (bindTable): every row
-- helper's write to `relation` (`database.table`) checks it in its statement.
CREATE TABLE IF NOT EXISTS fencekeeper_table_bindings (
  relation    VARBINARY(256)  NOT NULL PRIMARY KEY,
  kind        VARBINARY(16)   NOT NULL,
  lock_name   VARBINARY(2048) NOT NULL,
  source_kind VARBINARY(256)  NOT NULL,
  source_id   VARBINARY(2048) NOT NULL,
  bound_at    DATETIME(6)     NOT NULL,
  CONSTRAINT fencekeeper_table_bindings_kind CHECK (kind IN ('lock', 'election'))
) ENGINE = InnoDB;
