// Shared by the PostgreSQL integration tests: one schema per test file and
// flavor, pools pointed at it through search_path, and the two flavors every
// entry point must accept (a pg.Pool and a Kysely instance over pg).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { migrate, type Database, type Queryable } from '../../../adapters/postgres/index.js';
import { testServers } from '../../helpers/servers.js';
import { until } from '../../helpers/wait.js';
import { afterAll, beforeAll } from 'vitest';

/** The run's PostgreSQL (the global setup's, or DATABASE_URL): never a guessed address. */
export const DATABASE_URL = testServers().databaseUrl;

export interface DocsTable {
  id: number;
  body: string | null;
  fencing_token: string | null;
}

export interface HistoryTable {
  seq: string;
  round: number;
  token: string;
}

export interface TestDatabase {
  docs: DocsTable;
  history: HistoryTable;
}

/** A small pool on the test database for a file's setup and checks, ended after the file's tests. */
export function adminPool(): pg.Pool {
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  afterAll(() => admin.end());
  return admin;
}

export type Flavor = 'pg' | 'kysely';
export const FLAVORS: readonly Flavor[] = ['pg', 'kysely'];

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

/** A pool on `schema`; `settings` are further server settings for its sessions (e.g. default_transaction_isolation). */
export function newPool(schema: string, applicationName: string, max = 12, settings: Readonly<Record<string, string>> = {}): pg.Pool {
  // The startup options are split on spaces; a backslash keeps one in a value.
  const extra = Object.entries(settings).map(([name, value]) => ` -c ${name}=${value.replaceAll(' ', '\\ ')}`).join('');
  return new pg.Pool({
    connectionString: DATABASE_URL,
    max,
    application_name: applicationName,
    options: `-c search_path=${schema}${extra}`,
  });
}

export function newKysely(pool: pg.Pool): Kysely<TestDatabase> {
  return new Kysely<TestDatabase>({ dialect: new PostgresDialect({ pool }) });
}

/**
 * Poll until `n` backends of `applicationName` wait on a lock. Fails after
 * `limitMs` saying what it saw (generous: it bounds a wait that should be
 * short, on a loaded machine).
 */
export async function waitForLockWaiters(admin: pg.Pool, applicationName: string, n: number, limitMs = 20_000): Promise<void> {
  let seen = 0;
  await until(async () => {
    const { rows } = await admin.query<{ waiting: string }>(
      `SELECT count(*)::text AS waiting FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
      [applicationName],
    );
    seen = Number(rows[0]?.waiting);
    return seen >= n;
  }, () => `${n} backends of ${applicationName} waiting on a lock (saw ${seen})`, limitMs);
}

/**
 * The pid of a backend that `holderPid` blocks while it runs a statement on
 * fencekeeper_fences (a fence advance waiting for the row lock the holder's
 * transaction took), once there is one.
 */
export async function waitForFenceWaiter(admin: pg.Pool, holderPid: number, limitMs = 20_000): Promise<number> {
  let waiter: number | undefined;
  await until(async () => {
    const { rows } = await admin.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%fencekeeper_fences%'`,
      [holderPid],
    );
    waiter = rows[0]?.pid;
    return waiter !== undefined;
  }, () => `a fence advance blocked by backend ${holderPid}`, limitMs);
  return waiter!;
}

/** The backend pid of a transaction handed to work() or an admission, whatever the flavor. */
export async function backendPidOf(trx: Queryable): Promise<number> {
  if ('executeQuery' in trx) {
    const { rows } = await trx.executeQuery(rawSql('SELECT pg_backend_pid() AS pid'));
    return Number((rows[0] as { pid: unknown }).pid);
  }
  const { rows } = await trx.query({ text: 'SELECT pg_backend_pid() AS pid' });
  return Number((rows[0] as { pid: unknown }).pid);
}

/** Run a raw statement on a pg queryable or a Kysely executor. */
export async function exec(trx: Queryable, text: string, values: unknown[] = []): Promise<void> {
  if ('executeQuery' in trx) await trx.executeQuery(rawSql(text, values));
  else await trx.query({ text, values });
}

function rawSql(text: string, values: unknown[] = []) {
  return { sql: text, parameters: values, query: { kind: 'RawNode' as const, sqlFragments: [text], parameters: [] as never[] }, queryId: { queryId: text } };
}

export async function createSchema(admin: pg.Pool, schema: string): Promise<void> {
  await admin.query(`CREATE SCHEMA ${schema}`);
}

/**
 * Drop a test's schema with everything in it. DROP SCHEMA ... CASCADE locks
 * every object of the schema; a file running at the same time in another
 * schema can lock shared catalog rows in the other order (seen: 'deadlock
 * detected' from a clean-clone run), and PostgreSQL then aborts one of the
 * two: the drop is tried again, a few times.
 */
export async function dropSchema(admin: pg.Pool, schema: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      return;
    } catch (error) {
      if ((error as { code?: string }).code !== '40P01' || attempt >= 5) throw error;
      await new Promise((r) => setTimeout(r, 50 * attempt));
    }
  }
}

/** A suite's own schema (migratedSchema). */
export interface SuiteSchema {
  readonly schema: string;
  /** On the schema (search_path), for the suite's setup and reads. */
  readonly pool: pg.Pool;
  /** The kysely flavor's Kysely over `pool`; undefined in the pg flavor. */
  readonly kysely: Kysely<TestDatabase> | undefined;
  /** What the suite hands to fencekeeper: `kysely` in the kysely flavor, else `pool`. */
  readonly db: Database;
}

/**
 * A schema of the test database for the suite (or file) this is called in,
 * with fencekeeper's tables migrated into it through `db`: created before
 * the suite's tests, dropped after them (with `pool`, or `kysely`, ended).
 * The pool connects on first use, so it may be made here, before the schema.
 */
export function migratedSchema(
  admin: pg.Pool,
  prefix: string,
  options: { readonly max: number; readonly flavor?: Flavor; readonly applicationName?: string },
): SuiteSchema {
  const schema = uniqueName(prefix);
  const pool = newPool(schema, options.applicationName ?? uniqueName(prefix), options.max);
  const kysely = options.flavor === 'kysely' ? newKysely(pool) : undefined;
  const db = kysely ?? pool;
  beforeAll(async () => {
    await createSchema(admin, schema);
    await migrate(db);
  });
  afterAll(async () => {
    if (kysely !== undefined) await kysely.destroy();
    else await pool.end();
    await dropSchema(admin, schema);
  });
  return { schema, pool, kysely, db };
}
