// Applies the SQL files in migrations/ (001_fences.sql, 002_tombstones.sql, ...)
// in name order, each once, recorded in fencekeeper_migrations. Everything runs
// in one transaction under an advisory lock, so two processes migrating at once
// serialize: the second waits, then finds the work done and applies nothing.
// Tables are created unqualified, so they land in the first schema of the
// connection's search_path (every fenced statement finds them the same way).
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../../src/index.js';
import { guardClient, isKysely, run, type Database, type KyselyDatabase, type PgPool, type Queryable } from './database.js';

/** migrate()'s options: the folder of SQL files (default: the package's migrations). */
export interface MigrateOptions {
  /** Where the .sql files are; default: the package's migrations/ directory. */
  readonly directory?: string;
}

/** What migrate() did: the migrations it applied in this call (empty when the schema was up to date), and every migration the schema now carries. */
export interface MigrateResult {
  /** The migrations this call applied, in order (empty when the schema was up to date). */
  readonly applied: readonly string[];
  /** Every migration the schema now carries, in order: all the package ships (those applied before, and `applied`). */
  readonly migrations: readonly string[];
}

/** One SQL migration the package ships: its name, its SQL and the checksum recorded with it. */
export interface Migration {
  readonly name: string;
  readonly sql: string;
  /** sha256 of the file, recorded with it (not enforced: a reformatted file must not block a deploy). */
  readonly checksum: string;
}

const MIGRATION_FILE = /^\d{3,}_[A-Za-z0-9_-]+\.sql$/;

/**
 * The package's migrations/ directory, found next to this module: from the
 * sources (adapters/postgres/ → ../../migrations) and from the build
 * (dist/adapters/postgres/ → ../../../migrations; package.json "files"
 * ships migrations/ beside dist/).
 */
export function migrationsDirectory(): string {
  const candidates = ['../../migrations/', '../../../migrations/'].map((relative) => fileURLToPath(new URL(relative, import.meta.url)));
  const found = candidates.find((directory) => existsSync(`${directory}001_fences.sql`));
  if (found === undefined) {
    throw new InvalidArgumentError(`fencekeeper migrations not found (looked in ${candidates.join(', ')})`);
  }
  return found;
}

/** The migrations in name order, read from `directory` (default: the package's own). */
export async function loadMigrations(directory: string = migrationsDirectory()): Promise<Migration[]> {
  const names = (await readdir(directory)).filter((name) => MIGRATION_FILE.test(name)).sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(`${directory.endsWith('/') ? directory : `${directory}/`}${name}`, 'utf8');
      return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
    }),
  );
}

// One lock per schema: processes migrating different schemas do not wait for each other.
const LOCK = `SELECT pg_advisory_xact_lock(hashtextextended('fencekeeper.migrate:' || coalesce(current_schema(), ''), 0))`;
const LEDGER = `CREATE TABLE IF NOT EXISTS fencekeeper_migrations (
  name       text        PRIMARY KEY,
  checksum   text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;

/**
 * Bring the fence schema up to date: idempotent, and safe when several
 * processes run it at once. `db` is a pg.Pool or a Kysely instance; the CLI's
 * `fencekeeper migrate` passes a pg.Pool built from DATABASE_URL.
 */
export async function migrate(db: Database, options: MigrateOptions = {}): Promise<MigrateResult> {
  const migrations = await loadMigrations(options.directory);
  return inTransaction(db, async (tx) => {
    await run(tx, { text: LOCK, values: [], prepared: false });
    await run(tx, { text: LEDGER, values: [], prepared: false });
    const { rows } = await run(tx, { text: 'SELECT name FROM fencekeeper_migrations', values: [], prepared: false });
    const done = new Set(rows.map((row) => String(row['name'])));
    const applied: string[] = [];
    for (const migration of migrations) {
      if (done.has(migration.name)) continue;
      // No parameters: sent with the simple query protocol, so a file may hold many statements.
      await run(tx, { text: migration.sql, values: [], prepared: false });
      await run(tx, { text: 'INSERT INTO fencekeeper_migrations (name, checksum) VALUES ($1, $2)', values: [migration.name, migration.checksum], prepared: false });
      applied.push(migration.name);
    }
    return { applied, migrations: migrations.map((migration) => migration.name) };
  });
}

export async function inTransaction<T>(db: Database, body: (tx: Queryable) => Promise<T>): Promise<T> {
  if (isKysely(db)) return (db as KyselyDatabase).transaction().execute(body);
  const client = await (db as PgPool).connect();
  const release = guardClient(client);
  let broken: Error | undefined;
  try {
    await client.query({ text: 'BEGIN' });
    try {
      const result = await body(client);
      await client.query({ text: 'COMMIT' });
      return result;
    } catch (error) {
      await client.query({ text: 'ROLLBACK' }).catch((rollbackError: unknown) => {
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      });
      throw error;
    }
  } finally {
    release(broken);
  }
}

