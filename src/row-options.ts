// The options of the fenced row helpers (fencedUpdate, fencedInsert,
// fencedUpsert, fencedDelete) that every SQL fence takes in one shape, so
// that code moving between fencekeeper/postgres and fencekeeper/mysql keeps
// its calls. Types only: each adapter writes its own SQL.
import type { Fencing } from './with-lock.js';

/** What fencedUpdate takes: the rows `where` selects get `set`, only where their token column is at most the token. */
export interface FencedUpdateOptions {
  /** The table, `table` or `<schema or database>.table`, as written (PostgreSQL quotes it as written: case matters). */
  readonly table: string;
  /** `{ column: value }`, ANDed; a null value matches IS NULL. */
  readonly where: Readonly<Record<string, unknown>>;
  /** `{ column: value }` to write; the token column is written for you. */
  readonly set: Readonly<Record<string, unknown>>;
  /** A bare token, a Sequencer, the Lock or Leadership itself (refused with LockLostError before any SQL once not held), or CURRENT_LOCK (a table bound with bindTable takes its own lock's sequencer only). */
  readonly token: Fencing;
  /** The table's token column; default 'fencing_token'. */
  readonly tokenColumn?: string;
}

/** What fencedInsert and fencedUpsert take: one row, refused where a row or tombstone of its key carries a larger token. */
export interface FencedInsertOptions {
  /** The table, `table` or `<schema or database>.table`, as written. */
  readonly table: string;
  /** The row to write, `{ column: value }`, key columns included; the token column is written for you. */
  readonly values: Readonly<Record<string, unknown>>;
  /** The columns of the unique key that identifies the row (the conflict target and the tombstone key). */
  readonly key: readonly string[];
  /** A bare token, a Sequencer, the Lock or Leadership itself (refused with LockLostError before any SQL once not held), or CURRENT_LOCK (a table bound with bindTable takes its own lock's sequencer only). */
  readonly token: Fencing;
  /** The table's token column; default 'fencing_token'. */
  readonly tokenColumn?: string;
}

/** What fencedUpsert takes: the same as fencedInsert. */
export type FencedUpsertOptions = FencedInsertOptions;

/** What fencedDelete takes: the rows `where` selects are deleted, each leaving a tombstone that keeps its fence. */
export interface FencedDeleteOptions {
  /** The table, `table` or `<schema or database>.table`, as written. */
  readonly table: string;
  /** `{ column: value }`, ANDed; a null value matches IS NULL. */
  readonly where: Readonly<Record<string, unknown>>;
  /**
   * The columns of the unique key each deleted row's tombstone is kept under;
   * default: the columns of `where` (deleting one row by its key). Must be the
   * same key fencedInsert/fencedUpsert use for the table.
   */
  readonly key?: readonly string[];
  /** A bare token, a Sequencer, the Lock or Leadership itself (refused with LockLostError before any SQL once not held), or CURRENT_LOCK (a table bound with bindTable takes its own lock's sequencer only). */
  readonly token: Fencing;
  /** The table's token column; default 'fencing_token'. */
  readonly tokenColumn?: string;
}
