// Regressions from trying fencekeeper/postgres as a demanding user would,
// against the real server, once per flavor (a pg.Pool and Kysely over one):
// - a COMMIT that PostgreSQL answers with ROLLBACK (the work caught a failed
//   statement) was taken as success, and the fence advance silently vanished:
//   mark 100, withFence(200) "succeeded", the mark stayed 100, and a later
//   withFence(150) was admitted;
// - under REPEATABLE READ (and SERIALIZABLE with the deleter at READ
//   COMMITTED) fencedUpsert / fencedInsert brought back a row a newer holder
//   had deleted: the tombstone check read the transaction's old snapshot.
// Also what the isolation levels do to a contended withFence, which the
// README's isolation rule states.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { Kysely } from 'kysely';
import { CommitFailedError, StaleTokenError, WorkNotCommittedError, type FencingToken } from '../../../src/index.js';
import { PostgresFenceStore, fencedDelete, fencedInsert, fencedUpdate, fencedUpsert, migrate, withFence, type Database, type Queryable } from '../../../adapters/postgres/index.js';
import { adminPool, DATABASE_URL, FLAVORS, backendPidOf, createSchema, dropSchema, exec, newKysely, newPool, uniqueName, waitForFenceWaiter, type Flavor, type TestDatabase } from './helpers.js';


const admin = adminPool();

type Isolation = 'read committed' | 'repeatable read' | 'serializable';

describe.each(FLAVORS)('fencekeeper/postgres hardening with %s', (flavor: Flavor) => {
  const schema = uniqueName(`fk_pgh_${flavor}`);
  const pools: pg.Pool[] = [];
  const kyselys: Kysely<TestDatabase>[] = [];
  /** The flavor under test over a pool whose sessions default to `isolation`. */
  const databases = new Map<Isolation, { pool: pg.Pool; db: Database }>();

  const on = (isolation: Isolation): { pool: pg.Pool; db: Database } => databases.get(isolation)!;
  const sql = async <R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> =>
    (await on('read committed').pool.query<R>(text, values)).rows;
  const mark = (resource: string): Promise<FencingToken | null> => new PostgresFenceStore(on('read committed').pool).current(resource);

  /** A transaction of the flavor under test, at `isolation` (undefined: the session's default). */
  const inTransaction = async <T>(isolation: Isolation, level: Isolation | undefined, body: (trx: Queryable) => Promise<T>): Promise<T> => {
    const { pool, db } = on(isolation);
    if (flavor === 'kysely') {
      const k = db as Kysely<TestDatabase>;
      return (level === undefined ? k.transaction() : k.transaction().setIsolationLevel(level)).execute(body);
    }
    const client = await pool.connect();
    try {
      await client.query(level === undefined ? 'BEGIN' : `BEGIN ISOLATION LEVEL ${level}`);
      try {
        const result = await body(client);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      }
    } finally {
      client.release();
    }
  };

  beforeAll(async () => {
    await createSchema(admin, schema);
    for (const isolation of ['read committed', 'repeatable read', 'serializable'] as const) {
      const pool = newPool(schema, uniqueName('fk_pgh'), 8, { default_transaction_isolation: isolation });
      pools.push(pool);
      let db: Database = pool;
      if (flavor === 'kysely') {
        const k = newKysely(pool);
        kyselys.push(k);
        db = k;
      }
      databases.set(isolation, { pool, db });
    }
    await migrate(on('read committed').db);
    await sql('CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint)');
    await sql('CREATE TABLE history (seq bigserial PRIMARY KEY, round int NOT NULL, token bigint NOT NULL)');
    await sql('CREATE TABLE parent (id int PRIMARY KEY)');
    await sql('CREATE TABLE child (parent_id int NOT NULL REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)');
    await sql('CREATE TABLE skew_a (x int)');
    await sql('CREATE TABLE skew_b (x int)');
  });

  afterAll(async () => {
    for (const k of kyselys) await k.destroy();
    if (kyselys.length === 0) for (const pool of pools) await pool.end();
    await dropSchema(admin, schema);
  });

  describe('a fence advance never disappears', () => {
    it('work that swallowed a duplicate-key error (COMMIT would answer ROLLBACK): rejects WORK_NOT_COMMITTED, its writes are gone, 150 is refused after 200', async () => {
      const { db } = on('read committed');
      const resource = uniqueName('swallow');
      await withFence(db, resource, 100n, async () => undefined);
      await sql('INSERT INTO docs (id, body) VALUES (100, $1)', ['taken']);
      let swallowed: unknown;
      const error = await withFence(db, resource, 200n, async (trx: Queryable) => {
        await exec(trx, 'INSERT INTO history (round, token) VALUES (1, 200)');
        try {
          await exec(trx, 'INSERT INTO docs (id, body) VALUES (100, $1)', ['again']);
        } catch (e) {
          swallowed = e; // "duplicate key, fine"
        }
        return 'done';
      }).catch((e: unknown) => e);
      expect(swallowed).toMatchObject({ code: '23505' });
      expect(error).toBeInstanceOf(WorkNotCommittedError);
      expect(error).toMatchObject({ code: 'WORK_NOT_COMMITTED', resource, token: 200n });
      expect((error as Error).cause).toMatchObject({ code: '25P02' }); // in_failed_sql_transaction: stopped before COMMIT
      expect(await sql('SELECT 1 FROM history WHERE round = 1')).toHaveLength(0);
      expect(await mark(resource)).toBe(200n);
      await expect(withFence(db, resource, 150n, async () => 'admitted')).rejects.toMatchObject({ code: 'STALE_TOKEN', presented: 150n, current: 200n });
    });

    it('work that broke a deferred constraint: rejects WORK_NOT_COMMITTED before COMMIT runs, the advance stays', async () => {
      const { db } = on('read committed');
      const resource = uniqueName('deferred');
      const error = await withFence(db, resource, 30n, async (trx: Queryable) => {
        await exec(trx, 'INSERT INTO child (parent_id) VALUES (404)'); // checked only at commit
        await exec(trx, 'INSERT INTO history (round, token) VALUES (2, 30)');
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WorkNotCommittedError);
      // foreign_key_violation raised by SET CONSTRAINTS ALL IMMEDIATE, so our savepoint survived
      expect((error as Error).cause).toMatchObject({ code: '23503' });
      expect(await sql('SELECT 1 FROM child WHERE parent_id = 404')).toHaveLength(0);
      expect(await sql('SELECT 1 FROM history WHERE round = 2')).toHaveLength(0);
      expect(await mark(resource)).toBe(30n);
    });

    it('work that recovers from a failed statement with its own savepoint commits as usual', async () => {
      const { db } = on('read committed');
      const resource = uniqueName('recovered');
      await sql('INSERT INTO docs (id, body) VALUES (300, $1)', ['taken']);
      const result = await withFence(db, resource, 40n, async (trx: Queryable) => {
        await exec(trx, 'SAVEPOINT mine');
        await exec(trx, 'INSERT INTO docs (id, body) VALUES (300, $1)', ['again']).catch(() => exec(trx, 'ROLLBACK TO SAVEPOINT mine'));
        await exec(trx, 'INSERT INTO history (round, token) VALUES (3, 40)');
        return 'ok';
      });
      expect(result).toBe('ok');
      expect(await sql('SELECT token::text FROM history WHERE round = 3')).toEqual([{ token: '40' }]);
      expect(await mark(resource)).toBe(40n);
    });

    it('work that ends the transaction itself (ROLLBACK): rejects COMMIT_FAILED and the advance is applied again on its own', async () => {
      const { db } = on('read committed');
      const resource = uniqueName('ended');
      await withFence(db, resource, 50n, async () => undefined);
      const error = await withFence(db, resource, 60n, async (trx: Queryable) => {
        await exec(trx, 'INSERT INTO history (round, token) VALUES (4, 60)');
        await exec(trx, 'ROLLBACK');
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CommitFailedError);
      expect(error).toMatchObject({ code: 'COMMIT_FAILED', resource, token: 60n, restored: true, retryable: false });
      expect(await sql('SELECT 1 FROM history WHERE round = 4')).toHaveLength(0);
      expect(await mark(resource)).toBe(60n);
      await expect(withFence(db, resource, 55n, async () => 'admitted')).rejects.toBeInstanceOf(StaleTokenError);
    });

    it('COMMIT itself failing (SERIALIZABLE, a write skew caught at commit): rejects COMMIT_FAILED, retryable, the advance applied again, 150 refused', async () => {
      const { pool, db } = on('serializable');
      const resource = uniqueName('skew');
      await withFence(db, resource, 100n, async () => undefined);
      // The other side of the skew: reads skew_a, writes skew_b, commits first.
      const other = await pool.connect();
      try {
        await other.query('BEGIN');
        await other.query('SELECT * FROM skew_a');
        const error = await withFence(db, resource, 200n, async (trx: Queryable) => {
          await exec(trx, 'SELECT * FROM skew_b');
          await exec(trx, 'INSERT INTO skew_a (x) VALUES (200)');
          await other.query('INSERT INTO skew_b (x) VALUES (1)');
          await other.query('COMMIT');
        }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(CommitFailedError);
        expect(error).toMatchObject({ code: 'COMMIT_FAILED', restored: true, retryable: true });
        // serialization_failure, raised by COMMIT itself (the pivot is cancelled during the commit attempt)
        expect((error as Error).cause).toMatchObject({ code: '40001' });
        expect(((error as Error).cause as { detail?: string }).detail).toMatch(/during commit attempt/);
      } finally {
        other.release();
      }
      expect(await sql('SELECT 1 FROM skew_a WHERE x = 200')).toHaveLength(0);
      expect(await mark(resource)).toBe(200n);
      await expect(withFence(db, resource, 150n, async () => 'admitted')).rejects.toMatchObject({ code: 'STALE_TOKEN', current: 200n });
    });
  });

  describe('isolation levels', () => {
    const upsert = (trx: Queryable, id: number, token: FencingToken) => fencedUpsert(trx, { table: 'docs', key: ['id'], values: { id, body: `by-${token}` }, token });
    const insert = (trx: Queryable, id: number, token: FencingToken) => fencedInsert(trx, { table: 'docs', key: ['id'], values: { id, body: `by-${token}` }, token });
    type Write = (trx: Queryable, id: number, token: FencingToken) => Promise<unknown>;
    const writes: readonly (readonly [string, Write])[] = [['fencedUpsert', upsert], ['fencedInsert', insert]];
    let nextId = 1000;

    /**
     * Row at token 3; a stale holder (token 5) opens a transaction and reads;
     * a newer holder (token 10) deletes the row; then the stale holder writes.
     */
    const staleWriteAfterDelete = async (
      write: (trx: Queryable, id: number, token: FencingToken) => Promise<unknown>,
      pools: Isolation,
      level: Isolation | undefined,
    ): Promise<{ id: number; error: unknown }> => {
      const id = (nextId += 1);
      await insert(on('read committed').db, id, 3n);
      const error = await inTransaction(pools, level, async (trx) => {
        await exec(trx, 'SELECT * FROM docs WHERE id = $1', [id]); // the transaction's snapshot is taken here
        expect(await fencedDelete(on('read committed').db, { table: 'docs', where: { id }, token: 10n })).toBe(1);
        await write(trx, id, 5n);
        return 'written';
      }).catch((e: unknown) => e);
      return { id, error };
    };

    for (const [name, write] of writes) {
      it(`REPEATABLE READ: a stale ${name} after a newer holder's delete is refused (serialization failure naming the level), no row; the retry is stale`, async () => {
        const { id, error } = await staleWriteAfterDelete(write, 'read committed', 'repeatable read');
        expect(error).toMatchObject({ code: '40001' });
        expect((error as Error).message).toMatch(/REPEATABLE READ transaction took its snapshot/);
        expect(await sql('SELECT 1 FROM docs WHERE id = $1', [id])).toHaveLength(0);
        const retry = await inTransaction('read committed', 'repeatable read', (trx) => write(trx, id, 5n)).catch((e: unknown) => e);
        expect(retry).toBeInstanceOf(StaleTokenError);
        expect(retry).toMatchObject({ presented: 5n, current: 10n });
        expect(await sql('SELECT 1 FROM docs WHERE id = $1', [id])).toHaveLength(0);
      });

      it(`default_transaction_isolation = repeatable read: a stale ${name} after a newer holder's delete is refused, no row`, async () => {
        const { id, error } = await staleWriteAfterDelete(write, 'repeatable read', undefined);
        expect(error).toMatchObject({ code: '40001' });
        expect((error as Error).message).toMatch(/REPEATABLE READ/);
        expect(await sql('SELECT 1 FROM docs WHERE id = $1', [id])).toHaveLength(0);
      });

      it(`SERIALIZABLE (the deleter at READ COMMITTED): a stale ${name} after the delete is refused, no row`, async () => {
        const { id, error } = await staleWriteAfterDelete(write, 'read committed', 'serializable');
        expect(error).toMatchObject({ code: '40001' });
        expect((error as Error).message).toMatch(/SERIALIZABLE/);
        expect(await sql('SELECT 1 FROM docs WHERE id = $1', [id])).toHaveLength(0);
      });
    }

    it('REPEATABLE READ: a row created and deleted by a newer holder after the snapshot is not re-created either', async () => {
      const id = (nextId += 1);
      const error = await inTransaction('read committed', 'repeatable read', async (trx) => {
        await exec(trx, 'SELECT 1'); // snapshot: no row, no tombstone
        await insert(on('read committed').db, id, 10n);
        await fencedDelete(on('read committed').db, { table: 'docs', where: { id }, token: 10n });
        await insert(trx, id, 5n);
        return 'written';
      }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: '40001' });
      expect(await sql('SELECT 1 FROM docs WHERE id = $1', [id])).toHaveLength(0);
    });

    it('REPEATABLE READ: a stale fencedUpdate / fencedDelete after a newer holder\'s update fails with 40001 (PostgreSQL\'s own check), the row unchanged', async () => {
      const stale = [
        (trx: Queryable, id: number) => fencedUpdate(trx, { table: 'docs', where: { id }, set: { body: 'by-5' }, token: 5n }),
        (trx: Queryable, id: number) => fencedDelete(trx, { table: 'docs', where: { id }, token: 5n }),
      ];
      for (const write of stale) {
        const id = (nextId += 1);
        await insert(on('read committed').db, id, 3n);
        const error = await inTransaction('read committed', 'repeatable read', async (trx) => {
          await exec(trx, 'SELECT * FROM docs WHERE id = $1', [id]);
          expect(await fencedUpdate(on('read committed').db, { table: 'docs', where: { id }, set: { body: 'by-10' }, token: 10n })).toBe(1);
          await write(trx, id);
          return 'written';
        }).catch((e: unknown) => e);
        expect(error).toMatchObject({ code: '40001' });
        expect(await sql('SELECT body, fencing_token::text AS token FROM docs WHERE id = $1', [id])).toEqual([{ body: 'by-10', token: '10' }]);
      }
    });

    it('READ COMMITTED needs no retry: the stale write after the delete is refused as stale at once', async () => {
      const { id, error } = await staleWriteAfterDelete(upsert, 'read committed', 'read committed');
      expect(error).toBeInstanceOf(StaleTokenError);
      expect(error).toMatchObject({ presented: 5n, current: 10n });
      expect(await sql('SELECT 1 FROM docs WHERE id = $1', [id])).toHaveLength(0);
    });

    for (const isolation of ['repeatable read', 'serializable'] as const) {
      it(`withFence under ${isolation}: a holder that waited on the fence row fails with 40001 when the previous one commits; the retry passes`, async () => {
        const { db } = on(isolation);
        const resource = uniqueName('contended');
        let waited: unknown;
        await withFence(db, resource, 20n, async (trx: Queryable) => {
          const holder = await backendPidOf(trx);
          waited = withFence(db, resource, 21n, async () => 'admitted').catch((e: unknown) => e);
          await waitForFenceWaiter(admin, holder);
        });
        expect(await waited).toMatchObject({ code: '40001' });
        expect(await mark(resource)).toBe(20n);
        expect(await withFence(db, resource, 21n, async () => 'admitted')).toBe('admitted');
        expect(await mark(resource)).toBe(21n);
      });

      it(`withFence under ${isolation}, one token: a holder that waited behind an equal token's holder fails with 40001 too (its snapshot predates that commit)`, async () => {
        const { db } = on(isolation);
        const resource = uniqueName('contended_equal');
        await withFence(db, resource, 20n, async () => 'first');
        let waited: unknown;
        await withFence(db, resource, 20n, async (trx: Queryable) => {
          const holder = await backendPidOf(trx);
          waited = withFence(db, resource, 20n, async () => 'admitted').catch((e: unknown) => e);
          await waitForFenceWaiter(admin, holder);
        });
        expect(await waited).toMatchObject({ code: '40001' });
        expect(await withFence(db, resource, 20n, async () => 'admitted')).toBe('admitted');
        expect(await mark(resource)).toBe(20n);
      });
    }
  });
});
