// Applies the SQL files in migrations/mysql/ (001_fences.sql, ...) in name
// order, each once, recorded in fencekeeper_migrations of the pool's current
// database. (The PostgreSQL migrator reads only the files directly in
// migrations/, so it never sees these.)
//
// MySQL commits every DDL statement on its own, so a migration cannot be one
// transaction as in PostgreSQL. Concurrency is handled with a named lock
// instead: GET_LOCK on one connection, held for the whole run, so a second
// process waits, then finds the work recorded and applies nothing. Every
// statement of a shipped migration is idempotent (IF NOT EXISTS), so a run
// that dies half-way (a statement applied, its file not yet recorded) is
// finished by the next one. Shipped migrations are never edited: a change is
// a new file.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { FencekeeperError, InvalidArgumentError } from '../../src/index.js';
import { assertPromisePool, query, rowsOf, type MySqlPool } from './database.js';

/** migrate()'s options: the folder of SQL files (default: the package's migrations/mysql) and how long to wait for the migration lock. */
export interface MigrateOptions {
  /** Where the .sql files are; default: the package's migrations/mysql/ directory. */
  readonly directory?: string;
  /** Seconds to wait for another process's migrate() (GET_LOCK); default 60. */
  readonly lockTimeoutSeconds?: number;
}

/** What migrate() did: the migrations it applied in this call (empty when the schema was up to date), and every migration the schema now carries. */
export interface MigrateResult {
  /** The migrations this call applied (empty when the schema was up to date). */
  readonly applied: readonly string[];
}

/** One SQL migration the package ships: its name, its SQL and the checksum recorded with it. */
export interface Migration {
  readonly name: string;
  readonly sql: string;
  /** sha256 of the file, recorded with it. */
  readonly checksum: string;
}

const MIGRATION_FILE = /^\d{3,}_[A-Za-z0-9_-]+\.sql$/;

/** The package's migrations/mysql/ directory, from the sources or from the build (dist/adapters/mysql/). */
export function migrationsDirectory(): string {
  const candidates = ['../../migrations/mysql/', '../../../migrations/mysql/'].map((relative) => fileURLToPath(new URL(relative, import.meta.url)));
  const found = candidates.find((directory) => existsSync(`${directory}001_fences.sql`));
  if (found === undefined) throw new InvalidArgumentError(`fencekeeper MySQL migrations not found (looked in ${candidates.join(', ')})`);
  return found;
}

/** The SQL migrations this package ships for MySQL/MariaDB, in the order migrate() applies them. */
export async function loadMigrations(directory: string = migrationsDirectory()): Promise<Migration[]> {
  const names = (await readdir(directory)).filter((name) => MIGRATION_FILE.test(name)).sort();
  return Promise.all(names.map(async (name) => {
    const sql = await readFile(`${directory.endsWith('/') ? directory : `${directory}/`}${name}`, 'utf8');
    return { name, sql, checksum: createHash('sha256').update(sql).digest('hex') };
  }));
}

/** A file's statements: split at a `;` that ends a line, `--` comment lines dropped. */
export function statementsOf(sql: string): string[] {
  const body = sql.split('\n').filter((line) => !/^\s*--/.test(line)).join('\n');
  return body.split(/;\s*$/m).map((statement) => statement.trim()).filter((statement) => statement.length > 0);
}

const LEDGER = `CREATE TABLE IF NOT EXISTS fencekeeper_migrations (
  name       VARCHAR(255) NOT NULL PRIMARY KEY,
  checksum   CHAR(64)     NOT NULL,
  applied_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB`;

/**
 * Bring the fence schema up to date in the pool's current database:
 * idempotent, and safe when several processes run it at once (they
 * serialize on GET_LOCK). Answers the migrations it applied.
 */
export async function migrate(pool: MySqlPool, options: MigrateOptions = {}): Promise<MigrateResult> {
  assertPromisePool(pool, 'migrate');
  const timeout = options.lockTimeoutSeconds ?? 60;
  if (!Number.isInteger(timeout) || timeout < 0) throw new InvalidArgumentError('lockTimeoutSeconds must be a non-negative integer');
  const migrations = await loadMigrations(options.directory);
  const connection = await pool.getConnection();
  let broken = false;
  try {
    const [database] = await rowsOf(connection, 'SELECT DATABASE() AS name');
    const name = database?.['name'];
    if (name === null || name === undefined) throw new InvalidArgumentError('migrate: the pool has no current database (give one in the connection options or URL)');
    // One lock per database (GET_LOCK names are at most 64 characters: the name's hash).
    const lockName = `fencekeeper.migrate:${createHash('sha256').update(String(name)).digest('hex').slice(0, 40)}`;
    const [got] = await rowsOf(connection, 'SELECT GET_LOCK(?, ?) AS got', [lockName, timeout]);
    if (Number(got?.['got']) !== 1) throw new FencekeeperError('LOCK_TIMEOUT', `migrate: another process held the migration lock for ${timeout}s`);
    try {
      await query(connection, LEDGER);
      const done = new Set((await rowsOf(connection, 'SELECT name FROM fencekeeper_migrations')).map((row) => String(row['name'])));
      const applied: string[] = [];
      for (const migration of migrations) {
        if (done.has(migration.name)) continue;
        for (const statement of statementsOf(migration.sql)) await query(connection, statement);
        await query(connection, 'INSERT INTO fencekeeper_migrations (name, checksum, applied_at) VALUES (?, ?, NOW(6))', [migration.name, migration.checksum]);
        applied.push(migration.name);
      }
      return { applied };
    } finally {
      await query(connection, 'SELECT RELEASE_LOCK(?)', [lockName]).catch(() => { broken = true; });
    }
  } finally {
    // A connection that could not release the lock keeps it until it closes.
    if (broken) connection.destroy();
    else connection.release();
  }
}
