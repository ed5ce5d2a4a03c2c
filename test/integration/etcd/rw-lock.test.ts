// The etcd read-write lock against the single etcd node: readers overlap and
// writers hold alone under contention (8 clients x 25 mixed grants), a
// writer's token above every earlier grant, arrival order with no writer
// starvation, one wake-up per release, nothing left behind on timeout, abort
// or a busy try, and a deleted key ending the holding as a plain lock's.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { acquireLock, acquireReadLock, acquireWriteLock, etcdSource, rwLockStatus, tryAcquireReadLock, tryAcquireWriteLock, type EtcdLock } from '../../../src/sources/etcd/index.js';
import { InvalidArgumentError, LockLostError, LockTimeoutError } from '../../../src/errors.js';
import { RW_LOCKS_ROOT } from '../../../src/sources/etcd/rw-lock.js';
import { prefixEnd, queuePrefix } from '../../../src/sources/etcd/queue.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { EtcdPool, counting, lostReply } from './helpers.js';
import type { Etcd3 } from 'etcd3';

const pool = new EtcdPool();

/** Every key of a read-write lock's queue, read directly (create revision order). */
async function rwKeys(etcd: Etcd3, name: string): Promise<string[]> {
  const prefix = queuePrefix(RW_LOCKS_ROOT, name);
  const response = await etcd.kv.range({ key: Buffer.from(prefix), range_end: prefixEnd(prefix), sort_target: 'Create', sort_order: 'Ascend' });
  return response.kvs.map((kv) => kv.key.toString());
}

/** Whether `promise` is still pending after a short while. */
async function pending(promise: Promise<unknown>, ms = 150): Promise<boolean> {
  const marker = Symbol('pending');
  return (await Promise.race([promise.then(() => null, () => null), sleep(ms, marker)])) === marker;
}

describe('etcd read-write lock', () => {
  it('8 clients x 25 mixed grants: readers overlap, a writer holds alone, a writer\'s token is above every earlier grant, the queue empty after', async () => {
    const name = uniqueLockName('kindsetcd_rw_contention');
    const sources = pool.many(8).map((etcd) => etcdSource(etcd));
    let readers = 0;
    let writers = 0;
    let maxReaders = 0;
    let violations = 0;
    let writes = 0;
    /** The largest token granted so far, and the last writer's. */
    let maxGranted = 0n;
    let lastWriter = 0n;
    const tokenErrors: string[] = [];
    const run = async (source: (typeof sources)[number], client: number): Promise<void> => {
      for (let i = 0; i < 25; i++) {
        const write = (client + i) % 4 === 0;
        const lock = write ? await source.acquireWriteLock(name) : await source.acquireReadLock(name);
        expect(lock.sequencer.kind).toBe(write ? 'write' : 'read');
        if (write) {
          writers++;
          writes++;
          if (writers !== 1 || readers !== 0) violations++;
          if (!(lock.token > maxGranted)) tokenErrors.push(`writer ${lock.token} not above ${maxGranted}`);
          lastWriter = lock.token;
        } else {
          readers++;
          maxReaders = Math.max(maxReaders, readers);
          if (writers !== 0) violations++;
          if (!(lock.token > lastWriter)) tokenErrors.push(`reader ${lock.token} not above the last writer ${lastWriter}`);
        }
        if (lock.token > maxGranted) maxGranted = lock.token;
        await sleep(write ? 1 : 5);
        if (write) writers--;
        else readers--;
        await lock.release();
      }
    };
    await within(Promise.all(sources.map((source, i) => run(source, i))), 120_000, '200 grants');
    expect(violations).toBe(0);
    expect(tokenErrors).toEqual([]);
    expect(writes).toBe(50);
    expect(maxReaders).toBeGreaterThan(1);
    expect(await rwKeys(pool.client(), name)).toEqual([]);
  });

  it('arrival order: a waiting writer holds back a reader that came after it (no writer starvation); tokens in grant order', async () => {
    const [a, b, c] = pool.many(3);
    const name = uniqueLockName('kindsetcd_rw_fifo');
    const first = await acquireReadLock(a!, name);
    const writer = acquireWriteLock(b!, name);
    await until(async () => (await rwKeys(a!, name)).length === 2, 'the writer queued');
    const later = acquireReadLock(c!, name);
    await until(async () => (await rwKeys(a!, name)).length === 3, 'the later reader queued');
    // Another reader is held now, yet the later one waits: the writer came first. The writer waits for the first.
    expect(await pending(later)).toBe(true);
    expect(await pending(writer)).toBe(true);
    expect(await tryAcquireReadLock(c!, name)).toBeNull();
    const status = await rwLockStatus(a!, name);
    expect(status.holders.map((e) => e.mode)).toEqual(['read']);
    expect(status.waiters.map((e) => e.mode)).toEqual(['write', 'read']);

    await first.release();
    const w = await within(writer, 10_000, 'the writer');
    expect(w.token > first.token).toBe(true);
    expect(await pending(later)).toBe(true);
    await w.release();
    const r = await within(later, 10_000, 'the later reader');
    expect(r.token > w.token).toBe(true);
    await r.release();
    expect(await rwKeys(a!, name)).toEqual([]);
  });

  it('readers share; read, write and plain locks of one name are separate locks, told apart by the sequencer kind', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_rw_share');
    const r1 = await acquireReadLock(a!, name);
    const r2 = await within(acquireReadLock(b!, name), 5_000, 'a second reader');
    const plain = await within(acquireLock(b!, name), 5_000, 'the plain lock of the same name');
    expect([r1.held, r2.held, plain.held]).toEqual([true, true, true]);
    expect(r1.sequencer).toMatchObject({ kind: 'read', name, token: r1.token });
    expect(plain.sequencer.kind).toBe('lock');
    expect(await tryAcquireWriteLock(b!, name)).toBeNull();
    await Promise.all([r1.release(), r2.release()]);
    const w = await tryAcquireWriteLock(b!, name);
    expect(w?.sequencer).toMatchObject({ kind: 'write', name });
    expect(w!.token > r2.token && w!.token > r1.token).toBe(true);
    await Promise.all([w!.release(), plain.release()]);
    // A bad name is a rejection, before any request.
    await expect(acquireReadLock(a!, 'a#b')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(tryAcquireWriteLock(a!, '')).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('one wake-up per release: a writer\'s release wakes only the readers it lets in; each reader\'s release wakes at most the writer right behind it', async () => {
    const name = uniqueLockName('kindsetcd_rw_herd');
    const holderClient = pool.client();
    const holder = await acquireWriteLock(holderClient, name);
    const waiters = pool.many(4).map((etcd) => counting(etcd));
    const waits: Promise<EtcdLock>[] = [];
    for (const [i, { client }] of waiters.entries()) {
      waits.push(i < 3 ? acquireReadLock(client, name) : acquireWriteLock(client, name));
      await until(async () => (await rwKeys(holderClient, name)).length === i + 2, `waiter ${i} queued`);
    }
    await until(() => waiters.every((w) => w.counts.watchesMade === 1 && w.counts.watchesCreated === 1), 'every waiter watching one key');

    await holder.release();
    const readers = await within(Promise.all(waits.slice(0, 3)), 10_000, 'the three readers');
    // (Read now: a holder's watch on its own key may see its own release's delete later.)
    expect(waiters.map((w) => w.counts.deletesDelivered)).toEqual([1, 1, 1, 0]);
    const writer = waiters[3]!;
    const looksBefore = writer.counts.range;
    // The writer watches its immediate predecessor (the last reader) only.
    await readers[2]!.release();
    await until(() => writer.counts.range === looksBefore + 1, 'the writer looking again once');
    await until(() => writer.counts.watchesMade === 2, 'the writer watching the next reader');
    await readers[0]!.release();
    await sleep(150);
    expect(writer.counts.deletesDelivered).toBe(1);
    expect(await pending(waits[3]!)).toBe(true);
    await readers[1]!.release();
    const w = await within(waits[3]!, 10_000, 'the writer');
    expect(writer.counts.deletesDelivered).toBe(2);
    expect(w.token > readers[2]!.token).toBe(true);
    await w.release();
    expect(await rwKeys(holderClient, name)).toEqual([]);
  });

  it('a timeout, an abort and a busy try leave no key behind, for readers and writers', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_rw_leftovers');
    const writer = await acquireWriteLock(a!, name);
    const only = [writer.key];

    await expect(acquireReadLock(b!, name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(await rwKeys(a!, name)).toEqual(only);
    await expect(acquireWriteLock(b!, name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(await rwKeys(a!, name)).toEqual(only);

    const controller = new AbortController();
    const aborted = acquireReadLock(b!, name, { signal: controller.signal });
    await until(async () => (await rwKeys(a!, name)).length === 2, 'the reader queued');
    const reason = new Error('caller gave up');
    controller.abort(reason);
    await expect(aborted).rejects.toBe(reason);
    expect(await rwKeys(a!, name)).toEqual(only);

    expect(await tryAcquireReadLock(b!, name)).toBeNull();
    expect(await tryAcquireWriteLock(b!, name)).toBeNull();
    expect(await rwKeys(a!, name)).toEqual(only);
    await writer.release();

    // A reader holds: another reader's try succeeds, a writer's waits and times out leaving nothing.
    const reader = await acquireReadLock(a!, name);
    await expect(acquireWriteLock(b!, name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    const second = await tryAcquireReadLock(b!, name);
    expect(second).not.toBeNull();
    expect(await tryAcquireWriteLock(b!, name)).toBeNull();
    expect(await rwKeys(a!, name)).toEqual([reader.key, second!.key]);
    await Promise.all([reader.release(), second!.release()]);
    expect(await rwKeys(a!, name)).toEqual([]);
  });

  it('a reader\'s join whose reply was lost is adopted and waits for the writer before it, never a second key', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_rw_lost');
    const writer = await acquireWriteLock(a!, name);
    let lost = 0;
    const { client } = counting(b!, {
      afterTxn: (attempt) => {
        if (attempt === 1) {
          lost++;
          throw lostReply();
        }
      },
    });
    const reading = acquireReadLock(client, name);
    await until(() => lost === 1, 'the lost reply');
    await sleep(200);
    expect(await pending(reading)).toBe(true);
    expect((await rwKeys(a!, name)).length).toBe(2);
    await writer.release();
    const reader = await within(reading, 10_000, 'the adopted reader');
    expect(await rwKeys(a!, name)).toEqual([reader.key]);
    expect(reader.token > writer.token).toBe(true);
    await reader.release();
  });

  it('a reader\'s key deleted by someone else ends its holding (node_deleted), as a plain lock\'s', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('kindsetcd_rw_deleted');
    const reader = await acquireReadLock(etcd, name);
    await sleep(50);
    await pool.client().delete().key(reader.key);
    await until(() => !reader.held, 'the holding to end');
    expect((reader.signal.reason as LockLostError).reason).toBe('node_deleted');
    await reader.release();
  });
});
