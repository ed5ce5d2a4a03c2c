// migrate(): idempotent, and safe when several callers run it at once, in one
// process (separate pools) and from separate processes using the built package.
import { execFile } from 'node:child_process';
import { copyFile, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { SequencerMismatchError } from '../../../src/index.js';
import { bindTable, fencedUpdate, loadMigrations, migrate, migrationsDirectory, tableBindingOf } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, createSchema, dropSchema, newKysely, newPool, uniqueName } from './helpers.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../../', import.meta.url));
const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
const schemas: string[] = [];
const cleanups: (() => Promise<void>)[] = [];

afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.end();
});

async function freshSchema(): Promise<string> {
  const schema = uniqueName('fk_pgmig');
  schemas.push(schema);
  await createSchema(admin, schema);
  return schema;
}

async function describeSchema(schema: string) {
  const tables = await admin.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name`, [schema]);
  const ledger = await admin.query<{ name: string }>(`SELECT name FROM ${schema}.fencekeeper_migrations ORDER BY name`);
  return { tables: tables.rows.map((r) => r.table_name), ledger: ledger.rows.map((r) => r.name) };
}

const ALL = ['001_fences.sql', '002_tombstones.sql', '003_tombstones_snapshot_isolation.sql', '004_effects.sql', '005_idempotency_keys.sql', '006_fence_bindings.sql', '007_table_bindings.sql', '008_table_binding_snapshot_isolation.sql', '009_sequencer_kinds.sql', '010_lock_source.sql', '011_lock_observers.sql', '012_lock_lease.sql', '013_lock_kinds.sql', '014_lock_holder_index.sql', '015_lock_queue_lookups.sql'];
const SCHEMA = {
  tables: ['fencekeeper_effects', 'fencekeeper_fence_bindings', 'fencekeeper_fences', 'fencekeeper_idempotency_keys', 'fencekeeper_lock_entries', 'fencekeeper_lock_observers', 'fencekeeper_lock_sessions', 'fencekeeper_locks', 'fencekeeper_migrations', 'fencekeeper_table_bindings', 'fencekeeper_tombstones'],
  ledger: ALL,
};

describe('migrate', () => {
  it('finds migrations/ next to the sources', async () => {
    expect(migrationsDirectory()).toBe(`${root}migrations/`);
    expect((await loadMigrations()).map((m) => m.name)).toEqual(ALL);
  });

  it('twice in a row: the second applies nothing', async () => {
    const schema = await freshSchema();
    const pool = newPool(schema, 'fk_mig', 2);
    cleanups.push(() => pool.end());
    expect(await migrate(pool)).toEqual({ applied: ALL, migrations: ALL });
    expect(await migrate(pool)).toEqual({ applied: [], migrations: ALL });
    expect(await describeSchema(schema)).toEqual(SCHEMA);
  });

  it('007 and 008 on a schema migrated up to 006, with rows already fenced: applied alone, the rows kept, their table bindable', async () => {
    const schema = await freshSchema();
    const pool = newPool(schema, 'fk_mig_007', 2);
    cleanups.push(() => pool.end());
    // The schema as a deployment made before 007 left it.
    const old = `${root}.tmp/${uniqueName('pg-mig-006')}/`;
    cleanups.push(() => rm(old, { recursive: true, force: true }));
    await mkdir(old, { recursive: true });
    for (const name of ALL.slice(0, 6)) await copyFile(`${root}migrations/${name}`, `${old}${name}`);
    expect((await migrate(pool, { directory: old })).applied).toEqual(ALL.slice(0, 6));
    await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint)');
    // Written by a release before 007 (the row helpers of this one need 007 and 008: migrate first).
    await pool.query(`INSERT INTO docs VALUES (1, 'before 007', 8)`);

    expect((await migrate(pool)).applied).toEqual(['007_table_bindings.sql', '008_table_binding_snapshot_isolation.sql', '009_sequencer_kinds.sql', '010_lock_source.sql', '011_lock_observers.sql', '012_lock_lease.sql', '013_lock_kinds.sql', '014_lock_holder_index.sql', '015_lock_queue_lookups.sql']);
    expect(await describeSchema(schema)).toEqual({ ...SCHEMA, tables: ['docs', ...SCHEMA.tables] });
    expect((await pool.query('SELECT body, fencing_token::text AS token FROM docs')).rows).toEqual([{ body: 'before 007', token: '8' }]);
    // Unbound: bare tokens still pass. Bound: the lock's tokens continue from the column's, a bare token is refused.
    expect(await fencedUpdate(pool, { table: 'docs', where: { id: 1 }, set: { body: 'after 007' }, token: 9n })).toBe(1);
    const binding = { kind: 'lock', lock: 'docs', source: { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-00000000b001' } } as const;
    await bindTable(pool, 'docs', binding);
    expect(await tableBindingOf(pool, 'docs')).toEqual(binding);
    await expect(fencedUpdate(pool, { table: 'docs', where: { id: 1 }, set: { body: 'bare' }, token: 10n })).rejects.toBeInstanceOf(SequencerMismatchError);
    expect(await fencedUpdate(pool, { table: 'docs', where: { id: 1 }, set: { body: 'bound' }, token: { kind: 'lock', name: 'docs', source: binding.source, token: 10n } })).toBe(1);
  });

  it('concurrently from two pools (pg and Kysely) in one process: one schema, no error', async () => {
    for (let round = 0; round < 5; round += 1) {
      const schema = await freshSchema();
      const a = newPool(schema, 'fk_mig_a', 1);
      const b = newKysely(newPool(schema, 'fk_mig_b', 1));
      const c = newPool(schema, 'fk_mig_c', 1);
      cleanups.push(() => a.end(), () => b.destroy(), () => c.end());
      const results = await Promise.all([migrate(a), migrate(b), migrate(c)]);
      expect(results.flatMap((r) => r.applied).sort()).toEqual(ALL);
      expect(await describeSchema(schema)).toEqual(SCHEMA);
    }
  });

  it('concurrently from two processes running the built package: one schema, no error', async () => {
    // Build into a private directory laid out like the package (dist/ beside
    // migrations/), so the built module resolves ../../../migrations itself
    // and nobody else's dist/ is touched.
    const out = `${root}.tmp/${uniqueName('pg-build')}/`;
    cleanups.push(() => rm(out, { recursive: true, force: true }));
    await mkdir(out, { recursive: true });
    await writeFile(`${out}tsconfig.json`, JSON.stringify({
      extends: '../../tsconfig.json',
      compilerOptions: { noEmit: false, outDir: './dist', rootDir: '../..', declaration: false, sourceMap: false },
      include: [],
      files: ['../../adapters/postgres/index.ts'],
    }));
    await symlink(`${root}migrations`, `${out}migrations`);
    await run(process.execPath, [`${root}node_modules/typescript/bin/tsc`, '-p', `${out}tsconfig.json`], { cwd: root });
    const adapter = `${out}dist/adapters/postgres/index.js`;

    for (let round = 0; round < 3; round += 1) {
      const schema = await freshSchema();
      const children = await Promise.all([0, 1].map(() =>
        run(process.execPath, [`${root}test/integration/postgres/migrate-child.mjs`, adapter, DATABASE_URL, schema], { cwd: root })));
      const applied = children.flatMap(({ stdout }) => (JSON.parse(stdout) as { applied: string[] }).applied);
      expect(applied.sort()).toEqual(ALL);
      expect(await describeSchema(schema)).toEqual(SCHEMA);
    }
  });
});
