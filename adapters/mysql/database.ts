// The part of mysql2's promise API this adapter calls, as structural
// interfaces: a user's Pool or PoolConnection (from 'mysql2/promise') fits
// without this package importing mysql2 (an optional peer dependency). Every
// statement goes through `query` (the text protocol, values escaped by the
// driver): it needs no server-side prepared statement cache and works the
// same on a pool and a connection.
import { FencekeeperError, InvalidArgumentError } from '../../src/index.js';

/** What `query` answers for a write: only the fields read here. */
export interface MySqlResultHeader {
  readonly affectedRows: number;
  /** "Rows matched: 1  Changed: 0  Warnings: 0" for an UPDATE. */
  readonly info?: string;
}

/** Anything mysql2's promise API runs a query on: a Pool, a PoolConnection, a Connection. */
export interface MySqlQueryable {
  /** Runs one statement with `?` placeholders (mysql2's promise query). */
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
}

/** A connection checked out of a pool. */
export interface MySqlPoolConnection extends MySqlQueryable {
  /** Gives the connection back to its pool (mysql2's connection.release). */
  release(): void;
  /** Closes the socket instead of returning the connection (the server rolls back what it held). */
  destroy(): void;
  /** The server's connection id (KILL QUERY takes it). */
  readonly threadId: number | null;
}

/** The part of mysql2's promise Pool used here. */
export interface MySqlPool extends MySqlQueryable {
  /** Checks a connection out of the pool (mysql2's pool.getConnection). */
  getConnection(): Promise<MySqlPoolConnection>;
}

export type Row = Record<string, unknown>;

export function isPool(db: unknown): db is MySqlPool {
  return typeof db === 'object' && db !== null && typeof (db as { getConnection?: unknown }).getConnection === 'function';
}

/**
 * mysql2's callback Pool (from 'mysql2', not 'mysql2/promise') has
 * getConnection too, but answers through a callback: awaiting it would hand
 * back undefined. It has `promise()`, which the promise Pool has not.
 */
export function assertPromisePool(db: unknown, who: string): asserts db is MySqlPool {
  if (!isPool(db)) throw new InvalidArgumentError(`${who} needs a mysql2 promise Pool (createPool from 'mysql2/promise')`);
  if (typeof (db as { promise?: unknown }).promise === 'function') {
    throw new InvalidArgumentError(`${who} needs a mysql2 promise Pool: this is the callback Pool of 'mysql2'; pass pool.promise(), or create it with 'mysql2/promise'`);
  }
}

export function isQueryable(db: unknown): db is MySqlQueryable {
  return typeof db === 'object' && db !== null && typeof (db as { query?: unknown }).query === 'function';
}

/** The server's error number (mysql2 sets `errno`), or undefined. */
export function errnoOf(error: unknown): number | undefined {
  const errno = (error as { errno?: unknown } | null)?.errno;
  return typeof errno === 'number' ? errno : undefined;
}

export const ER_DUP_ENTRY = 1062;
export const ER_NO_SUCH_TABLE = 1146;
export const ER_LOCK_DEADLOCK = 1213;
export const ER_SP_DOES_NOT_EXIST = 1305; // "SAVEPOINT ... does not exist": the transaction ended under us
/** "Record has changed since last read": a locking read under innodb_snapshot_isolation=ON found a row newer than the snapshot. */
export const ER_CHECKREAD = 1020;

/**
 * Run one statement. Two server errors are turned into fencekeeper errors
 * with a stable code, because what to do about them is ours to say:
 * - 1146 on one of our tables: the schema is missing (SCHEMA_MISSING, run migrate());
 * - 1020: the REPEATABLE READ snapshot is older than a row a locking read
 *   found (SNAPSHOT_CONFLICT, retryable: a retried transaction reads the
 *   current row and is checked against it).
 * Everything else is the driver's error, unchanged.
 */
export async function query(db: MySqlQueryable, sql: string, values: readonly unknown[] = []): Promise<unknown> {
  try {
    const [result] = await db.query(sql, values);
    return result;
  } catch (error) {
    throw translated(error);
  }
}

export async function rowsOf(db: MySqlQueryable, sql: string, values: readonly unknown[] = []): Promise<Row[]> {
  return (await query(db, sql, values)) as Row[];
}

export async function headerOf(db: MySqlQueryable, sql: string, values: readonly unknown[] = []): Promise<MySqlResultHeader> {
  return (await query(db, sql, values)) as MySqlResultHeader;
}

/** Rows an UPDATE matched, whether or not it changed them (the pool may or may not set CLIENT_FOUND_ROWS). */
export function matchedRows(header: MySqlResultHeader): number {
  const matched = /Rows matched:\s*(\d+)/.exec(header.info ?? '');
  return matched === null ? header.affectedRows : Number(matched[1]);
}

export function translated(error: unknown): unknown {
  const errno = errnoOf(error);
  const message = (error as { message?: unknown } | null)?.message;
  if (errno === ER_NO_SUCH_TABLE && typeof message === 'string' && /fencekeeper_/.test(message)) {
    return new FencekeeperError('SCHEMA_MISSING', `the fencekeeper tables are missing in this database (${message}): run migrate(pool) from fencekeeper/mysql first`, { cause: error });
  }
  if (errno === ER_CHECKREAD) {
    return new FencekeeperError(
      'SNAPSHOT_CONFLICT',
      'a fenced row changed after this transaction\'s REPEATABLE READ snapshot was taken (MySQL/MariaDB error 1020, innodb_snapshot_isolation=ON): roll back and retry the transaction; the retry is checked against the current token',
      { cause: error, retryable: true },
    );
  }
  return error;
}

/** The token text the server sent (CAST(... AS CHAR)) as a bigint, or null. */
export function readToken(value: unknown): bigint | null {
  if (value === null || value === undefined) return null;
  if (Buffer.isBuffer(value)) return BigInt(value.toString('latin1'));
  return BigInt(String(value));
}
