// A database without fencekeeper's migrations (or with only the first one):
// every helper and store answers SchemaMissingError (SCHEMA_MISSING), naming
// the missing object and saying to run migrate(), never the raw "relation
// does not exist". A missing table of the caller's own stays the caller's
// error. Each flavor runs in fresh schemas of its own, reached through
// search_path, so the shared database's tables are never touched.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import {
  PostgresFenceStore,
  PostgresIdempotencyStore,
  bindFence,
  bindTable,
  fencedDelete,
  fencedInsert,
  fencedUpdate,
  fencedUpsert,
  listEffects,
  migrate,
  migrationsDirectory,
  pendingEffects,
  withEffect,
  withFence,
  type Database,
  type Queryable,
} from '../../../adapters/postgres/index.js';
import { SchemaMissingError } from '../../../src/index.js';
import { FLAVORS, adminPool, newKysely, newPool, uniqueName } from './helpers.js';

const admin = adminPool();
const binding = { kind: 'lock', lock: 'schema/missing', source: { kind: 'zookeeper', id: 'schema-missing' } } as const;

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

function expectMissing(error: unknown, relation: string | RegExp): void {
  expect(error).toBeInstanceOf(SchemaMissingError);
  const missing = error as SchemaMissingError;
  expect(missing.code).toBe('SCHEMA_MISSING');
  expect(missing.retryable).toBe(false);
  expect(missing.relation).toMatch(relation);
  expect(missing.message).toContain(missing.relation);
  expect(missing.message).toContain('migrate(db)');
  expect(missing.message).toContain('fencekeeper migrate');
}

describe.each(FLAVORS)('a database without the migrations (%s)', (flavor) => {
  // `empty`: nothing of ours. `fencesOnly`: only 001_fences.sql, as an old
  // version left it: the row helpers' tombstones and table bindings are missing.
  const empty = uniqueName(`fk_nomig_${flavor}`);
  const fencesOnly = uniqueName(`fk_onlyfences_${flavor}`);
  const full = uniqueName(`fk_full_${flavor}`);
  const pools: pg.Pool[] = [];
  const on = (schema: string): Database => {
    const pool = newPool(schema, 'schema-missing', 3);
    pools.push(pool);
    return flavor === 'pg' ? pool : newKysely(pool);
  };
  let bare: Database;
  let partial: Database;
  let migrated: Database;

  beforeAll(async () => {
    await admin.query(`CREATE SCHEMA ${empty}; CREATE TABLE ${empty}.docs (id int PRIMARY KEY, body text, fencing_token bigint)`);
    const first = await readFile(join(migrationsDirectory(), '001_fences.sql'), 'utf8');
    await admin.query(`CREATE SCHEMA ${fencesOnly}; SET search_path = ${fencesOnly}; ${first}; CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint); RESET search_path`);
    bare = on(empty);
    partial = on(fencesOnly);
    await admin.query(`CREATE SCHEMA ${full}`);
    migrated = on(full);
    await migrate(migrated);
  });

  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.end()));
    await admin.query(`DROP SCHEMA ${empty} CASCADE; DROP SCHEMA ${fencesOnly} CASCADE; DROP SCHEMA ${full} CASCADE`);
  });

  it('withFence names fencekeeper_fences and never runs the work', async () => {
    let ran = false;
    const error = await rejection(withFence(bare as never, 'schema:doc', 5n, async () => { ran = true; }));
    expectMissing(error, 'fencekeeper_fences');
    expect((error as Error).message).toContain('fencekeeper_fences');
    expect(ran).toBe(false);
  });

  it('a table of the caller\'s own missing inside work stays the caller\'s error', async () => {
    const error = await rejection(withFence(migrated as never, uniqueName('schema:own'), 5n, async (trx: Queryable) => {
      await (flavor === 'pg'
        ? (trx as pg.PoolClient).query('SELECT * FROM no_such_table_of_mine')
        : (trx as { executeQuery(q: unknown): Promise<unknown> }).executeQuery({ sql: 'SELECT * FROM no_such_table_of_mine', parameters: [], query: { kind: 'RawNode', sqlFragments: ['SELECT * FROM no_such_table_of_mine'], parameters: [] }, queryId: { queryId: 'own' } }));
    }));
    expect(error).not.toBeInstanceOf(SchemaMissingError);
    expect((error as { code?: unknown }).code).toBe('42P01');
    expect((error as Error).message).toContain('no_such_table_of_mine');
  });

  it.each([
    ['fencedUpdate', (db: Queryable) => fencedUpdate(db, { table: 'docs', where: { id: 1 }, set: { body: 'x' }, token: 5n })],
    ['fencedInsert', (db: Queryable) => fencedInsert(db, { table: 'docs', key: ['id'], values: { id: 1, body: 'x' }, token: 5n })],
    ['fencedUpsert', (db: Queryable) => fencedUpsert(db, { table: 'docs', key: ['id'], values: { id: 1, body: 'x' }, token: 5n })],
    ['fencedDelete', (db: Queryable) => fencedDelete(db, { table: 'docs', where: { id: 1 }, token: 5n })],
  ] as const)('%s names the missing table, with no table of ours and with fencekeeper_fences only', async (_name, call) => {
    expectMissing(await rejection(call(bare)), /^fencekeeper_(tombstones|table_bindings)$/);
    expectMissing(await rejection(call(partial)), /^fencekeeper_(tombstones|table_bindings|check_tombstone|check_table_binding)$/);
  });

  it('a row helper on a table of the caller\'s own that does not exist stays the driver\'s error', async () => {
    const error = await rejection(fencedUpdate(bare, { table: 'no_such_docs', where: { id: 1 }, set: { body: 'x' }, token: 5n }));
    expect(error).not.toBeInstanceOf(SchemaMissingError);
    expect((error as Error).message).toContain('no_such_docs');
  });

  it('PostgresFenceStore: admit and current', async () => {
    const store = new PostgresFenceStore(bare);
    expectMissing(await rejection(store.admit('schema:store', 5n)), 'fencekeeper_fences');
    expectMissing(await rejection(store.current('schema:store')), 'fencekeeper_fences');
  });

  it('bindFence and bindTable', async () => {
    expectMissing(await rejection(bindFence(bare, 'schema:bound', binding)), /^fencekeeper_fence(_binding)?s$/);
    expectMissing(await rejection(bindTable(bare, 'docs', binding)), 'fencekeeper_table_bindings');
    expectMissing(await rejection(bindTable(partial, 'docs', binding)), 'fencekeeper_table_bindings');
  });

  it('withEffect, pendingEffects and listEffects', async () => {
    let ran = false;
    const effect = async () => { ran = true; return 'done'; };
    expectMissing(await rejection(withEffect(bare, { resource: 'schema:effect', token: 5n, key: 'k' }, effect)), /^fencekeeper_(fences|effects)$/);
    expect(ran).toBe(false);
    expectMissing(await rejection(pendingEffects(bare)), 'fencekeeper_effects');
    expectMissing(await rejection(listEffects(bare)), 'fencekeeper_effects');
  });

  it('PostgresIdempotencyStore', async () => {
    const store = new PostgresIdempotencyStore(bare);
    expectMissing(await rejection(store.begin({ scope: 'schema', key: 'k' }, 'f')), 'fencekeeper_idempotency_keys');
    expectMissing(await rejection(store.purge()), 'fencekeeper_idempotency_keys');
  });
});
