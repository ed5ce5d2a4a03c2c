// The part of node-postgres and Kysely this adapter calls, as structural
// interfaces: a user's pg.Pool, pg.PoolClient, Kysely<DB> or Transaction<DB>
// fits without this package importing either library (both are optional peer
// dependencies; a pg-only user never loads kysely, and vice versa).
import { createHash } from 'node:crypto';
import { schemaMissing, sqlState } from '../../src/shared/postgres/schema-missing.js';
import { rawQuery, type KyselyCompiledQuery } from '../../src/shared/postgres/raw-query.js';

// Shared with the PostgreSQL source (src/shared/postgres/): a missing migration reads the same from both, and both send raw Kysely queries.
export { schemaMissing, sqlState, rawQuery, type KyselyCompiledQuery };

/** What node-postgres sends: a named statement is prepared once per connection. */
export interface PgQueryConfig {
  readonly text: string;
  readonly values?: unknown[];
  readonly name?: string;
}

/** The answer of pg's `query()`; only the fields read here. */
export interface PgQueryResult {
  readonly rows: unknown[];
  readonly rowCount: number | null;
  /** The command tag's verb ('COMMIT', or 'ROLLBACK' when PostgreSQL refused to commit). */
  readonly command?: string;
}

/** Anything node-postgres can run a query on: a pg.Pool, pg.Client or pg.PoolClient. */
export interface PgQueryable {
  /** Runs one statement (pg's client.query with a config object). */
  query(config: PgQueryConfig): Promise<PgQueryResult>;
}

/** A client checked out of a pool: `release(err)` with an error destroys the connection. */
export interface PgPoolClient extends PgQueryable {
  /** Gives the client back to its pool; with an error, the pool destroys it (pg's client.release). */
  release(err?: Error | boolean): void;
  /** pg.Client is an EventEmitter: it emits 'error' when its connection breaks. */
  on?(event: 'error', listener: (error: Error) => void): unknown;
  /** Removes an error listener (pg's client is an EventEmitter). */
  removeListener?(event: 'error', listener: (error: Error) => void): unknown;
  /** The backend's pid from BackendKeyData (pg.Client sets it; used to cancel a lock wait). */
  readonly processID?: number | null;
}

/** The part of pg.Pool used here. */
export interface PgPool<Client extends PgPoolClient = PgPoolClient> extends PgQueryable {
  /** Checks a client out of the pool (pg's pool.connect() without a callback). */
  connect(): Promise<Client>;
}

/**
 * The client type a pool hands out. pg.Pool's connect() is overloaded (a
 * promise, or a callback) and TypeScript infers from the last overload only,
 * so the two-overload shape is matched first to reach pg.PoolClient.
 */
export type PoolClientOf<P> =
  P extends {
    /** pg.Pool's promise form. */
    connect(): Promise<infer C>;
    /** pg.Pool's callback form. */
    connect(callback: (...args: never[]) => unknown): void;
  }
    ? C extends PgPoolClient ? C : PgPoolClient
    : P extends {
          /** A pool with only the promise form. */
          connect(): Promise<infer C>;
        }
      ? C extends PgPoolClient ? C : PgPoolClient
      : PgPoolClient;

/** The transaction a database hands to work: a Kysely Transaction<DB>, or the pool's client. */
export type TransactionOf<D> =
  D extends {
    /** Kysely's db.transaction(). */
    transaction(): {
      /** Runs `callback` in the transaction (Kysely's .execute). */
      execute<T>(callback: (trx: infer Trx) => Promise<T>): Promise<T>;
    };
  }
    ? Trx
    : PoolClientOf<D>;

/** Anything Kysely can execute a query on: a Kysely<DB> or a Transaction<DB>. */
export interface KyselyExecutor {
  /** Runs one compiled query (Kysely's executeQuery). */
  executeQuery(query: KyselyCompiledQuery): Promise<{ readonly rows: unknown[]; readonly numAffectedRows?: bigint | undefined }>;
}

/** A Kysely<DB> instance over PostgresDialect; `Trx` is inferred as the user's Transaction<DB>. */
export interface KyselyDatabase<Trx extends KyselyExecutor = KyselyExecutor> extends KyselyExecutor {
  /** Starts a transaction (Kysely's db.transaction().execute(callback)). */
  transaction(): {
    /** Runs `callback` in the transaction and commits when it resolves (Kysely's .execute). */
    execute<T>(callback: (trx: Trx) => Promise<T>): Promise<T>;
  };
}

/** Where a single statement may run: a pool, a checked-out client, a Kysely instance or transaction. */
export type Queryable = PgQueryable | KyselyExecutor;

/** Where a transaction may be started: a pg pool or a Kysely instance. */
export type Database = PgPool | KyselyDatabase;

/** A statement with positional parameters; `name` makes it a named prepared statement on pg. */
export interface Statement {
  readonly text: string;
  readonly values: unknown[];
  /** Prepare once per connection (hot statements); ignored by Kysely, whose driver never names them. */
  readonly prepared: boolean;
  /** The prepared statement's name when the caller has it cached (else derived from the text). */
  readonly name?: string;
}

export interface Rows {
  readonly rows: Record<string, unknown>[];
  readonly rowCount: number;
}

export function isKysely(db: unknown): db is KyselyExecutor {
  return typeof db === 'object' && db !== null && typeof (db as { executeQuery?: unknown }).executeQuery === 'function';
}

export function isPgQueryable(db: unknown): db is PgQueryable {
  return typeof db === 'object' && db !== null && typeof (db as { query?: unknown }).query === 'function';
}

const statementNames = new Map<string, string>();

/**
 * A prepared statement's name, derived from its text: the same text always
 * gets the same name (pg prepares it once per connection and reuses it), and
 * two texts never share one (pg refuses a name reused for another text).
 */
export function statementName(text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `fencekeeper_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    // Texts are built from a caller's table and column names: bounded in
    // practice, but cap the cache so a program generating names cannot grow it forever.
    if (statementNames.size >= 4096) statementNames.clear();
    statementNames.set(text, name);
  }
  return name;
}

/**
 * Every statement this adapter sends goes through one of these two (run()
 * below, the one-message opens and closes of a fenced transaction), so that
 * a missing migration reads the same from every helper and store: see
 * schemaMissing().
 */
export async function sendPg(db: PgQueryable, config: PgQueryConfig): Promise<PgQueryResult | PgQueryResult[]> {
  try {
    return await db.query(config);
  } catch (error) {
    throw schemaMissing(error) ?? error;
  }
}

/** Kysely's executeQuery, with a missing migration named (sendPg). */
export async function sendKysely(db: KyselyExecutor, query: KyselyCompiledQuery): ReturnType<KyselyExecutor['executeQuery']> {
  try {
    return await db.executeQuery(query);
  } catch (error) {
    throw schemaMissing(error) ?? error;
  }
}

/** Run one statement on a pg queryable or a Kysely executor, answering rows and the affected count. */
export async function run(db: Queryable, statement: Statement): Promise<Rows> {
  if (isKysely(db)) {
    const result = await sendKysely(db, rawQuery(statement.text, statement.values));
    const rows = result.rows as Record<string, unknown>[];
    const affected = result.numAffectedRows;
    return { rows, rowCount: affected === undefined ? rows.length : Number(affected) };
  }
  const config: PgQueryConfig = statement.prepared
    ? { name: statement.name ?? statementName(statement.text), text: statement.text, values: statement.values }
    : { text: statement.text, values: statement.values };
  const answer: PgQueryResult | PgQueryResult[] = await sendPg(db, config);
  // A parameterless text with several statements (a migration file) goes out
  // as a simple query, and pg answers one result per statement.
  const result = Array.isArray(answer) ? (answer[answer.length - 1] ?? { rows: [], rowCount: 0 }) : answer;
  const rows = (result.rows ?? []) as Record<string, unknown>[];
  return { rows, rowCount: result.rowCount ?? rows.length };
}

/**
 * A bigint column read back as text (every statement here casts with ::text,
 * so the user's global pg type parsers, e.g. int8 → parseInt, never see it).
 */
export function readBigint(value: unknown): bigint | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'bigint') return value;
  if (typeof value === 'string') return BigInt(value);
  // A number here would already have lost precision: refuse rather than guess.
  throw new TypeError(`expected a bigint as text from PostgreSQL, got ${typeof value}`);
}

/** Errors that PostgreSQL expects the whole transaction to be retried for. */
export function isSerializationFailure(error: unknown): boolean {
  const state = sqlState(error);
  return state === '40001' || state === '40P01';
}

export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Hold a client checked out of a pg.Pool safely: pg-pool takes its own
 * 'error' listener off a client it hands out, and pg emits 'error' when the
 * connection breaks (a reset mid-transaction). With nobody listening, that
 * event crashes the process instead of just failing the query in flight. So
 * listen for as long as we hold the client, and hand back a release that
 * destroys a client that errored instead of returning it to the pool.
 */
export function guardClient(client: PgPoolClient): (broken?: Error) => void {
  let errored: Error | undefined;
  const onError = (error: Error): void => {
    errored ??= error;
  };
  client.on?.('error', onError);
  return (broken) => {
    client.removeListener?.('error', onError);
    client.release(broken ?? errored);
  };
}
