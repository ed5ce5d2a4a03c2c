// Bad input is refused before any SQL is built: every call below must throw
// InvalidTokenError / InvalidArgumentError with no query sent, proven by a
// pool wrapper counting every query (Kysely runs over the same wrapper).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { InvalidArgumentError, InvalidTokenError, MAX_TOKEN } from '../../../src/index.js';
import { PostgresFenceStore, fenced, fencedDelete, fencedInsert, fencedUpdate, fencedUpsert, migrate, withFence, type Database } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, FLAVORS, createSchema, dropSchema, newPool, uniqueName, type TestDatabase } from './helpers.js';

/** A pg.Pool look-alike that counts every query sent through it or its clients. */
function countingPool(pool: pg.Pool) {
  const counter = { queries: 0 };
  const wrapper = {
    counter,
    query: (...args: Parameters<pg.Pool['query']>) => {
      counter.queries += 1;
      return (pool.query as (...a: unknown[]) => unknown)(...args);
    },
    connect: async () => {
      const client = await pool.connect();
      return {
        query: (...args: unknown[]) => {
          counter.queries += 1;
          return (client.query as (...a: unknown[]) => unknown).apply(client, args);
        },
        release: (error?: Error | boolean) => client.release(error),
        processID: (client as unknown as { processID?: number }).processID,
      };
    },
    end: () => pool.end(),
  };
  return wrapper;
}

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
afterAll(async () => {
  await admin.end();
});

describe.each(FLAVORS)('bad input with %s: clear errors, no SQL sent', (flavor) => {
  const schema = uniqueName(`fk_pginput_${flavor}`);
  let pool: pg.Pool;
  let counting: ReturnType<typeof countingPool>;
  let kysely: Kysely<TestDatabase> | undefined;
  let db: Database;

  beforeAll(async () => {
    await createSchema(admin, schema);
    pool = newPool(schema, uniqueName('fk_input'), 4);
    counting = countingPool(pool);
    if (flavor === 'kysely') {
      kysely = new Kysely<TestDatabase>({ dialect: new PostgresDialect({ pool: counting as never }) });
      db = kysely;
    } else {
      db = counting as unknown as Database;
    }
    await migrate(db);
    await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint)');
    await pool.query(`INSERT INTO docs VALUES (1, 'kept', 5)`);
  });

  afterAll(async () => {
    if (kysely !== undefined) await kysely.destroy();
    else await pool.end();
    await dropSchema(admin, schema);
  });

  const badTokens: [string, unknown][] = [
    ['zero', 0n],
    ['negative', -1n],
    ['beyond int8', MAX_TOKEN + 1n],
    ['a decimal string', '34'],
    ['a number', 34],
    ['undefined', undefined],
    ['null', null],
  ];
  const injections = [
    'docs"; DROP TABLE docs; --',
    'docs; DROP TABLE docs',
    'public.docs.extra',
    '',
    'docs"',
    '1docs',
    "docs' OR '1'='1",
    'a'.repeat(64),
  ];

  const update = (o: Record<string, unknown>) => fencedUpdate(db, { table: 'docs', where: { id: 1 }, set: { body: 'x' }, token: 6n, ...o } as never);
  const insert = (o: Record<string, unknown>) => fencedInsert(db, { table: 'docs', key: ['id'], values: { id: 2, body: 'x' }, token: 6n, ...o } as never);
  const upsert = (o: Record<string, unknown>) => fencedUpsert(db, { table: 'docs', key: ['id'], values: { id: 2, body: 'x' }, token: 6n, ...o } as never);
  const remove = (o: Record<string, unknown>) => fencedDelete(db, { table: 'docs', where: { id: 1 }, token: 6n, ...o } as never);
  const store = () => new PostgresFenceStore(db);

  async function refused(call: () => Promise<unknown>, kind: typeof InvalidTokenError | typeof InvalidArgumentError): Promise<void> {
    const before = counting.counter.queries;
    const error = await Promise.resolve().then(call).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(kind);
    expect(counting.counter.queries).toBe(before);
  }

  it.each(badTokens)('token: %s', async (_, token) => {
    await refused(() => withFence(db, 'r', token as bigint, async () => undefined), InvalidTokenError);
    await refused(() => update({ token }), InvalidTokenError);
    await refused(() => insert({ token }), InvalidTokenError);
    await refused(() => upsert({ token }), InvalidTokenError);
    await refused(() => remove({ token }), InvalidTokenError);
    await refused(() => store().admit('r', token as bigint), InvalidTokenError);
    if (kysely !== undefined) {
      const k = kysely;
      await refused(async () => fenced(k.updateTable('docs').set({ body: 'x' }), token as bigint), InvalidTokenError);
    }
  });

  it.each(injections)('table or column name %j', async (name) => {
    await refused(() => update({ table: name }), InvalidArgumentError);
    await refused(() => update({ where: { [name]: 1 } }), InvalidArgumentError);
    await refused(() => update({ set: { [name]: 'x' } }), InvalidArgumentError);
    await refused(() => update({ tokenColumn: name }), InvalidArgumentError);
    await refused(() => insert({ table: name }), InvalidArgumentError);
    await refused(() => insert({ values: { id: 2, [name]: 'x' } }), InvalidArgumentError);
    await refused(() => insert({ key: [name] }), InvalidArgumentError);
    await refused(() => upsert({ tokenColumn: name }), InvalidArgumentError);
    await refused(() => remove({ table: name }), InvalidArgumentError);
    await refused(() => remove({ where: { id: 1 }, key: [name] }), InvalidArgumentError);
    if (kysely !== undefined) {
      const k = kysely;
      await refused(async () => fenced(k.updateTable('docs').set({ body: 'x' }), 6n, name), InvalidArgumentError);
    }
  });

  it('where / set / values / key shapes', async () => {
    for (const where of [{}, [], null, 'id = 1', new Map([['id', 1]]), new Date(), { id: undefined }]) {
      await refused(() => update({ where }), InvalidArgumentError);
      await refused(() => remove({ where }), InvalidArgumentError);
    }
    for (const set of [{}, [], null, 'body = 1', { fencing_token: 99 }, { body: undefined }]) {
      await refused(() => update({ set }), InvalidArgumentError);
    }
    await refused(() => update({ set: { stamp: 1 }, tokenColumn: 'stamp' }), InvalidArgumentError);
    for (const values of [{}, null, { body: 'x' }, { id: null, body: 'x' }, { id: 2, fencing_token: 1 }]) {
      await refused(() => insert({ values }), InvalidArgumentError);
      await refused(() => upsert({ values }), InvalidArgumentError);
    }
    for (const key of [[], 'id', ['id', 'id'], undefined]) {
      await refused(() => insert({ key }), InvalidArgumentError);
    }
    await refused(() => withFence(db, '', 6n, async () => undefined), InvalidArgumentError);
    await refused(() => withFence(db, 5 as unknown as string, 6n, async () => undefined), InvalidArgumentError);
    await refused(() => withFence(db, 'r', 6n, 'work' as never), InvalidArgumentError);
    await refused(() => store().current(''), InvalidArgumentError);
    // Names PostgreSQL cannot store exactly: NUL, and a lone surrogate (no UTF-8 form).
    for (const resource of ['a\0b', 'a\uD800b', '\uDFFF']) {
      await refused(() => withFence(db, resource, 6n, async () => undefined), InvalidArgumentError);
      await refused(() => store().admit(resource, 6n), InvalidArgumentError);
      await refused(() => store().current(resource), InvalidArgumentError);
    }
    await refused(() => fencedUpdate(db, null as never), InvalidArgumentError);
  });

  it('the table is untouched afterwards', async () => {
    const { rows } = await pool.query(`SELECT id, body, fencing_token::text FROM docs ORDER BY id`);
    expect(rows).toEqual([{ id: 1, body: 'kept', fencing_token: '5' }]);
    // And the counter does count: a valid call goes through it.
    const before = counting.counter.queries;
    expect(await fencedUpdate(db, { table: 'docs', where: { id: 1 }, set: { body: 'kept' }, token: 5n })).toBe(1);
    expect(counting.counter.queries).toBeGreaterThan(before);
  });
});
