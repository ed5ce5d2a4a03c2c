// Shared by the PostgreSQL source's tests: a migrated schema of the test
// database per file, pools on it, and sources over those pools, each ended
// after the test that made it (the server's max_connections is shared by
// every file running at once: a file keeping every test's pools open until
// its end ran the server out of connections).
import pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { migrate, postgresSource, type PostgresSource, type PostgresSourceOptions } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, createSchema, dropSchema, newPool, uniqueName } from '../postgres/helpers.js';

export { DATABASE_URL, uniqueName };

export interface SourceSchema {
  readonly schema: string;
  /** On the schema, for the tests' own reads. */
  readonly admin: pg.Pool;
  /** A new pool on the schema (ended after the test). */
  pool(max?: number): pg.Pool;
  /** A new source over a pool of its own (both ended after the test). */
  source(options?: PostgresSourceOptions, max?: number): PostgresSource;
  /** The entries of one name in fencekeeper_lock_entries, in queue order. */
  entries(name: string): Promise<{ id: string; token: string | null; session: string }[]>;
}

/** A schema with fencekeeper's migrations (009 included), made before the file's tests and dropped after. */
export function sourceSchema(prefix: string): SourceSchema {
  const schema = uniqueName(prefix);
  const root = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const admin = newPool(schema, uniqueName(prefix), 3);
  const pools: pg.Pool[] = [];
  const sources: PostgresSource[] = [];
  beforeAll(async () => {
    await createSchema(root, schema);
    await migrate(admin);
  });
  const endAll = async (): Promise<void> => {
    for (const source of sources.splice(0)) await source.close().catch(() => undefined);
    for (const pool of pools.splice(0)) await pool.end().catch(() => undefined);
  };
  afterEach(endAll);
  afterAll(async () => {
    await endAll();
    await admin.end();
    await dropSchema(root, schema);
    await root.end();
  });
  const pool = (max = 4): pg.Pool => {
    const p = newPool(schema, uniqueName(prefix), max);
    p.on('error', () => undefined);
    pools.push(p);
    return p;
  };
  return {
    schema,
    admin,
    pool,
    source(options, max) {
      const source = postgresSource(pool(max), options);
      sources.push(source);
      return source;
    },
    async entries(name) {
      const { rows } = await admin.query<{ id: string; token: string | null; session: string }>(
        `SELECT id::text AS id, token::text AS token, session_id::text AS session FROM fencekeeper_lock_entries WHERE name = $1 ORDER BY id`,
        [name],
      );
      return rows;
    },
  };
}
