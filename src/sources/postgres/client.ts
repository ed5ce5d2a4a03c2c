/**
 * The part of node-postgres the PostgreSQL source calls, as structural
 * interfaces (pg is an optional peer dependency: never imported here), and
 * the one way every statement of the source is sent.
 *
 * The source takes a pg.Pool, not a Kysely instance: it needs one connection
 * of its own for LISTEN (its waiters are woken by NOTIFY), and Kysely
 * exposes neither a held connection nor notifications.
 */
import { schemaMissing } from '../../shared/postgres/schema-missing.js';

/** A statement as node-postgres takes it; `name` prepares it once per connection. */
export interface PgSourceQuery {
  readonly text: string;
  readonly values?: unknown[];
  readonly name?: string;
}

/** What pg's query() answers; only the rows are read. */
export interface PgSourceResult {
  readonly rows: unknown[];
}

/** A NOTIFY as pg delivers it on a connection that LISTENs. */
export interface PgNotification {
  readonly channel: string;
  readonly payload?: string | undefined;
}

/** A connection checked out of the pool (pg.PoolClient): the source's own, for LISTEN and the heartbeat. */
export interface PgSourceClient {
  /** Send one statement on this connection. */
  query(config: PgSourceQuery): Promise<PgSourceResult>;
  /** With an error (or true), the pool destroys the connection instead of reusing it. */
  release(err?: Error | boolean): void;
  /** Hear the NOTIFYs of the channels this connection LISTENs on. */
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  /** Hear the connection fail (the source then treats the session as unreachable until it reconnects). */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** Stop hearing NOTIFYs (when the source closes). */
  removeListener(event: 'notification', listener: (message: PgNotification) => void): unknown;
  /** Stop hearing connection errors (when the source closes). */
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
}

/** A pg.Pool: statements on any of its connections, and one checked out for the source to keep. */
export interface PgSourcePool {
  /** Send one statement on any connection of the pool. */
  query(config: PgSourceQuery): Promise<PgSourceResult>;
  /** Check a connection out (the source keeps one for its heartbeat and LISTEN). */
  connect(): Promise<PgSourceClient>;
  /** pg.Pool's settings; `max` is checked: the source keeps one connection for itself. */
  readonly options?: { readonly max?: number };
}

/** One row of a statement's answer, its columns as the source's statements name them. */
export type Row = Record<string, unknown>;

/**
 * Send one statement (prepared once per connection under `name`) and answer
 * its first row; a missing migration becomes SchemaMissingError.
 */
export function queryRow(db: { query(config: PgSourceQuery): Promise<PgSourceResult> }, name: string, text: string, values: unknown[]): Promise<Row> {
  // One .then, not an async function's await: this runs twice per acquire + release cycle.
  let sent: Promise<PgSourceResult>;
  try {
    sent = db.query({ name, text, values });
  } catch (error) {
    return Promise.reject(schemaMissing(error) ?? error);
  }
  return sent.then(
    (result) => {
      const row = result.rows[0];
      if (row === undefined || row === null || typeof row !== 'object') throw new Error(`unreachable: ${name} answered no row`);
      return row as Row;
    },
    (error: unknown) => {
      throw schemaMissing(error) ?? error;
    },
  );
}

/** Every row of a statement's answer (missing migration: SchemaMissingError). */
export async function queryRows(db: { query(config: PgSourceQuery): Promise<PgSourceResult> }, name: string, text: string, values: unknown[]): Promise<Row[]> {
  try {
    return (await db.query({ name, text, values })).rows as Row[];
  } catch (error) {
    throw schemaMissing(error) ?? error;
  }
}

/** A bigint sent back as text (every statement casts, so a user's int8 type parser never sees it). */
export function bigintOf(value: unknown): bigint | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return BigInt(value);
  throw new TypeError(`expected a bigint as text from PostgreSQL, got ${typeof value}`);
}
