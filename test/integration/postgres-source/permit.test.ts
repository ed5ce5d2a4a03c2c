// postgresSource's N-permit semaphore against the real PostgreSQL: never
// more than N held (8 clients x 25 grants), each holder on its own slot,
// per slot the tokens strictly increasing, FIFO, one NOTIFY per release
// (no herd), a holder SIGSTOPped past its lease replaced on its slot and
// refused by withLease and by the slot's fence, another `permits` refused,
// and nothing left behind by aborts, timeouts and tries.
import { beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockTimeoutError, PermitsMismatchError } from '../../../src/index.js';
import { withFence, type PostgresPermit, type PostgresSource } from '../../../adapters/postgres/index.js';
import { sourceSchema, uniqueName } from './helpers.js';
import { kindsHolders } from './kinds-helpers.js';
import { until, within } from '../../helpers/wait.js';

const db = sourceSchema('pgsrc_permit');
const holder = kindsHolders();
const TABLE = 'permit_writes';
const LEASE_MS = 2000;
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  await db.admin.query(`CREATE TABLE ${TABLE} (what text NOT NULL)`);
});

/** The semaphore's entries in queue order: slot (null while waiting) and permits. */
async function queue(name: string): Promise<{ slot: number | null; permits: number }[]> {
  const { rows } = await db.admin.query<{ slot: number | null; permits: number }>(
    `SELECT slot, permits FROM fencekeeper_lock_entries WHERE kind = 'permit' AND name = $1 ORDER BY id`,
    [name],
  );
  return rows;
}

const wakeups = (sources: PostgresSource[]): number => sources.reduce((n, s) => n + s.stats().wakeups, 0);
const claims = (sources: PostgresSource[]): number => sources.reduce((n, s) => n + s.stats().claims, 0);

describe('postgresSource: permits', () => {
  it('8 clients x 25 grants of 3 permits: never more than 3 held, each on its own slot, per slot tokens strictly increasing; nothing left after', async () => {
    const name = uniqueName('pgsem/mix');
    const sources = Array.from({ length: 8 }, () => db.source({}, 3));
    const inSlot = new Map<number, number>();
    let held = 0;
    let maxHeld = 0;
    const violations: string[] = [];
    const lastBySlot = new Map<number, bigint>();
    await Promise.all(
      sources.map(async (source) => {
        for (let i = 0; i < 25; i++) {
          const permit = await source.acquirePermit(name, { permits: 3 });
          held++;
          maxHeld = Math.max(maxHeld, held);
          if (held > 3) violations.push(`${held} held`);
          if (permit.slot < 0 || permit.slot >= 3) violations.push(`slot ${permit.slot}`);
          if (inSlot.has(permit.slot)) violations.push(`slot ${permit.slot} held twice`);
          inSlot.set(permit.slot, i);
          const last = lastBySlot.get(permit.slot) ?? 0n;
          if (permit.token <= last) violations.push(`slot ${permit.slot}: token ${permit.token} after ${last}`);
          lastBySlot.set(permit.slot, permit.token);
          if (permit.sequencer.kind !== 'permit' || permit.sequencer.name !== `${name}#${permit.slot}`) violations.push(`sequencer ${permit.sequencer.kind} ${permit.sequencer.name}`);
          if (permit.permits !== 3 || !permit.held) violations.push('permits or held');
          await pause(3);
          inSlot.delete(permit.slot);
          held--;
          await permit.release();
        }
      }),
    );
    expect(violations).toEqual([]);
    expect(maxHeld).toBe(3);
    expect(await queue(name)).toEqual([]);
  });

  it('FIFO: waiters get slots in arrival order, each the slot just freed with a larger token; a try never overtakes a waiter', async () => {
    const name = uniqueName('pgsem/fifo');
    const a = db.source();
    const p0 = await a.acquirePermit(name, { permits: 2 });
    const p1 = await a.acquirePermit(name, { permits: 2 });
    expect([p0.slot, p1.slot].sort()).toEqual([0, 1]);
    const order: number[] = [];
    const waits: Promise<PostgresPermit>[] = [];
    for (let i = 0; i < 3; i++) {
      const source = db.source({}, 2);
      waits.push(source.acquirePermit(name, { permits: 2 }).then((p) => (order.push(i), p)));
      await until(async () => (await queue(name)).length === 3 + i, `waiter ${i} queued`);
    }
    expect(await a.tryAcquirePermit(name, { permits: 2 })).toBeNull();
    await p1.release();
    const w0 = await within(waits[0]!, 10_000, 'waiter 0');
    expect(w0.slot).toBe(p1.slot);
    expect(w0.token > p1.token).toBe(true);
    await pause(100);
    expect(order).toEqual([0]);
    // A slot is free for a moment only between a release and its hand-over, in one transaction: a try still finds a waiter.
    expect(await a.tryAcquirePermit(name, { permits: 2 })).toBeNull();
    await p0.release();
    const w1 = await within(waits[1]!, 10_000, 'waiter 1');
    expect(w1.slot).toBe(p0.slot);
    expect(w1.token > p0.token).toBe(true);
    await w0.release();
    const w2 = await within(waits[2]!, 10_000, 'waiter 2');
    expect(w2.slot).toBe(w0.slot);
    expect(order).toEqual([0, 1, 2]);
    await Promise.all([w1.release(), w2.release()]);
    expect(await queue(name)).toEqual([]);
  });

  it('with 20 waiters on 2 permits, every release wakes exactly one waiter (one NOTIFY), and nobody queries while the holders live', async () => {
    const name = uniqueName('pgsem/herd');
    const first = db.source();
    const holders = [await first.acquirePermit(name, { permits: 2 }), await first.acquirePermit(name, { permits: 2 })];
    const sources = Array.from({ length: 4 }, () => db.source({}, 3));
    const granted: PostgresPermit[] = [];
    const waits = sources.flatMap((source) =>
      Array.from({ length: 5 }, () =>
        source.acquirePermit(name, { permits: 2 }).then(async (permit) => {
          granted.push(permit);
          await pause(2);
          await permit.release();
        }),
      ),
    );
    await until(async () => (await queue(name)).length === 22, '20 waiters queued');
    await pause(200);
    expect(wakeups(sources)).toBe(0);
    for (const permit of holders) await permit.release();
    await Promise.all(waits);
    expect(granted).toHaveLength(20);
    expect(wakeups(sources)).toBe(20);
    expect(claims(sources)).toBe(0);
    expect(await queue(name)).toEqual([]);
  });

  it('a holder SIGSTOPped past its lease: its slot goes to the next waiter with a larger token; on resume held is false, its withLease and its write to the slot\'s fence are refused', async () => {
    const name = uniqueName('pgsem/paused');
    const fence = uniqueName('pgsem/fence');
    const child = await holder({ schema: db.schema, kind: 'permit', lock: name, permits: 2, leaseMs: LEASE_MS, table: TABLE, fence });
    const source = db.source({ leaseMs: LEASE_MS }, 3);
    const other = await source.acquirePermit(name, { permits: 2 });
    const waiting = source.acquirePermit(name, { permits: 2 });
    await until(async () => (await queue(name)).length === 3, 'the waiter queued');
    child.child.kill('SIGSTOP');
    const successor = await within(waiting, 30_000, 'the successor');
    expect(successor.slot).toBe(child.slot);
    expect(successor.token > child.token).toBe(true);
    const pool = db.pool(2);
    // Each slot its own fence: the other slot's holder never touched this one.
    await withFence(pool, fence, successor, async () => undefined);
    child.child.kill('SIGCONT');
    child.child.stdin!.write('check\n');
    expect(await child.next()).toEqual({ held: false, withLease: 'LOCK_LOST', withFence: 'STALE_TOKEN' });
    const { rows } = await db.admin.query(`SELECT 1 FROM ${TABLE} WHERE what = 'check'`);
    expect(rows).toEqual([]);
    await Promise.all([successor.release(), other.release()]);
  });

  it('timeouts, aborts and tries leave no row; another permits while in use is PermitsMismatchError, nothing left; bad input refused before any I/O', async () => {
    const name = uniqueName('pgsem/leave');
    const a = db.source();
    const b = db.source({}, 2);
    const p = await a.acquirePermit(name, { permits: 1 });
    await expect(b.acquirePermit(name, { permits: 1, timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    const ac = new AbortController();
    const aborted = b.acquirePermit(name, { permits: 1, signal: ac.signal });
    await until(async () => (await queue(name)).length === 2, 'the waiter queued');
    ac.abort(new Error('given up'));
    await expect(aborted).rejects.toThrow('given up');
    expect(await b.tryAcquirePermit(name, { permits: 1 })).toBeNull();
    const mismatch = await b.acquirePermit(name, { permits: 2 }).catch((e: unknown) => e);
    expect(mismatch).toBeInstanceOf(PermitsMismatchError);
    expect(mismatch).toMatchObject({ code: 'PERMITS_MISMATCH', permits: 2, inUse: 1 });
    await expect(b.tryAcquirePermit(name, { permits: 3 })).rejects.toBeInstanceOf(PermitsMismatchError);
    expect(await queue(name)).toEqual([{ slot: 0, permits: 1 }]);
    const status = await a.permitStatus(name);
    expect(status.holders.map((e) => [e.slot, e.token])).toEqual([[0, p.token]]);
    expect(status.waiters).toEqual([]);
    await p.release();
    expect(await queue(name)).toEqual([]);
    // Free again: another size is fine now.
    const q = await b.acquirePermit(name, { permits: 2 });
    expect(q.permits).toBe(2);
    await q.release();
    for (const permits of [0, 1025, 1.5, '2', undefined]) {
      await expect(a.acquirePermit(name, { permits } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(a.tryAcquirePermit(name, { permits } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(a.acquirePermit(name, undefined as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(a.acquirePermit('a\0b', { permits: 1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(a.tryAcquirePermit(name, { permits: 1, timeoutMs: 5 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
