// The equal-token path of withFence and PostgresFenceStore (fence-advance.ts):
// a token equal to the mark locks the fence row without rewriting it (its
// xmin, previous_token and updated_at stay), and holders are still
// serialized on it (a concurrent writer waits, a NOWAIT lock fails); a stale
// token is refused carrying the mark and leaves the row as it was; a larger
// one advances it (previous_token: the mark before, updated_at moves). Under
// REPEATABLE READ and SERIALIZABLE an equal token rewrites the row instead,
// and a holder that waited behind it fails with 40001. On a pg.Pool and on
// Kysely.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StaleTokenError, type FencingToken } from '../../../src/index.js';
import { PostgresFenceStore, migrate, withFence, type Database } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, FLAVORS, backendPidOf, createSchema, dropSchema, newKysely, newPool, uniqueName, waitForFenceWaiter, type Flavor } from './helpers.js';
import type { Kysely } from 'kysely';

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
const schema = uniqueName('fk_pgequal');
let pool: pg.Pool;
let probe: pg.Pool;
let kysely: Kysely<never>;
const dbOf = (flavor: Flavor): Database => (flavor === 'pg' ? pool : (kysely as unknown as Database));

beforeAll(async () => {
  await createSchema(admin, schema);
  pool = newPool(schema, uniqueName('fk_pgequal'), 6);
  probe = newPool(schema, uniqueName('fk_pgequal_probe'), 2);
  kysely = newKysely(pool) as unknown as Kysely<never>;
  await migrate(pool);
});

afterAll(async () => {
  await kysely.destroy(); // ends `pool`
  await probe.end();
  await dropSchema(admin, schema);
  await admin.end();
});

interface RowState { readonly xmin: string; readonly token: FencingToken; readonly previous: FencingToken | null; readonly updatedAt: number }

async function rowOf(resource: string): Promise<RowState> {
  const { rows } = await probe.query<{ xmin: string; token: string; previous: string | null; updated_at: string }>(
    'SELECT xmin::text AS xmin, token::text AS token, previous_token::text AS previous, extract(epoch FROM updated_at)::text AS updated_at FROM fencekeeper_fences WHERE resource = $1',
    [resource],
  );
  const row = rows[0];
  if (row === undefined) throw new Error(`no fence row for ${resource}`);
  return { xmin: row.xmin, token: BigInt(row.token), previous: row.previous === null ? null : BigInt(row.previous), updatedAt: Number(row.updated_at) };
}

/** Whether another session can lock the fence row right now (false: someone holds it). */
async function lockable(resource: string): Promise<boolean> {
  const client = await probe.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT 1 FROM fencekeeper_fences WHERE resource = $1 FOR UPDATE NOWAIT', [resource]);
    return true;
  } catch (error) {
    if ((error as { code?: string }).code === '55P03') return false;
    throw error;
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/**
 * Runs a fenced transaction with `token` through `how` (withFence or a store
 * admission); `during` runs while it holds the fence, with its backend pid.
 */
type Fenced = (db: Database, resource: string, token: FencingToken, during: (pid: number) => Promise<void>) => Promise<{ previous: FencingToken | null | undefined }>;

const HOW: Record<'withFence' | 'PostgresFenceStore', Fenced> = {
  withFence: async (db, resource, token, during) => {
    await withFence(db, resource, token, async (trx) => during(await backendPidOf(trx as never)));
    return { previous: undefined };
  },
  PostgresFenceStore: async (db, resource, token, during) => {
    const admission = await new PostgresFenceStore(db).admit(resource, token);
    try {
      await during(await backendPidOf(admission.transaction as never));
    } catch (error) {
      await admission.abort();
      throw error;
    }
    await admission.commit();
    return { previous: admission.previous };
  },
};

describe.each(FLAVORS)('the equal-token path (%s)', (flavor) => {
  describe.each(Object.keys(HOW) as (keyof typeof HOW)[])('%s', (how) => {
    const fence = HOW[how];
    const resource = `equal:${flavor}:${how}`;
    const nothing = async (): Promise<void> => undefined;

    it('an equal token locks the row without rewriting it, and a concurrent holder waits for it', async () => {
      await fence(dbOf(flavor), resource, 5n, nothing);
      const before = await rowOf(resource);
      expect(before.token).toBe(5n);

      const order: string[] = [];
      let second: Promise<unknown> | undefined;
      const first = await fence(dbOf(flavor), resource, 5n, async (pid) => {
        // Held: another session cannot lock the row...
        expect(await lockable(resource)).toBe(false);
        // ...and a second holder with the same token waits on it until we commit.
        second = fence(dbOf(flavor), resource, 5n, async () => { order.push('second'); });
        await waitForFenceWaiter(admin, pid);
        order.push('first');
      });
      await second;
      expect(order).toEqual(['first', 'second']);
      if (how === 'PostgresFenceStore') expect(first.previous).toBe(5n);

      const after = await rowOf(resource);
      expect(after).toEqual(before); // the same tuple version: xmin, previous_token and updated_at unchanged
      expect(await lockable(resource)).toBe(true);
    });

    it('a stale token is refused with the mark and leaves the row as it was', async () => {
      const before = await rowOf(resource);
      let ran = false;
      const refused = await fence(dbOf(flavor), resource, 4n, async () => { ran = true; }).then(() => undefined, (error: unknown) => error);
      expect(refused).toBeInstanceOf(StaleTokenError);
      expect((refused as StaleTokenError).current).toBe(5n);
      expect(ran).toBe(false);
      expect(await rowOf(resource)).toEqual(before);
      expect(await lockable(resource)).toBe(true);
    });

    it('a larger token advances the mark: a new row version, previous_token the mark before, updated_at moved', async () => {
      const before = await rowOf(resource);
      const advanced = await fence(dbOf(flavor), resource, 9n, nothing);
      if (how === 'PostgresFenceStore') expect(advanced.previous).toBe(5n);
      const after = await rowOf(resource);
      expect(after.token).toBe(9n);
      expect(after.previous).toBe(5n);
      expect(after.xmin).not.toBe(before.xmin);
      expect(after.updatedAt).toBeGreaterThan(before.updatedAt);
      // The equal token again: the advance's row stays as it is.
      await fence(dbOf(flavor), resource, 9n, nothing);
      expect(await rowOf(resource)).toEqual(after);
    });

    it('a mark another session moves while this one waits for the row: refused with that mark, the work never runs', async () => {
      // Admitted twice with 12: on a pg.Pool the next open is the probe (fence-open.ts), which here waits for the row.
      await fence(dbOf(flavor), resource, 12n, nothing);
      await fence(dbOf(flavor), resource, 12n, nothing);
      const other = await probe.connect();
      try {
        await other.query('BEGIN');
        await other.query('UPDATE fencekeeper_fences SET token = 13, previous_token = token, updated_at = now() WHERE resource = $1', [resource]);
        const { rows } = await other.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        let ran = false;
        const waiting = fence(dbOf(flavor), resource, 12n, async () => { ran = true; }).then(() => undefined, (error: unknown) => error);
        await waitForFenceWaiter(admin, rows[0]!.pid);
        await other.query('COMMIT');
        const refused = await waiting;
        expect(refused).toBeInstanceOf(StaleTokenError);
        expect((refused as StaleTokenError).current).toBe(13n);
        expect(ran).toBe(false);
      } finally {
        other.release();
      }
      expect((await rowOf(resource)).token).toBe(13n);
      expect(await lockable(resource)).toBe(true);
    });
  });
});

// Under REPEATABLE READ and SERIALIZABLE (here the sessions' default, as a
// deployment sets it) the equal token must not take the lock-only path: the
// fence statement takes the transaction's snapshot before it waits for the
// row, and PostgreSQL fails a holder that waited (40001) only if the one
// before it wrote the row. So there an equal token rewrites the row, on
// every path: on a pg.Pool the probe (tried once this process has admitted
// the token) must miss and the upsert rewrite; on Kysely, the upsert alone.
describe.each(['repeatable read', 'serializable'] as const)('the equal token at %s', (isolation) => {
  let isolated: pg.Pool;
  let isolatedKysely: Kysely<never>;
  const dbAt = (flavor: Flavor): Database => (flavor === 'pg' ? isolated : (isolatedKysely as unknown as Database));

  beforeAll(() => {
    isolated = newPool(schema, uniqueName('fk_pgequal_iso'), 4, { default_transaction_isolation: isolation });
    isolatedKysely = newKysely(isolated) as unknown as Kysely<never>;
  });
  afterAll(async () => {
    await isolatedKysely.destroy(); // ends `isolated`
  });

  describe.each(FLAVORS)('%s', (flavor) => {
    describe.each(Object.keys(HOW) as (keyof typeof HOW)[])('%s', (how) => {
      const fence = HOW[how];
      const resource = `equal:${isolation}:${flavor}:${how}`;
      const nothing = async (): Promise<void> => undefined;

      it('an equal token rewrites the row: a new row version, previous_token the token itself, updated_at moved', async () => {
        await fence(dbAt(flavor), resource, 5n, nothing);
        for (let again = 1; again <= 3; again += 1) {
          const before = await rowOf(resource);
          const admitted = await fence(dbAt(flavor), resource, 5n, nothing);
          if (how === 'PostgresFenceStore') expect(admitted.previous).toBe(5n);
          const after = await rowOf(resource);
          expect(after.xmin, `admission ${again} with the equal token: the row rewritten`).not.toBe(before.xmin);
          expect(after).toMatchObject({ token: 5n, previous: 5n });
          expect(after.updatedAt).toBeGreaterThan(before.updatedAt);
        }
        expect(await lockable(resource)).toBe(true);
      });

      it('a holder that waited behind an equal token\'s holder fails with 40001 (its snapshot predates that commit); the retry is admitted', async () => {
        const contended = `${resource}:contended`;
        await fence(dbAt(flavor), contended, 20n, nothing);
        await fence(dbAt(flavor), contended, 20n, nothing);
        let waited: Promise<unknown> | undefined;
        let ran = false;
        await fence(dbAt(flavor), contended, 20n, async (pid) => {
          waited = fence(dbAt(flavor), contended, 20n, async () => { ran = true; }).then(() => 'admitted', (error: unknown) => error);
          await waitForFenceWaiter(admin, pid);
        });
        expect(await waited).toMatchObject({ code: '40001' });
        expect(ran).toBe(false);
        await fence(dbAt(flavor), contended, 20n, async () => { ran = true; });
        expect(ran).toBe(true);
        expect((await rowOf(contended)).token).toBe(20n);
      });
    });
  });
});
