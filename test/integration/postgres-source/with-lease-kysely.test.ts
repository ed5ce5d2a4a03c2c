// withLease over a Kysely instance against the real PostgreSQL: the work
// runs in one Kysely transaction that commits only while the grant is
// live. A grant whose session the database has ended (its lease passed
// there while the holder's own clock had not yet stepped down) is refused
// before the work; a lease that ends during the work is refused by the
// check at the transaction's end, and nothing of the work commits.
import { Kysely, PostgresDialect, sql } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError } from '../../../src/index.js';
import { withLease } from '../../../adapters/postgres/index.js';
import { sourceSchema, uniqueName } from './helpers.js';

const db = sourceSchema('pgsrc_lease_ky');
const TABLE = 'lease_writes_ky';

interface Tables {
  lease_writes_ky: { what: string };
}

beforeAll(async () => {
  await db.admin.query(`CREATE TABLE ${TABLE} (what text NOT NULL)`);
});

const writes = async (): Promise<string[]> => (await db.admin.query<{ what: string }>(`SELECT what FROM ${TABLE} ORDER BY what`)).rows.map((r) => r.what);
/** End a session in the database, as its lease passing there would (the holder's own clock has not stepped down yet). */
const endInDatabase = (session: bigint): Promise<unknown> =>
  db.admin.query(`UPDATE fencekeeper_lock_sessions SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE id = $1`, [session.toString()]);

describe('withLease over Kysely', () => {
  it('commits the work in a Kysely transaction while the grant is live; a released lock is refused before any statement', async () => {
    const kysely = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: db.pool(2) }) });
    const source = db.source({}, 3);
    const lock = await source.acquireLock(uniqueName('pgsource/lease-ky'));
    const answer = await withLease(kysely, lock, async (trx) => {
      await trx.insertInto('lease_writes_ky').values({ what: 'ky-basic' }).execute();
      // The work runs inside the lease's transaction, bounded by what is left of the lease.
      const { rows } = await sql<{ timeout: string }>`SELECT current_setting('idle_in_transaction_session_timeout') AS timeout`.execute(trx);
      return rows[0]!.timeout;
    });
    expect(answer).not.toBe('0');
    expect(await writes()).toContain('ky-basic');
    await expect(withLease(kysely, lock, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await lock.release();
    let ran = false;
    await expect(withLease(kysely, lock, async () => void (ran = true))).rejects.toBeInstanceOf(LockLostError);
    expect(ran).toBe(false);
    await expect(withLease({ transaction: 1 } as never, lock, async () => undefined)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('a grant the database has ended is refused before the work; a lease that ends during the work commits nothing', async () => {
    const kysely = new Kysely<Tables>({ dialect: new PostgresDialect({ pool: db.pool(2) }) });
    const before = db.source({ leaseMs: 60_000 }, 3);
    const ended = await before.acquireLock(uniqueName('pgsource/lease-ky-ended'));
    await endInDatabase(ended.session);
    expect(ended.held).toBe(true);
    let ran = false;
    await expect(withLease(kysely, ended, async () => void (ran = true))).rejects.toBeInstanceOf(LockLostError);
    expect(ran).toBe(false);
    // The database's word is final: the holder steps down too.
    expect(ended.held).toBe(false);

    const during = db.source({ leaseMs: 60_000 }, 3);
    const lock = await during.acquireLock(uniqueName('pgsource/lease-ky-during'));
    const error = await withLease(kysely, lock, async (trx) => {
      await trx.insertInto('lease_writes_ky').values({ what: 'ky-during' }).execute();
      await endInDatabase(lock.session);
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect(await writes()).not.toContain('ky-during');
  });
});
