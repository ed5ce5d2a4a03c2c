// The etcd semaphore against the single etcd node: never more than N held
// (8 clients x 25 grants), per-slot tokens strictly increasing, slots reused,
// arrival order with one wake-up per step, another `permits` refused,
// nothing left behind on timeout, abort or a busy try, a revoked lease
// freeing its slot, and the uncontended cycle's requests.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Etcd3 } from 'etcd3';
import { acquirePermit, etcdSession, etcdSource, tryAcquirePermit, type EtcdPermit } from '../../../src/sources/etcd/index.js';
import { InvalidArgumentError, LockLostError, LockTimeoutError, PermitsMismatchError } from '../../../src/errors.js';
import { SEMAPHORES_ROOT } from '../../../src/sources/etcd/permits.js';
import { prefixEnd, queuePrefix } from '../../../src/sources/etcd/queue.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { EtcdPool, counting, lostReply } from './helpers.js';

const pool = new EtcdPool();

/** Every key under a semaphore's name (queue and slots, every N), read directly, as key suffixes. */
async function semaphoreKeys(etcd: Etcd3, name: string): Promise<string[]> {
  const prefix = queuePrefix(SEMAPHORES_ROOT, name);
  const response = await etcd.kv.range({ key: Buffer.from(prefix), range_end: prefixEnd(prefix), sort_target: 'Create', sort_order: 'Ascend' });
  return response.kvs.map((kv) => kv.key.toString().slice(prefix.length));
}

function ended(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

describe('etcd semaphore', () => {
  it('8 clients x 25 grants of 3 permits: never more than 3 held, each held slot by one holder, per-slot tokens strictly increasing, nothing left after', async () => {
    const name = uniqueLockName('kindsetcd_sem_contention');
    const sources = pool.many(8).map((etcd) => etcdSource(etcd));
    // Three held at once, a fourth refused.
    const three = await Promise.all(sources.slice(0, 3).map((source) => source.acquirePermit(name, { permits: 3 })));
    expect(three.map((p) => p.slot).sort()).toEqual([0, 1, 2]);
    expect(await sources[3]!.tryAcquirePermit(name, { permits: 3 })).toBeNull();
    await Promise.all(three.map((p) => p.release()));
    const holders = new Map<number, bigint>();
    const lastBySlot = new Map<number, bigint>();
    let most = 0;
    const errors: string[] = [];
    const run = async (source: (typeof sources)[number]): Promise<void> => {
      for (let i = 0; i < 25; i++) {
        const permit = await source.acquirePermit(name, { permits: 3 });
        if (permit.slot < 0 || permit.slot >= 3 || permit.permits !== 3) errors.push(`slot ${permit.slot} of ${permit.permits}`);
        if (holders.has(permit.slot)) errors.push(`slot ${permit.slot} held twice`);
        holders.set(permit.slot, permit.token);
        most = Math.max(most, holders.size);
        const last = lastBySlot.get(permit.slot);
        if (last !== undefined && !(permit.token > last)) errors.push(`slot ${permit.slot}: token ${permit.token} after ${last}`);
        lastBySlot.set(permit.slot, permit.token);
        expect(permit.sequencer).toMatchObject({ kind: 'permit', name: `${name}#${permit.slot}`, token: permit.token });
        // Long enough for grants to overlap: a waiter is granted a slot only as the head, one after another.
        await sleep(15);
        holders.delete(permit.slot);
        await permit.release();
      }
    };
    await within(Promise.all(sources.map(run)), 120_000, '200 permits');
    expect(errors).toEqual([]);
    // Overlap under contention depends on the machine's pace (a waiter is granted only as the head); the bound does not.
    expect(most).toBeLessThanOrEqual(3);
    expect(most).toBeGreaterThan(1);
    expect([...lastBySlot.keys()].sort()).toEqual([0, 1, 2]);
    expect(await semaphoreKeys(pool.client(), name)).toEqual([]);
  });

  it('a released slot is taken again by the next permit, with a larger token; the sequencer names the slot', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_sem_reuse');
    const p0 = await acquirePermit(a!, name, { permits: 2 });
    const p1 = await acquirePermit(b!, name, { permits: 2 });
    expect([p0.slot, p1.slot]).toEqual([0, 1]);
    expect(await tryAcquirePermit(b!, name, { permits: 2 })).toBeNull();
    expect(await semaphoreKeys(a!, name)).toEqual(['2.s0', '2.s1']);
    await p0.release();
    const again = await acquirePermit(b!, name, { permits: 2 });
    expect(again.slot).toBe(0);
    expect(again.token > p0.token && again.token > p1.token).toBe(true);
    expect(again.sequencer).toMatchObject({ kind: 'permit', name: `${name}#0` });
    expect(p1.sequencer.name).toBe(`${name}#1`);
    await Promise.all([again.release(), p1.release()]);
    expect(await semaphoreKeys(a!, name)).toEqual([]);
  });

  it('waiters are granted in arrival order; the head watches the slots, the others their predecessor: a release wakes one waiter', async () => {
    const name = uniqueLockName('kindsetcd_sem_fifo');
    const holderClient = pool.client();
    const holder = await acquirePermit(holderClient, name, { permits: 1 });
    const waiters = pool.many(3).map((etcd) => counting(etcd));
    const order: number[] = [];
    const waits: Promise<EtcdPermit>[] = [];
    for (const [i, { client }] of waiters.entries()) {
      waits.push(
        acquirePermit(client, name, { permits: 1 }).then((permit) => {
          order.push(i);
          return permit;
        }),
      );
      await until(async () => (await semaphoreKeys(holderClient, name)).length === i + 2, `waiter ${i} queued`);
    }
    await until(() => waiters.every((w) => w.counts.watchesMade === 1 && w.counts.watchesCreated === 1), 'every waiter watching one thing');

    await holder.release();
    const first = await within(waits[0]!, 10_000, 'the first waiter');
    // The second became the head (its predecessor's queue key deleted by the claim) and watches the slot now.
    await until(() => waiters[1]!.counts.watchesMade === 2, 'the second waiter watching the slot');
    expect(waiters.map((w) => w.counts.deletesDelivered)).toEqual([1, 1, 0]);
    expect(first.token > holder.token).toBe(true);
    await first.release();
    const second = await within(waits[1]!, 10_000, 'the second waiter');
    await second.release();
    const third = await within(waits[2]!, 10_000, 'the third waiter');
    expect(order).toEqual([0, 1, 2]);
    expect([first.slot, second.slot, third.slot]).toEqual([0, 0, 0]);
    expect(second.token > first.token && third.token > second.token).toBe(true);
    await third.release();
    expect(await semaphoreKeys(holderClient, name)).toEqual([]);
  });

  it('another permits for a name in use is refused (PermitsMismatchError) and writes nothing; bad permits are refused before any request', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_sem_mismatch');
    const held = await acquirePermit(a!, name, { permits: 2 });
    const before = await semaphoreKeys(a!, name);
    const refused = acquirePermit(b!, name, { permits: 3 });
    await expect(refused).rejects.toBeInstanceOf(PermitsMismatchError);
    await expect(refused).rejects.toMatchObject({ code: 'PERMITS_MISMATCH', permits: 3, inUse: 2 });
    await expect(tryAcquirePermit(b!, name, { permits: 1 })).rejects.toMatchObject({ code: 'PERMITS_MISMATCH', inUse: 2 });
    // Waiting behind a full semaphore: refused as well, not queued.
    const other = await acquirePermit(b!, name, { permits: 2 });
    await expect(acquirePermit(b!, name, { permits: 12 })).rejects.toMatchObject({ code: 'PERMITS_MISMATCH', inUse: 2 });
    expect(await semaphoreKeys(a!, name)).toEqual([...before, '2.s1']);
    await Promise.all([held.release(), other.release()]);
    // Nobody holds or waits any more: another number is fine.
    const fresh = await acquirePermit(b!, name, { permits: 5 });
    expect(fresh.permits).toBe(5);
    await fresh.release();

    const { client, counts } = counting(pool.client());
    for (const permits of [0, 1.5, 1025, '2', undefined]) {
      await expect(acquirePermit(client, name, { permits } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(tryAcquirePermit(client, name, { permits } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(acquirePermit(client, `${name}#x`, { permits: 1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(counts.txn + counts.range).toBe(0);
  });

  it('a timeout, an abort and a busy try leave no key behind', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_sem_leftovers');
    const holder = await acquirePermit(a!, name, { permits: 1 });
    const only = ['1.s0'];

    await expect(acquirePermit(b!, name, { permits: 1, timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(await semaphoreKeys(a!, name)).toEqual(only);

    const controller = new AbortController();
    const aborted = acquirePermit(b!, name, { permits: 1, signal: controller.signal });
    await until(async () => (await semaphoreKeys(a!, name)).length === 2, 'the waiter queued');
    const reason = new Error('caller gave up');
    controller.abort(reason);
    await expect(aborted).rejects.toBe(reason);
    expect(await semaphoreKeys(a!, name)).toEqual(only);

    // Aborted while its first transaction is on its way.
    const early = new AbortController();
    const inFlight = acquirePermit(b!, name, { permits: 1, signal: early.signal });
    queueMicrotask(() => early.abort(reason));
    await expect(inFlight).rejects.toBe(reason);
    expect(await semaphoreKeys(a!, name)).toEqual(only);

    expect(await tryAcquirePermit(b!, name, { permits: 1 })).toBeNull();
    expect(await semaphoreKeys(a!, name)).toEqual(only);
    await holder.release();

    // A free slot taken by a caller that gave up meanwhile is given back.
    const late = new AbortController();
    const takenLate = acquirePermit(b!, name, { permits: 1, signal: late.signal });
    queueMicrotask(() => late.abort(reason));
    await expect(takenLate).rejects.toBe(reason);
    expect(await semaphoreKeys(a!, name)).toEqual([]);
  });

  it('a revoked lease frees its slot: the holding ends, the waiter gets the slot with a larger token', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_sem_revoke');
    const holder = await acquirePermit(a!, name, { permits: 1 });
    const waiting = acquirePermit(b!, name, { permits: 1 });
    await until(async () => (await semaphoreKeys(b!, name)).length === 2, 'the waiter queued');
    await b!.leaseClient.leaseRevoke({ ID: etcdSession(a!).leaseId!.toString() });
    await within(ended(holder.signal), 10_000, 'the holding on the revoked lease to end');
    expect(['session_expired', 'node_deleted']).toContain((holder.signal.reason as LockLostError).reason);
    const next = await within(waiting, 10_000, 'the waiter');
    expect(next.slot).toBe(0);
    expect(next.token > holder.token).toBe(true);
    await next.release();
    expect(await semaphoreKeys(b!, name)).toEqual([]);
  });

  it('a lost reply is adopted, never a second slot: the uncontended take\'s, and the head\'s claim', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('kindsetcd_sem_lost');
    const losing = (lose: number) => {
      let lost = 0;
      const counted = counting(b!, {
        afterTxn: (attempt) => {
          if (attempt === lose) {
            lost++;
            throw lostReply();
          }
        },
      });
      return { ...counted, lost: () => lost };
    };
    const first = losing(1);
    const taken = await within(acquirePermit(first.client, name, { permits: 2 }), 10_000, 'the take whose reply was lost');
    expect(first.lost()).toBe(1);
    expect(await semaphoreKeys(a!, name)).toEqual(['2.s0']);
    expect(taken.slot).toBe(0);
    await taken.release();

    // Held elsewhere: the waiter's take fails (1), it joins (2), its claim finds no slot (3), and after the release claims (4, reply lost).
    const holder = await acquirePermit(a!, name, { permits: 1 });
    const second = losing(4);
    const waiting = acquirePermit(second.client, name, { permits: 1 });
    await until(async () => (await semaphoreKeys(a!, name)).length === 2, 'the waiter queued');
    await until(() => second.counts.watchesMade === 1 && second.counts.txn === 3, 'the waiter at the head, watching the slot');
    await holder.release();
    const claimed = await within(waiting, 10_000, 'the claim whose reply was lost');
    expect(second.lost()).toBe(1);
    expect(claimed.slot).toBe(0);
    expect(claimed.token > holder.token).toBe(true);
    expect(await semaphoreKeys(a!, name)).toEqual(['1.s0']);
    await claimed.release();
    expect(await semaphoreKeys(a!, name)).toEqual([]);
  });

  it('uncontended: an acquire is one transaction (no queue key, no watch), a release one delete', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('kindsetcd_sem_floor');
    await etcdSession(etcd).lease();
    const { client, counts } = counting(etcd);
    const permit = await acquirePermit(client, name, { permits: 4 });
    await permit.release();
    expect({ txn: counts.txn, range: counts.range, deleteRange: counts.deleteRange, watchesMade: counts.watchesMade }).toEqual({ txn: 1, range: 0, deleteRange: 1, watchesMade: 0 });
  });
});
