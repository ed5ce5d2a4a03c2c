// Shared by the PostgreSQL integration tests: one schema per test file and
// flavor, pools pointed at it through search_path, and the two flavors every
// entry point must accept (a pg.Pool and a Kysely instance over pg).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';

export const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://root@127.0.0.1:5432/test';

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

export type Flavor = 'pg' | 'kysely';
export const FLAVORS: readonly Flavor[] = ['pg', 'kysely'];

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

export function newPool(schema: string, applicationName: string, max = 12): pg.Pool {
  return new pg.Pool({
    connectionString: DATABASE_URL,
    max,
    application_name: applicationName,
    options: `-c search_path=${schema}`,
  });
}

export function newKysely(pool: pg.Pool): Kysely<TestDatabase> {
  return new Kysely<TestDatabase>({ dialect: new PostgresDialect({ pool }) });
}

/** Poll (no timed assertion) until `n` backends of `applicationName` wait on a lock. */
export async function waitForLockWaiters(admin: pg.Pool, applicationName: string, n: number): Promise<void> {
  for (;;) {
    const { rows } = await admin.query<{ waiting: string }>(
      `SELECT count(*)::text AS waiting FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
      [applicationName],
    );
    if (Number(rows[0]?.waiting) >= n) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export async function createSchema(admin: pg.Pool, schema: string): Promise<void> {
  await admin.query(`CREATE SCHEMA ${schema}`);
}

export async function dropSchema(admin: pg.Pool, schema: string): Promise<void> {
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
}
