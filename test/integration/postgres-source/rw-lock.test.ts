// postgresSource's read-write lock against the real PostgreSQL: readers
// overlap and writers are alone (8 clients x 25 grants), the token rule (a
// writer's token is larger than every grant before it), arrival order with
// no writer starvation, each waiter woken only by the grant it waits for
// (NOTIFYs counted), a holder SIGSTOPped past its lease refused by withLease
// and by a fence, and nothing left behind by aborts, timeouts and tries.
import { beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockTimeoutError, type FencingToken } from '../../../src/index.js';
import { withFence, type PostgresLock, type PostgresSource } from '../../../adapters/postgres/index.js';
import { sourceSchema, uniqueName } from './helpers.js';
import { kindsHolders } from './kinds-helpers.js';
import { until, within } from '../../helpers/wait.js';

const db = sourceSchema('pgsrc_rw');
const holder = kindsHolders();
const TABLE = 'rw_writes';
const LEASE_MS = 2000;
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  await db.admin.query(`CREATE TABLE ${TABLE} (what text NOT NULL)`);
});

/** The name's read-write entries in queue order: mode, and whether granted. */
async function queue(name: string): Promise<{ mode: string; granted: boolean }[]> {
  const { rows } = await db.admin.query<{ mode: string; granted: boolean }>(
    `SELECT mode, token IS NOT NULL AS granted FROM fencekeeper_lock_entries WHERE kind = 'rw' AND name = $1 ORDER BY id`,
    [name],
  );
  return rows;
}

const wakeups = (sources: PostgresSource[]): number => sources.reduce((n, s) => n + s.stats().wakeups, 0);
const claims = (sources: PostgresSource[]): number => sources.reduce((n, s) => n + s.stats().claims, 0);

describe('postgresSource: read-write lock', () => {
  it('8 clients x 25 mixed grants: readers overlap, a writer holds alone, a writer\'s token is larger than every grant before it; the queue empty after', async () => {
    const name = uniqueName('pgrw/mix');
    const sources = Array.from({ length: 8 }, () => db.source({}, 3));
    let readers = 0;
    let writers = 0;
    let maxReaders = 0;
    const violations: string[] = [];
    const granted: { write: boolean; token: FencingToken }[] = [];
    let maxReleasedWrite = 0n;
    await Promise.all(
      sources.map(async (source, client) => {
        for (let i = 0; i < 25; i++) {
          const write = (client + i) % 4 === 0;
          const lock = write ? await source.acquireWriteLock(name) : await source.acquireReadLock(name);
          if (write) {
            writers++;
            if (writers > 1 || readers > 0) violations.push(`writer with ${writers - 1} writers and ${readers} readers`);
            for (const g of granted) if (g.token >= lock.token) violations.push(`writer ${lock.token} after ${g.write ? 'writer' : 'reader'} ${g.token}`);
          } else {
            readers++;
            maxReaders = Math.max(maxReaders, readers);
            if (writers > 0) violations.push('reader with a writer');
            for (const g of granted) if (g.write && g.token >= lock.token) violations.push(`reader ${lock.token} after writer ${g.token}`);
          }
          if (lock.token <= maxReleasedWrite) violations.push(`${write ? 'writer' : 'reader'} ${lock.token} after a released writer ${maxReleasedWrite}`);
          if (!lock.held) violations.push('granted but not held');
          if (lock.sequencer.kind !== (write ? 'write' : 'read')) violations.push(`sequencer kind ${lock.sequencer.kind}`);
          granted.push({ write, token: lock.token });
          await pause(write ? 1 : 4);
          if (write) writers--;
          else readers--;
          if (write && lock.token > maxReleasedWrite) maxReleasedWrite = lock.token;
          await lock.release();
        }
      }),
    );
    expect(violations).toEqual([]);
    expect(granted).toHaveLength(200);
    // Readers did share (8 clients, 3 of 4 grants reads).
    expect(maxReaders).toBeGreaterThan(1);
    expect(await queue(name)).toEqual([]);
  });

  it('arrival order, no writer starvation: a waiting writer holds back a later reader; each release wakes only what it lets in', async () => {
    const name = uniqueName('pgrw/order');
    const [a, b, c, d] = [db.source(), db.source({}, 2), db.source({}, 2), db.source({}, 2)] as const;
    const r1 = await a.acquireReadLock(name);
    const order: string[] = [];
    const w = b.acquireWriteLock(name).then((lock) => (order.push('w'), lock));
    await until(async () => (await queue(name)).length === 2, 'the writer queued');
    // A reader arriving after the waiting writer waits (a try finds it taken), though only a reader holds.
    expect(await c.tryAcquireReadLock(name)).toBeNull();
    const r2 = c.acquireReadLock(name).then((lock) => (order.push('r2'), lock));
    const w2 = d.acquireWriteLock(name).then((lock) => (order.push('w2'), lock));
    await until(async () => (await queue(name)).length === 4, 'reader 2 and writer 2 queued');
    await pause(100);
    expect(order).toEqual([]);
    await r1.release();
    const writer = await within(w, 10_000, 'the writer');
    expect(writer.token > r1.token).toBe(true);
    await pause(100);
    expect(order).toEqual(['w']);
    await writer.release();
    const reader2 = await within(r2, 10_000, 'reader 2');
    expect(reader2.token > writer.token).toBe(true);
    await pause(100);
    expect(order).toEqual(['w', 'r2']);
    await reader2.release();
    const writer2 = await within(w2, 10_000, 'writer 2');
    expect(order).toEqual(['w', 'r2', 'w2']);
    await writer2.release();
    // One NOTIFY per grant handed on, each to the one waiter granted.
    expect(wakeups([a, b, c, d])).toBe(3);
    expect(claims([a, b, c, d])).toBe(0);
    expect(await queue(name)).toEqual([]);
  });

  it('a writer\'s release wakes exactly the readers it lets in, not the writer behind them; the last reader\'s release wakes that writer alone', async () => {
    const name = uniqueName('pgrw/herd');
    const first = db.source();
    const writer = await first.acquireWriteLock(name);
    const sources = Array.from({ length: 4 }, () => db.source({}, 3));
    const readers: Promise<PostgresLock>[] = [];
    for (const source of sources) for (let i = 0; i < 5; i++) readers.push(source.acquireReadLock(name));
    await until(async () => (await queue(name)).length === 21, '20 readers queued');
    const late = db.source({}, 2);
    const lateWriter = late.acquireWriteLock(name);
    await until(async () => (await queue(name)).length === 22, 'the late writer queued');
    const lateReader = sources[0]!.acquireReadLock(name);
    await until(async () => (await queue(name)).length === 23, 'the late reader queued');
    await writer.release();
    const held = await Promise.all(readers);
    expect(wakeups(sources)).toBe(20);
    expect(late.stats().wakeups).toBe(0);
    expect((await queue(name)).map((e) => `${e.mode}:${e.granted}`)).toEqual([...Array(20).fill('read:true'), 'write:false', 'read:false']);
    for (const lock of held.slice(0, 19)) await lock.release();
    await pause(100);
    expect(late.stats().wakeups).toBe(0);
    await held[19]!.release();
    const w = await within(lateWriter, 10_000, 'the late writer');
    expect(late.stats().wakeups).toBe(1);
    for (const lock of held) expect(w.token > lock.token).toBe(true);
    await w.release();
    await (await lateReader).release();
    expect(claims([first, late, ...sources])).toBe(0);
    expect(await queue(name)).toEqual([]);
  });

  for (const kind of ['read', 'write'] as const) {
    it(`a ${kind} holder SIGSTOPped past its lease: the next writer is granted with a larger token; on resume held is false, its withLease and its fenced write are refused`, async () => {
      const name = uniqueName(`pgrw/paused-${kind}`);
      const fence = uniqueName(`pgrw/fence-${kind}`);
      const child = await holder({ schema: db.schema, kind, lock: name, leaseMs: LEASE_MS, table: TABLE, fence });
      const source = db.source({ leaseMs: LEASE_MS }, 3);
      const waiting = source.acquireWriteLock(name);
      await until(async () => (await queue(name)).length === 2, 'the writer queued');
      child.child.kill('SIGSTOP');
      const successor = await within(waiting, 30_000, 'the successor');
      expect(successor.token > child.token).toBe(true);
      const pool = db.pool(2);
      await withFence(pool, fence, successor, async () => undefined);
      child.child.kill('SIGCONT');
      child.child.stdin!.write('check\n');
      expect(await child.next()).toEqual({ held: false, withLease: 'LOCK_LOST', withFence: 'STALE_TOKEN' });
      const { rows } = await db.admin.query(`SELECT 1 FROM ${TABLE} WHERE what = 'check'`);
      expect(rows).toEqual([]);
      await successor.release();
    });
  }

  it('timeouts, aborts and tries leave no row behind', async () => {
    const name = uniqueName('pgrw/leave');
    const a = db.source();
    const b = db.source({}, 2);
    const writer = await a.acquireWriteLock(name);
    await expect(b.acquireReadLock(name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await expect(b.acquireWriteLock(name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    const ac = new AbortController();
    const aborted = b.acquireReadLock(name, { signal: ac.signal });
    await until(async () => (await queue(name)).length === 2, 'the reader queued');
    ac.abort(new Error('given up'));
    await expect(aborted).rejects.toThrow('given up');
    expect(await b.tryAcquireReadLock(name)).toBeNull();
    expect(await b.tryAcquireWriteLock(name)).toBeNull();
    expect(await queue(name)).toEqual([{ mode: 'write', granted: true }]);
    await writer.release();
    const reader = await a.acquireReadLock(name);
    // A waiting writer that gives up while behind a reader lets the readers behind it in.
    const giveUp = new AbortController();
    const blocked = b.acquireWriteLock(name, { signal: giveUp.signal });
    await until(async () => (await queue(name)).length === 2, 'the writer queued');
    const behind = b.acquireReadLock(name);
    await until(async () => (await queue(name)).length === 3, 'a reader behind the writer');
    giveUp.abort(new Error('writer gave up'));
    await expect(blocked).rejects.toThrow('writer gave up');
    const second = await within(behind, 10_000, 'the reader behind the writer');
    expect(await b.tryAcquireWriteLock(name)).toBeNull();
    await Promise.all([reader.release(), second.release()]);
    expect(await queue(name)).toEqual([]);
    // Read, write and plain locks of one name are apart.
    const plain = await a.acquireLock(name);
    const w = await b.tryAcquireWriteLock(name);
    expect(w).not.toBeNull();
    await Promise.all([plain.release(), w!.release()]);
  });

  it('rwLockStatus: the holders and the waiters with their modes; bad names refused before any I/O', async () => {
    const name = uniqueName('pgrw/status');
    const a = db.source();
    const r = await a.acquireReadLock(name, { owner: 'reader-1' });
    const w = a.acquireWriteLock(name, { owner: 'writer-1' });
    await until(async () => (await queue(name)).length === 2, 'the writer queued');
    const status = await a.rwLockStatus(name);
    expect(status.holders.map((e) => [e.mode, e.owner, e.token])).toEqual([['read', 'reader-1', r.token]]);
    expect(status.waiters.map((e) => [e.mode, e.owner, e.waiting])).toEqual([['write', 'writer-1', true]]);
    await r.release();
    await (await w).release();
    for (const bad of ['', 'a\0b', 7]) {
      await expect(a.acquireReadLock(bad as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(a.tryAcquireWriteLock(bad as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(a.rwLockStatus(bad as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(a.acquireWriteLock('x', { timeoutMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
