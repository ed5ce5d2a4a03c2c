// Tables bound to their lock (bindTable), for the row helpers with their own
// token column (fencedUpdate, fencedInsert, fencedUpsert, fencedDelete), on a
// pg.Pool and on Kysely: once bound, a sequencer of another lock, kind or
// source is refused with SEQUENCER_MISMATCH and changes nothing (no row
// written, no token raised, no tombstone), even with a larger token; a bare
// token is refused the same way; the guarding lock's larger token writes.
// Tables never bound keep accepting bare tokens and sequencers. bindTable
// leaves no window: a write that began unbound is waited for, a write that
// starts while it binds is checked against the new binding.
import diagnostics from 'node:diagnostics_channel';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { Kysely } from 'kysely';
import {
  CHANNELS, CURRENT_LOCK, FenceAlreadyBoundError, InvalidArgumentError, NoCurrentLockError, SequencerMismatchError, StaleTokenError, sequencer, withLock,
  type FenceBinding, type FenceRefusedMessage, type Fencing, type Sequencer,
} from '../../../src/index.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { bindTable, fenced, fencedDelete, fencedInsert, fencedUpdate, fencedUpsert, migrate, tableBindingOf, type Database } from '../../../adapters/postgres/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { DATABASE_URL, FLAVORS, createSchema, dropSchema, newKysely, newPool, uniqueName, waitForLockWaiters, type TestDatabase } from './helpers.js';

const SOURCE = { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-00000000a001' };
const guard = (name: string): FenceBinding => ({ kind: 'lock', lock: name, source: SOURCE });
const seq = (name: string, token: bigint, over: Partial<Sequencer> = {}): Sequencer => sequencer({ kind: 'lock', name, source: SOURCE, token, ...over });

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
const clients = new ClientPool();
afterEach(() => clients.closeAll());
afterAll(() => admin.end());

describe.each(FLAVORS)('bound tables with %s', (flavor) => {
  const schema = uniqueName(`fk_seqrows_${flavor}`);
  const application = uniqueName('fk_seqrows');
  let pool: pg.Pool;
  let kysely: Kysely<TestDatabase> | undefined;
  let db: Database;

  beforeAll(async () => {
    await createSchema(admin, schema);
    pool = newPool(schema, application, 6);
    if (flavor === 'kysely') kysely = newKysely(pool);
    db = kysely ?? pool;
    await migrate(db);
  });
  afterAll(async () => {
    if (kysely !== undefined) await kysely.destroy();
    else await pool.end();
    await dropSchema(admin, schema);
  });

  /** A fresh table with rows 1 and 2 at token 10 and a tombstone for row 3 at token 10. */
  async function table(): Promise<string> {
    const name = uniqueName('docs');
    await pool.query(`CREATE TABLE ${name} (id int PRIMARY KEY, body text, fencing_token bigint)`);
    await pool.query(`INSERT INTO ${name} VALUES (1, 'one', 10), (2, 'two', 10), (3, 'three', 10)`);
    await fencedDelete(db, { table: name, where: { id: 3 }, token: 10n });
    return name;
  }
  /** Every row, and the table's tombstones: what "changes nothing" compares. */
  async function state(name: string): Promise<unknown> {
    const rows = await pool.query(`SELECT id, body, fencing_token::text AS token FROM ${name} ORDER BY id`);
    const tombstones = await pool.query(`SELECT row_key, token::text AS token FROM fencekeeper_tombstones WHERE relation = format('%I.%I', $1::text, $2::text) ORDER BY row_key::text`, [schema, name]);
    return { rows: rows.rows, tombstones: tombstones.rows };
  }

  /** Each row helper, writing with `token`: what it answers. */
  const writes = {
    fencedUpdate: (name: string, token: Fencing) => fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: `by ${String(token)}` }, token }),
    fencedInsert: (name: string, token: Fencing) => fencedInsert(db, { table: name, values: { id: 4, body: 'new' }, key: ['id'], token }),
    fencedUpsert: (name: string, token: Fencing) => fencedUpsert(db, { table: name, values: { id: 2, body: 'upserted' }, key: ['id'], token }),
    fencedDelete: (name: string, token: Fencing) => fencedDelete(db, { table: name, where: { id: 1 }, token }),
    // A row that does not exist: an unbound table or its own lock answers 0; any other lock is still refused.
    'fencedUpdate of no row': (name: string, token: Fencing) => fencedUpdate(db, { table: name, where: { id: 99 }, set: { body: 'x' }, token }),
    'fencedInsert over a tombstone': (name: string, token: Fencing) => fencedInsert(db, { table: name, values: { id: 3, body: 'again' }, key: ['id'], token }),
  } as const;
  const helpers = Object.entries(writes);

  it.each(helpers)('%s: an unbound table takes bare tokens and sequencers of any lock', async (_, write) => {
    const name = await table();
    await write(name, 20n);
    await write(name, seq('some/lock', 21n));
    await write(name, seq('another/lock', 22n, { kind: 'election', source: { kind: 'etcd', id: 'cluster1' } }));
    expect(await tableBindingOf(db, name)).toBeNull();
  });

  it('an unbound table: the row helpers write as before, with sequencers too', async () => {
    const name = await table();
    expect(await writes.fencedUpdate(name, seq('x', 20n))).toBe(1);
    expect(await writes.fencedUpsert(name, 21n)).toBe('updated');
    expect(await writes.fencedInsert(name, seq('y', 22n, { kind: 'election' }))).toBe(1);
    expect(await writes['fencedInsert over a tombstone'](name, seq('z', 23n))).toBe(1);
    expect(await writes.fencedDelete(name, 24n)).toBe(1);
    expect((await state(name) as { rows: unknown[] }).rows).toEqual([
      { id: 2, body: 'upserted', token: '21' }, { id: 3, body: 'again', token: '23' }, { id: 4, body: 'new', token: '22' },
    ]);
  });

  it.each(helpers)('%s: a bound table refuses another lock, kind or source and a bare token, and changes nothing; its own lock writes', async (what, write) => {
    const name = await table();
    const lock = uniqueLockName('rows');
    expect(await bindTable(db, name, guard(lock))).toEqual(guard(lock));
    const before = await state(name);
    const intruders: [string, bigint | Sequencer][] = [
      ['another lock', seq(`${lock}-other`, 100n)],
      ['another kind', seq(lock, 101n, { kind: 'election' })],
      ['another source id', seq(lock, 102n, { source: { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-00000000a002' } })],
      ['another source kind', seq(lock, 103n, { source: { kind: 'etcd', id: SOURCE.id } })],
      ['a bare token', 104n],
    ];
    const published: FenceRefusedMessage[] = [];
    const onRefused = (m: unknown): void => void published.push(m as FenceRefusedMessage);
    diagnostics.subscribe(CHANNELS.fenceRefused, onRefused);
    try {
      for (const [intruder, presented] of intruders) {
        const error = await write(name, presented).then(() => undefined, (e: unknown) => e);
        expect(error, intruder).toBeInstanceOf(SequencerMismatchError);
        expect((error as SequencerMismatchError).code).toBe('SEQUENCER_MISMATCH');
        expect((error as SequencerMismatchError).resource).toBe(name);
        expect((error as SequencerMismatchError).bound).toEqual(guard(lock));
        expect((error as SequencerMismatchError).presented === null, intruder).toBe(typeof presented === 'bigint');
      }
    } finally {
      diagnostics.unsubscribe(CHANNELS.fenceRefused, onRefused);
    }
    expect(published.filter((m) => m.resource === name).map((m) => [m.adapter, m.code, m.presented, m.presentedLock?.lock ?? null, m.bound?.lock])).toEqual(
      intruders.map(([, p]) => ['postgres', 'SEQUENCER_MISMATCH', typeof p === 'bigint' ? p : p.token, typeof p === 'bigint' ? null : p.name, lock]),
    );
    expect(await state(name)).toEqual(before);
    // The guarding lock's larger token: written as on an unbound table.
    await write(name, seq(lock, 11n));
    if (what !== 'fencedUpdate of no row') expect(await state(name)).not.toEqual(before);
    // Its own smaller token is stale (or nothing to do), never a mismatch.
    const stale = await write(name, seq(lock, 5n)).then((answer) => answer, (e: unknown) => e);
    expect(stale).not.toBeInstanceOf(SequencerMismatchError);
    if (what === 'fencedUpdate' || what === 'fencedUpsert' || what === 'fencedInsert' || what === 'fencedInsert over a tombstone') expect(stale).toBeInstanceOf(StaleTokenError);
  });

  it('through withLock and CURRENT_LOCK: a real ZooKeeper lock writes its bound table, another lock and a bare token do not', async () => {
    const zk = zookeeperSource(await clients.connect(testServers().zkStandalone));
    const lock = uniqueLockName('rows-real');
    const name = await table();
    const first = await zk.acquireLock(lock);
    await first.release();
    const { kind, name: lockName, source } = first.sequencer;
    await bindTable(db, name, { kind, lock: lockName, source });
    const token = await withLock(zk, lock, async (held) => {
      expect(await fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'held' }, token: CURRENT_LOCK })).toBe(1);
      return held.token;
    });
    await expect(withLock(zk, `${lock}-other`, () => fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'other' }, token: CURRENT_LOCK })))
      .rejects.toBeInstanceOf(SequencerMismatchError);
    const again = await zk.acquireLock(lock);
    await expect(fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'bare' }, token: again.token })).rejects.toBeInstanceOf(SequencerMismatchError);
    expect((await pool.query(`SELECT body, fencing_token::text AS token FROM ${name} WHERE id = 1`)).rows).toEqual([{ body: 'held', token: token.toString() }]);
    expect(await fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'again' }, token: again.sequencer })).toBe(1);
    await again.release();
    // Outside every withLock: refused before any SQL.
    await expect(fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'none' }, token: CURRENT_LOCK })).rejects.toBeInstanceOf(NoCurrentLockError);
  });

  it('binding is recorded once, under any spelling of the table: the same again is a no-op, another is refused; a rename keeps it', async () => {
    const name = await table();
    const lock = uniqueLockName('once');
    await bindTable(db, name, guard(lock));
    await bindTable(db, `${schema}.${name}`, guard(lock));
    const error = await bindTable(db, name, guard(`${lock}-other`)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FenceAlreadyBoundError);
    expect((error as FenceAlreadyBoundError).code).toBe('FENCE_ALREADY_BOUND');
    expect(await tableBindingOf(db, `${schema}.${name}`)).toEqual(guard(lock));
    // Written through the qualified name: still checked.
    await expect(fencedUpdate(db, { table: `${schema}.${name}`, where: { id: 1 }, set: { body: 'x' }, token: 50n })).rejects.toBeInstanceOf(SequencerMismatchError);
    const renamed = `${name}_renamed`;
    await pool.query(`ALTER TABLE ${name} RENAME TO ${renamed}`);
    expect(await tableBindingOf(db, renamed)).toEqual(guard(lock));
    await expect(fencedUpdate(db, { table: renamed, where: { id: 1 }, set: { body: 'x' }, token: 50n })).rejects.toBeInstanceOf(SequencerMismatchError);
    expect(await fencedUpdate(db, { table: renamed, where: { id: 1 }, set: { body: 'x' }, token: seq(lock, 50n) })).toBe(1);
  });

  // The same lock name and kind at another source (another ZooKeeper
  // ensemble, an etcd cluster) is another lock: its tokens are not
  // comparable with the bound one's. Alone, and racing the first binding.
  it('binding again with the same lock name and kind but another source id, source kind or kind is refused and changes nothing', async () => {
    const name = await table();
    const lock = uniqueLockName('source');
    const others: [string, FenceBinding][] = [
      ['another source id', { kind: 'lock', lock, source: { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-00000000a002' } }],
      ['another source kind', { kind: 'lock', lock, source: { kind: 'etcd', id: SOURCE.id } }],
      ['another kind', { kind: 'election', lock, source: SOURCE }],
    ];
    await bindTable(db, name, guard(lock));
    for (const [what, other] of others) {
      const error = await bindTable(db, name, other).then(() => undefined, (e: unknown) => e);
      expect(error, what).toBeInstanceOf(FenceAlreadyBoundError);
      expect((error as FenceAlreadyBoundError).bound, what).toEqual(guard(lock));
    }
    expect(await tableBindingOf(db, name)).toEqual(guard(lock));
    expect(await bindTable(db, name, guard(lock))).toEqual(guard(lock));

    // Two first bindings at once, differing only in the source id: one is recorded, the other refused with it.
    const raced = await table();
    const [a, b] = await Promise.allSettled([bindTable(db, raced, guard(lock)), bindTable(db, raced, others[0]![1])]);
    const recorded = await tableBindingOf(db, raced);
    expect([guard(lock), others[0]![1]]).toContainEqual(recorded);
    const outcomes = [a, b].map((o) => (o.status === 'fulfilled' ? o.value : o.reason as unknown));
    expect(outcomes.filter((o) => o instanceof FenceAlreadyBoundError).map((e) => (e as FenceAlreadyBoundError).bound)).toEqual([recorded]);
    expect(outcomes.filter((o) => !(o instanceof FenceAlreadyBoundError))).toEqual([recorded]);
  });

  it('bad arguments are refused and bind nothing', async () => {
    const name = await table();
    for (const bad of [null, {}, { kind: 'mutex', lock: 'a', source: SOURCE }, { kind: 'lock', lock: '', source: SOURCE }, { kind: 'lock', lock: 'a', source: { kind: 'zookeeper', id: 'no spaces' } }]) {
      await expect(bindTable(db, name, bad as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    for (const badTable of ['', 'a.b.c', 'docs"; DROP TABLE x; --', 7]) {
      await expect(bindTable(db, badTable as never, guard('a'))).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await tableBindingOf(db, name)).toBeNull();
    await expect(fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'x' }, token: { token: 5n } as never })).rejects.toThrow();
    expect(await fencedUpdate(db, { table: name, where: { id: 1 }, set: { body: 'x' }, token: 20n })).toBe(1);
  });

  // Kysely's own update builder: only the Kysely flavor has one.
  if (flavor === 'kysely') it('fenced() on a Kysely update carries the binding check: another lock or a bare token updates nothing, the guarding lock updates', async () => {
    const k = kysely as unknown as Kysely<Record<string, { id: number; body: string | null; fencing_token: string | null }>>;
    const name = await table();
    const lock = uniqueLockName('kysely');
    const update = (body: string, token: Fencing, target = name) =>
      fenced(k.updateTable(target).set({ body }).where('id', '=', 1), token).executeTakeFirstOrThrow().then((r) => r.numUpdatedRows);
    expect(await update('unbound', 20n)).toBe(1n);
    await bindTable(db, name, guard(lock));
    expect(await update('bare', 30n)).toBe(0n);
    expect(await update('other lock', seq(`${lock}-other`, 31n))).toBe(0n);
    expect(await update('other kind', seq(lock, 32n, { kind: 'election' }))).toBe(0n);
    expect(await update('qualified, bare', 33n, `${schema}.${name}`)).toBe(0n);
    expect(await update('aliased, bare', 34n, `${name} as d`)).toBe(0n);
    expect((await pool.query(`SELECT body, fencing_token::text AS token FROM ${name} WHERE id = 1`)).rows).toEqual([{ body: 'unbound', token: '20' }]);
    expect(await update('guard', seq(lock, 21n))).toBe(1n);
    expect(await update('guard, qualified and aliased', seq(lock, 22n), `${schema}.${name} as d`)).toBe(1n);
    expect((await pool.query(`SELECT body, fencing_token::text AS token FROM ${name} WHERE id = 1`)).rows).toEqual([{ body: 'guard, qualified and aliased', token: '22' }]);
  });

  it('writers racing bindTable: every write that starts after it returns is refused, every write that passed is in the table', async () => {
    const name = await table();
    const lock = uniqueLockName('stress');
    let bound = false;
    let next = 20n;
    const passed: bigint[] = [];
    const refusedAfter: boolean[] = [];
    let refusedBefore = 0;
    const writer = async (): Promise<void> => {
      for (let i = 0; i < 400 && refusedAfter.length < 20; i += 1) {
        const startedAfterBind = bound;
        const token = next;
        next += 1n;
        // Rows 1 and 2, each token larger than every earlier one: after the binding, only the binding refuses.
        const outcome = await fencedUpdate(db, { table: name, where: { id: Number(token % 2n) + 1 }, set: { body: `w${token}` }, token }).then(() => 'written', (e: unknown) => e);
        if (outcome === 'written') {
          expect(startedAfterBind, `a bare write that started after bindTable returned passed (token ${token})`).toBe(false);
          passed.push(token);
        } else if (startedAfterBind) {
          expect(outcome).toBeInstanceOf(SequencerMismatchError);
          refusedAfter.push(true);
        } else {
          // Before the binding: a writer overtaken on its row by a larger token is stale; in flight while it committed, refused.
          expect(outcome instanceof StaleTokenError || outcome instanceof SequencerMismatchError, String(outcome)).toBe(true);
          refusedBefore += 1;
        }
      }
    };
    const writers = [writer(), writer(), writer()];
    // Let the writers get going, then bind while they write.
    while (passed.length < 30) await new Promise((resolve) => setTimeout(resolve, 5));
    await bindTable(db, name, guard(lock));
    bound = true;
    await Promise.all(writers);
    // The race happened: writes passed before the binding, and writes after it were refused.
    expect(passed.length).toBeGreaterThanOrEqual(30);
    expect(refusedAfter.length).toBeGreaterThanOrEqual(20);
    // Nothing passed unrecorded: each row holds the largest token that passed for it.
    const rows = (await state(name) as { rows: { id: number; token: string }[] }).rows;
    for (const row of rows) {
      const mine = passed.filter((t) => Number(t % 2n) + 1 === row.id);
      expect(BigInt(row.token)).toBe(mine.reduce((a, b) => (b > a ? b : a), 10n));
    }
  });

  it.each(['update', 'upsert', 'insert', 'delete'] as const)('REPEATABLE READ, a snapshot taken before bindTable: a bare %s fails with 40001 and writes nothing; the retry is refused', async (op) => {
    const name = await table();
    const lock = uniqueLockName('rr');
    const before = await state(name);
    const write = (trx: pg.PoolClient) => ({
      update: () => fencedUpdate(trx, { table: name, where: { id: 1 }, set: { body: 'rr' }, token: 20n }),
      upsert: () => fencedUpsert(trx, { table: name, values: { id: 2, body: 'rr' }, key: ['id'], token: 20n }),
      insert: () => fencedInsert(trx, { table: name, values: { id: 5, body: 'rr' }, key: ['id'], token: 20n }),
      delete: () => fencedDelete(trx, { table: name, where: { id: 1 }, token: 20n }),
    })[op]();
    const writer = await pool.connect();
    try {
      await writer.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await writer.query('SELECT 1'); // the transaction's snapshot, before the binding
      await bindTable(db, name, guard(lock));
      const error = await write(writer).then(() => undefined, (e: unknown) => e);
      expect((error as { code?: unknown } | undefined)?.code).toBe('40001');
      await writer.query('ROLLBACK');
      // The retry's snapshot sees the binding: refused by it.
      await writer.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await expect(write(writer)).rejects.toBeInstanceOf(SequencerMismatchError);
      await writer.query('ROLLBACK');
      // With the guarding lock's sequencer the same transaction writes (the probe finds the binding visible).
      await writer.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      expect(await fencedUpdate(writer, { table: name, where: { id: 2 }, set: { body: 'guard' }, token: seq(lock, 20n) })).toBe(1);
      await writer.query('ROLLBACK');
    } finally {
      writer.release();
    }
    expect(await state(name)).toEqual(before);
  });

  if (flavor === 'kysely') it('REPEATABLE READ, a snapshot taken before bindTable: a bare fenced() update fails with 40001 and writes nothing', async () => {
    const k = kysely as unknown as Kysely<Record<string, { id: number; body: string | null; fencing_token: string | null }>>;
    const name = await table();
    const lock = uniqueLockName('rr-kysely');
    const before = await state(name);
    const error = await k.transaction().setIsolationLevel('repeatable read').execute(async (trx) => {
      await trx.selectFrom(name).select('id').execute(); // the snapshot
      await bindTable(db, name, guard(lock));
      await fenced(trx.updateTable(name).set({ body: 'rr' }).where('id', '=', 1), 20n).execute();
    }).then(() => undefined, (e: unknown) => e);
    expect((error as { code?: unknown } | undefined)?.code).toBe('40001');
    expect(await state(name)).toEqual(before);
  });

  it('bindTable waits for a write that began unbound, and a write that starts meanwhile is checked against the new binding', async () => {
    const name = await table();
    const lock = uniqueLockName('race');
    // A transaction that wrote with a bare token while the table was unbound, still open.
    const writer = await pool.connect();
    let binding: Promise<unknown> | undefined;
    let late: Promise<unknown> | undefined;
    try {
      await writer.query('BEGIN');
      expect(await fencedUpdate(writer, { table: name, where: { id: 1 }, set: { body: 'unbound' }, token: 20n })).toBe(1);
      binding = bindTable(db, name, guard(lock));
      await waitForLockWaiters(admin, application, 1);
      // A bare write that starts now queues behind bindTable's lock.
      late = fencedUpdate(db, { table: name, where: { id: 2 }, set: { body: 'late' }, token: 30n }).then(() => 'written', (e: unknown) => e);
      await waitForLockWaiters(admin, application, 2);
      let bound = false;
      void binding.then(() => { bound = true; }, () => undefined);
      expect(bound).toBe(false);
      await writer.query('COMMIT');
    } finally {
      writer.release();
    }
    await binding;
    // The late write waited for the binding and was refused by it: no window between them.
    expect(await late).toBeInstanceOf(SequencerMismatchError);
    expect((await state(name) as { rows: unknown[] }).rows).toEqual([
      { id: 1, body: 'unbound', token: '20' }, { id: 2, body: 'two', token: '10' },
    ]);
  });
});
