// Every fence of the package as one shape, on the real servers, for the
// tests that run one rule against all of them (fencing-input, check-only):
// a Target is one fresh resource behind one fence (its own row, item, key or
// object; the SQL row helpers get a table of their own, since a table binding
// is table-wide). `write` sends one fenced write of `value`; `state` reads,
// without the adapter's fence logic where it can, the fence's mark and the
// value the writes guard (null: none, or deleted); `bind` binds the resource
// to `first`'s lock with a write of `first` (fences that keep no binding have
// none). A bind always leaves value 'bound' with first's token, also for
// the deletes (their row is written, not deleted, by the binding write).
import { GetItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Redis } from 'ioredis';
import type mysql from 'mysql2/promise';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import type { Fencing, FenceBinding, Lock } from '../../../src/index.js';
import { MemoryFenceStore } from '../../../adapters/express/index.js';
import * as fkpg from '../../../adapters/postgres/index.js';
import * as fkmy from '../../../adapters/mysql/index.js';
import * as fkdyn from '../../../adapters/dynamodb/index.js';
import * as fkredis from '../../../adapters/redis/index.js';
import * as fks3 from '../../../adapters/s3/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { createTable, dropTable, newClient as dynamoClient } from '../dynamodb/helpers.js';
import { privateDatabase } from '../mysql/helpers.js';
import { DATABASE_URL, createSchema, dropSchema, newPool, uniqueName } from '../postgres/helpers.js';
import { TestBucket, newClient as s3Client } from '../s3/helpers.js';

export interface State {
  readonly mark: bigint | null;
  readonly value: string | null;
}

/** A write's mode: `advance: false` is the check-only mode. */
export interface Mode {
  readonly advance?: boolean;
}

/** What kysely's fenced() throws here when its update touched nothing: it does not say why, the row helpers do. */
export class NothingUpdated extends Error {}

export interface Target {
  /** The error a refusal (a stale token, another lock's sequencer) surfaces as, when the fence does not say which. */
  readonly refusal?: typeof NothingUpdated;
  write(fencing: Fencing, value: string, mode?: Mode): Promise<void>;
  state(): Promise<State>;
  /** What `state()` reads after a write of `value` with `token` that went through. */
  expected(token: bigint, value: string): State;
  bind?(first: Lock): Promise<void>;
}

export interface FenceKind {
  readonly name: string;
  /** A fresh resource; for the deletes, a row (item, key, object) already there with token `initial` (default 1). */
  make(initial?: bigint): Promise<Target>;
}

const bindingOf = (lock: Lock): FenceBinding => ({ kind: lock.sequencer.kind, lock: lock.sequencer.name, source: lock.sequencer.source });
const written = (token: bigint, value: string): State => ({ mark: token, value });
const deleted = (token: bigint): State => ({ mark: token, value: null });
const big = (text: unknown): bigint | null => (text === null || text === undefined ? null : BigInt(String(text)));

/** Opens every server the fences need; `close()` removes what it made. */
export async function openFences(label: string): Promise<{ fences: FenceKind[]; close(): Promise<void> }> {
  const closers: (() => Promise<void>)[] = [];

  // PostgreSQL: a schema of this file's own.
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  const schema = uniqueName(`fk_${label}`);
  await createSchema(admin, schema);
  const pool = newPool(schema, uniqueName(label), 4);
  await fkpg.migrate(pool);
  const kysely = new Kysely<Record<string, { id: number; body: string | null; fencing_token: string | null }>>({ dialect: new PostgresDialect({ pool }) });
  await pool.query('CREATE TABLE guarded (resource text PRIMARY KEY, value text NOT NULL)');
  closers.push(async () => { await kysely.destroy(); await dropSchema(admin, schema); await admin.end(); });

  const pgFenceMark = async (resource: string): Promise<bigint | null> =>
    big((await pool.query('SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1', [resource])).rows[0]?.token);
  const pgGuarded = async (resource: string): Promise<string | null> =>
    (await pool.query('SELECT value FROM guarded WHERE resource = $1', [resource])).rows[0]?.value ?? null;
  const pgGuard = (q: { query(text: string, values: unknown[]): Promise<unknown> } | object, resource: string, value: string) =>
    (q as pg.PoolClient).query('INSERT INTO guarded VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value', [resource, value]);

  /** A table of its own with row id 1 (token `initial`) when `seeded`. */
  const pgTable = async (seeded: boolean, initial: bigint): Promise<string> => {
    const table = uniqueName('rows');
    await pool.query(`CREATE TABLE ${table} (id int PRIMARY KEY, body text, fencing_token bigint)`);
    if (seeded) await pool.query(`INSERT INTO ${table} VALUES (1, 'seed', $1)`, [initial.toString()]);
    return table;
  };
  const pgRowState = async (table: string): Promise<State> => {
    const row = (await pool.query(`SELECT body, fencing_token::text AS token FROM ${table} WHERE id = 1`)).rows[0];
    if (row !== undefined) return { mark: big(row.token), value: row.body };
    const tomb = (await pool.query(`SELECT token::text AS token FROM fencekeeper_tombstones WHERE relation = $1`, [`${schema}.${table}`])).rows[0];
    return { mark: big(tomb?.token), value: null };
  };
  const pgRows = (name: string, seeded: boolean, write: (table: string, fencing: Fencing, value: string, mode?: Mode) => Promise<unknown>, expected = written): FenceKind => ({
    name,
    async make(initial = 1n) {
      const table = await pgTable(seeded, initial);
      if (!seeded && initial !== 1n) await write(table, initial, 'seed');
      return {
        ...(name.startsWith('kysely') ? { refusal: NothingUpdated } : {}),
        write: async (fencing, value, mode) => { await write(table, fencing, value, mode); },
        state: () => pgRowState(table),
        expected,
        async bind(first) {
          await fkpg.bindTable(pool, table, bindingOf(first));
          if (seeded) await fkpg.fencedUpsert(pool, { table, values: { id: 1, body: 'bound' }, key: ['id'], token: first });
          else await write(table, first, 'bound');
        },
      };
    },
  });
  // A resource behind fencekeeper_fences (withFence, the store, the ledger): the mark there, the value in `guarded`.
  const pgResource = (name: string, write: (resource: string, fencing: Fencing, value: string, mode?: Mode) => Promise<unknown>): FenceKind => ({
    name,
    async make(initial) {
      const resource = uniqueId(`fi-${name}`);
      if (initial !== undefined) await write(resource, initial, 'seed');
      return {
        write: async (fencing, value, mode) => { await write(resource, fencing, value, mode); },
        state: async () => ({ mark: await pgFenceMark(resource), value: await pgGuarded(resource) }),
        expected: written,
        async bind(first) {
          await fkpg.bindFence(pool, resource, bindingOf(first));
          await write(resource, first, 'bound');
        },
      };
    },
  });

  // MySQL: a database of this file's own.
  const my = await privateDatabase(`fk_${label}`, { connectionLimit: 4 });
  closers.push(() => my.drop());
  await my.pool.query('CREATE TABLE guarded (resource VARCHAR(200) PRIMARY KEY, value TEXT NOT NULL) ENGINE=InnoDB');
  const myRows = async (sql: string, values: unknown[] = []): Promise<Record<string, unknown>[]> => (await my.pool.query(sql, values))[0] as Record<string, unknown>[];
  const myGuard = (q: unknown, resource: string, value: string) =>
    (q as mysql.Pool).query('INSERT INTO guarded VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)', [resource, value]);
  const myRowState = async (table: string): Promise<State> => {
    const [row] = await myRows(`SELECT body, CAST(fencing_token AS CHAR) AS token FROM \`${table}\` WHERE id = 1`);
    if (row !== undefined) return { mark: big(row['token']), value: row['body'] as string | null };
    const [tomb] = await myRows('SELECT CAST(token AS CHAR) AS token FROM fencekeeper_tombstones WHERE CAST(relation AS CHAR) LIKE ?', [`%${table}%`]);
    return { mark: big(tomb?.['token']), value: null };
  };
  const myTableRows = (name: string, seeded: boolean, write: (table: string, fencing: Fencing, value: string, mode?: Mode) => Promise<unknown>, expected = written): FenceKind => ({
    name,
    async make(initial = 1n) {
      const table = uniqueId('rows').replaceAll('-', '_');
      await my.pool.query(`CREATE TABLE \`${table}\` (id INT PRIMARY KEY, body TEXT, fencing_token BIGINT) ENGINE=InnoDB`);
      if (seeded) await my.pool.query(`INSERT INTO \`${table}\` VALUES (1, 'seed', ?)`, [initial.toString()]);
      else if (initial !== 1n) await write(table, initial, 'seed');
      return {
        write: async (fencing, value, mode) => { await write(table, fencing, value, mode); },
        state: () => myRowState(table),
        expected,
        async bind(first) {
          await fkmy.bindTable(my.pool, table, bindingOf(first));
          if (seeded) await fkmy.fencedUpsert(my.pool, { table, values: { id: 1, body: 'bound' }, key: ['id'], token: first });
          else await write(table, first, 'bound');
        },
      };
    },
  });
  const myResource = (name: string, write: (resource: string, fencing: Fencing, value: string, mode?: Mode) => Promise<unknown>): FenceKind => ({
    name,
    async make(initial) {
      const resource = uniqueId(`fi-${name}`);
      if (initial !== undefined) await write(resource, initial, 'seed');
      return {
        write: async (fencing, value, mode) => { await write(resource, fencing, value, mode); },
        async state() {
          const [fence] = await myRows('SELECT CAST(token AS CHAR) AS token FROM fencekeeper_fences WHERE resource = ?', [resource]);
          const [row] = await myRows('SELECT value FROM guarded WHERE resource = ?', [resource]);
          return { mark: big(fence?.['token']), value: (row?.['value'] as string | undefined) ?? null };
        },
        expected: written,
        async bind(first) {
          await fkmy.bindFence(my.pool, resource, bindingOf(first));
          await write(resource, first, 'bound');
        },
      };
    },
  });

  // DynamoDB: one table for the file, an item per target.
  const dynamo: DynamoDBClient = dynamoClient();
  const TableName = await createTable(dynamo, `fk-${label}`);
  closers.push(async () => { await dropTable(dynamo, TableName); dynamo.destroy(); });
  const dynamoKind = (name: string, seeded: boolean, write: (pk: string, fencing: Fencing, value: string, mode?: Mode, bind?: FenceBinding) => Promise<unknown>, expected = written): FenceKind => ({
    name,
    async make(initial = 1n) {
      const pk = uniqueId(`fi-${name}`);
      const Key = { pk: { S: pk } };
      if (seeded) await fkdyn.fencedPutItem(dynamo, { TableName, Item: { ...Key, body: { S: 'seed' } }, token: initial });
      else if (initial !== 1n) await write(pk, initial, 'seed');
      return {
        write: async (fencing, value, mode) => { await write(pk, fencing, value, mode); },
        async state() {
          const item = (await dynamo.send(new GetItemCommand({ TableName, Key, ConsistentRead: true }))).Item;
          const mark = await fkdyn.readFence(dynamo, { TableName, Key });
          return { mark, value: item === undefined || fkdyn.isTombstone(item) ? null : item['body']?.S ?? null };
        },
        expected,
        async bind(first) {
          if (seeded) await fkdyn.fencedPutItem(dynamo, { TableName, Item: { ...Key, body: { S: 'bound' } }, token: first }, { bind: bindingOf(first) });
          else await write(pk, first, 'bound', undefined, bindingOf(first));
        },
      };
    },
  });

  // Redis: keys named per target.
  const redis = new Redis(testServers().redis, { maxRetriesPerRequest: 1 });
  redis.on('error', () => {});
  closers.push(async () => { redis.disconnect(); });
  const redisKind = (name: string, seeded: boolean, write: (key: string, fencing: Fencing, value: string, mode?: Mode) => Promise<unknown>, expected = written): FenceKind => ({
    name,
    async make(initial = 1n) {
      const key = uniqueId(`fi:${name}`);
      closers.push(async () => { await redis.del(key); });
      if (seeded) await fkredis.fencedSet(redis, key, 'seed', initial);
      else if (initial !== 1n) await write(key, initial, 'seed');
      return {
        write: async (fencing, value, mode) => { await write(key, fencing, value, mode); },
        async state() {
          const mark = await fkredis.readFence(redis, key);
          const stored = await fkredis.fencedGet(redis, key);
          return { mark, value: stored?.value ?? null };
        },
        expected,
        async bind(first) {
          await fkredis.bindFence(redis, key, bindingOf(first));
          if (seeded) await fkredis.fencedSet(redis, key, 'bound', first);
          else await write(key, first, 'bound');
        },
      };
    },
  });
  const redisStore = new fkredis.RedisFenceStore(redis);
  const redisGuarded = new Map<string, string>();

  // S3 (RGW): one bucket, an object per target.
  const bucket = new TestBucket(`fi-${label}`.slice(0, 20));
  await bucket.create();
  const s3 = s3Client().client;
  closers.push(async () => { s3.destroy(); await bucket.remove(); });
  const s3Kind = (name: string, seeded: boolean, write: (Key: string, fencing: Fencing, value: string, mode?: Mode, bind?: FenceBinding) => Promise<unknown>, expected = written): FenceKind => ({
    name,
    async make(initial = 1n) {
      const Key = uniqueId(`fi-${name}`);
      if (seeded) await fks3.fencedPutObject(s3, { Bucket: bucket.name, Key, Body: 'seed', token: initial });
      else if (initial !== 1n) await write(Key, initial, 'seed');
      return {
        write: async (fencing, value, mode) => { await write(Key, fencing, value, mode); },
        async state() {
          const mark = await fks3.readFence(s3, { Bucket: bucket.name, Key });
          if (!(await bucket.exists(Key))) return { mark, value: null };
          const raw = await bucket.raw(Key);
          return { mark, value: raw.metadata[fks3.TOMBSTONE_METADATA] === '1' ? null : raw.body };
        },
        expected,
        async bind(first) {
          if (seeded) await fks3.fencedPutObject(s3, { Bucket: bucket.name, Key, Body: 'bound', token: first }, { bind: bindingOf(first) });
          else await write(Key, first, 'bound', undefined, bindingOf(first));
        },
      };
    },
  });

  // The express adapter's in-process store.
  const memory = new MemoryFenceStore();
  const memoryGuarded = new Map<string, string>();

  const effectsRan = new Map<string, string>();

  const fences: FenceKind[] = [
    pgResource('postgres withFence', (resource, fencing, value) =>
      fkpg.withFence(pool, resource, fencing, (client) => pgGuard(client, resource, value))),
    pgResource('PostgresFenceStore', async (resource, fencing, value) => {
      const admission = await new fkpg.PostgresFenceStore(pool).admit(resource, fencing);
      await pgGuard(admission.transaction, resource, value);
      await admission.commit();
    }),
    {
      // The ledger: its effect runs (recording value) only when admitted; its mark is the fence's.
      name: 'postgres withEffect',
      async make(initial) {
        const resource = uniqueId('fi-effect');
        let n = 0;
        const write = (fencing: Fencing, value: string) =>
          fkpg.withEffect(pool, { resource, token: fencing, key: `k${n++}` }, () => { effectsRan.set(resource, value); });
        if (initial !== undefined) await write(initial, 'seed');
        return {
          write: async (fencing, value) => { await write(fencing, value); },
          state: async () => ({ mark: await pgFenceMark(resource), value: effectsRan.get(resource) ?? null }),
          expected: written,
          async bind(first) {
            await fkpg.bindFence(pool, resource, bindingOf(first));
            await write(first, 'bound');
          },
        };
      },
    },
    pgRows('postgres fencedUpdate', true, (table, token, body) => fkpg.fencedUpdate(pool, { table, where: { id: 1 }, set: { body }, token })),
    pgRows('postgres fencedInsert', false, async (table, token, body) => {
      // An insert never overwrites: each write deletes the row with the same token first, then inserts.
      await fkpg.fencedDelete(pool, { table, where: { id: 1 }, token });
      await fkpg.fencedInsert(pool, { table, values: { id: 1, body }, key: ['id'], token });
    }),
    pgRows('postgres fencedUpsert', false, (table, token, body) => fkpg.fencedUpsert(pool, { table, values: { id: 1, body }, key: ['id'], token })),
    pgRows('postgres fencedDelete', true, (table, token) => fkpg.fencedDelete(pool, { table, where: { id: 1 }, token }), deleted),
    pgRows('kysely fenced()', true, async (table, token, body) => {
      const result = await fkpg.fenced(kysely.updateTable(table).set({ body }).where('id', '=', 1), token).executeTakeFirst();
      if (result.numUpdatedRows === 0n) {
        // fenced() leaves "nothing updated" to the caller: say why, as the row helpers do.
        const { rows } = await pool.query(`SELECT fencing_token::text AS token FROM ${table} WHERE id = 1`);
        throw new NothingUpdated(`kysely fenced(): nothing updated (row token ${rows[0]?.token})`);
      }
    }),
    myResource('mysql withFence', (resource, fencing, value) =>
      fkmy.withFence(my.pool, resource, fencing, (connection) => myGuard(connection, resource, value))),
    myResource('MySqlFenceStore', async (resource, fencing, value) => {
      const admission = await new fkmy.MySqlFenceStore(my.pool).admit(resource, fencing);
      await myGuard(admission.transaction, resource, value);
      await admission.commit();
    }),
    myTableRows('mysql fencedUpdate', true, (table, token, body) => fkmy.fencedUpdate(my.pool, { table, where: { id: 1 }, set: { body }, token })),
    myTableRows('mysql fencedInsert', false, async (table, token, body) => {
      await fkmy.fencedDelete(my.pool, { table, where: { id: 1 }, token });
      await fkmy.fencedInsert(my.pool, { table, values: { id: 1, body }, key: ['id'], token });
    }),
    myTableRows('mysql fencedUpsert', false, (table, token, body) => fkmy.fencedUpsert(my.pool, { table, values: { id: 1, body }, key: ['id'], token })),
    myTableRows('mysql fencedDelete', true, (table, token) => fkmy.fencedDelete(my.pool, { table, where: { id: 1 }, token }), deleted),
    dynamoKind('fencedPutItem', false, (pk, token, body, _mode, bind) =>
      fkdyn.fencedPutItem(dynamo, { TableName, Item: { pk: { S: pk }, body: { S: body } }, token }, bind === undefined ? {} : { bind })),
    dynamoKind('fencedUpdateItem', false, (pk, token, body, _mode, bind) =>
      fkdyn.fencedUpdateItem(dynamo, { TableName, Key: { pk: { S: pk } }, UpdateExpression: 'SET body = :b', ExpressionAttributeValues: { ':b': { S: body } }, token }, bind === undefined ? {} : { bind })),
    dynamoKind('fencedDeleteItem', true, (pk, token) => fkdyn.fencedDeleteItem(dynamo, { TableName, Key: { pk: { S: pk } }, token }), deleted),
    redisKind('redis fencedSet', false, (key, token, value) => fkredis.fencedSet(redis, key, value, token)),
    redisKind('redis fencedDelete', true, (key, token) => fkredis.fencedDelete(redis, key, token), deleted),
    {
      // Compares tokens only (it keeps no binding): no bind.
      name: 'RedisFenceStore',
      async make(initial) {
        const resource = uniqueId('fi-redis-store');
        const write = async (fencing: Fencing, value: string) => {
          const admission = await redisStore.admit(resource, fencing);
          redisGuarded.set(resource, value);
          await admission.commit();
        };
        if (initial !== undefined) await write(initial, 'seed');
        return {
          write,
          state: async () => ({ mark: await redisStore.current(resource), value: redisGuarded.get(resource) ?? null }),
          expected: written,
        };
      },
    },
    s3Kind('fencedPutObject', false, (Key, token, Body, _mode, bind) =>
      fks3.fencedPutObject(s3, { Bucket: bucket.name, Key, Body, token }, bind === undefined ? {} : { bind })),
    s3Kind('fencedDeleteObject', true, (Key, token) => fks3.fencedDeleteObject(s3, { Bucket: bucket.name, Key, token }), deleted),
    {
      name: 'MemoryFenceStore',
      async make(initial) {
        const resource = uniqueId('fi-memory');
        const write = async (fencing: Fencing, value: string) => {
          const admission = await memory.admit(resource, fencing as never);
          memoryGuarded.set(resource, value);
          await admission.commit();
        };
        if (initial !== undefined) await write(initial, 'seed');
        return {
          write,
          state: async () => ({ mark: await memory.current(resource), value: memoryGuarded.get(resource) ?? null }),
          expected: written,
          async bind(first) {
            await memory.bind(resource, bindingOf(first));
            await write(first, 'bound');
          },
        };
      },
    },
  ];
  return {
    fences,
    async close() {
      for (const close of closers.reverse()) await close().catch(() => undefined);
    },
  };
}
