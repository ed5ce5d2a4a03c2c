// The handoff in a deep queue, on the 3-node ensemble: a waiter told its
// predecessor was deleted is granted without listing the queue when the
// process knows every node ahead of it gone (src/sources/zookeeper/recipes/
// queue-known.ts), and lists otherwise. What must hold whatever the process
// knows: one holder at a time, grants in join order, and a give-up or a
// session expiry ahead never taken for a release. The sessions are spread
// over the three servers (the connect string rotated: the client dials its
// first server, and the process's knowledge is shared by every client given
// the same servers); a client dialling through a proxy has knowledge of its
// own, as another process would.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { acquireLock, lockStatus, type ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { KnownQueue } from '../../../src/sources/zookeeper/recipes/queue-known.js';
import { expireSession } from '../../../src/testing/expire-session.js';
import { testServers, useEnsembleForFaults } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { LOCKS, serverWatchCount } from './lock-helpers.js';

const ensemble = testServers().zkEnsemble.split(',');
const clients = new ClientPool();
// Other files kill the ensemble's leader: an election can outlast these 8 s
// sessions, and the handoffs here are timed. One such file at a time.
useEnsembleForFaults(() => clients.closeAll());
const proxies: TcpProxy[] = [];
afterEach(async () => {
  for (const proxy of proxies.splice(0)) await proxy.close();
});
afterEach(() => clients.closeAll());

/** A client whose first server is ensemble[i % 3] (same servers, so the same process knowledge). */
function onServer(i: number, sessionTimeoutMs = 8000): Promise<ZooKeeperClient> {
  const k = i % ensemble.length;
  return clients.connect([...ensemble.slice(k), ...ensemble.slice(0, k)].join(','), sessionTimeoutMs);
}

/** A client through a proxy of its own: its servers differ, so the process's knowledge of its queues is its own (another process's). */
async function elsewhere(i: number): Promise<ZooKeeperClient> {
  const proxy = await TcpProxy.to(ensemble[i % ensemble.length]!);
  proxies.push(proxy);
  return clients.connect(proxy.address, 8000);
}

/** Every grant, in order, and whether two were ever held at once. */
class Grants {
  readonly order: string[] = [];
  holding = 0;
  overlaps = 0;

  /** Acquire as `who`, counting the grant. */
  async take(zk: ZooKeeperClient, name: string, who: string, signal?: AbortSignal): Promise<ZooKeeperLock> {
    const lock = await acquireLock(zk, name, signal === undefined ? {} : { signal });
    if (++this.holding > 1) this.overlaps++;
    this.order.push(who);
    return lock;
  }

  async release(lock: ZooKeeperLock): Promise<void> {
    this.holding--;
    await lock.release();
  }
}

const depth = async (admin: ZooKeeperClient, name: string): Promise<number> => {
  const { holder, waiters } = await lockStatus(admin, name);
  return (holder === null ? 0 : 1) + waiters.length;
};

/** Watches on the lock's queue over the three servers: each waiter's predecessor's and its own, the holder's own. */
async function watchesOn(name: string): Promise<number> {
  let sum = 0;
  for (const server of ensemble) sum += await serverWatchCount(server, `${LOCKS}/${name}`);
  return sum;
}

/**
 * Join waiters one after the other behind the holder (each queued before the
 * next joins), the i-th on `zks[i]`. The depth each must reach is counted
 * from the one holder, not read: `admin` is on another server than the
 * holder's, and a read there may not show the holder's node yet (ZooKeeper's
 * reads are not linearizable across servers), which would make every count
 * after it one short of what the queue reaches.
 */
async function joinInOrder(admin: ZooKeeperClient, name: string, grants: Grants, zks: readonly ZooKeeperClient[], signals: (AbortSignal | undefined)[] = []): Promise<Promise<ZooKeeperLock>[]> {
  const waiting: Promise<ZooKeeperLock>[] = [];
  const before = 1;
  for (let i = 0; i < zks.length; i++) {
    const w = grants.take(zks[i]!, name, `w${i + 1}`, signals[i]);
    // A waiter that gives up rejects: handled where it is awaited. One that
    // fails before it queued fails the test now, not after until()'s limit.
    let failed: unknown;
    w.catch((error: unknown) => (failed ??= error ?? new Error('rejected')));
    waiting.push(w);
    await until(async () => {
      if (failed !== undefined) throw new Error(`w${i + 1} failed before it queued`, { cause: failed });
      return (await depth(admin, name)) === before + i + 1;
    }, `w${i + 1} queued`);
  }
  return waiting;
}

describe('handoff in a deep queue (3-node ensemble)', () => {
  it('a release hands over down a queue of five without a listing, in join order, over three servers', async () => {
    const name = uniqueLockName('known-release');
    const admin = await onServer(0);
    const zks = await Promise.all([1, 2, 3, 4, 5].map((i) => onServer(i)));
    const grants = new Grants();
    const holder = await grants.take(zks[0]!, name, 'h');
    const waiting = await joinInOrder(admin, name, grants, zks.slice(1));
    // Each waiter watches its predecessor and its own node; the holder its own node.
    await until(async () => (await watchesOn(name)) >= 9, 'the waiters watch');
    const listings = zks.slice(1).flatMap((zk) => [vi.spyOn(zk, 'getChildren'), vi.spyOn(zk, 'getChildrenWithStat')]);
    await grants.release(holder);
    for (const w of waiting) await grants.release(await within(w, 10_000, 'the next grant'));
    expect(grants.order).toEqual(['h', 'w1', 'w2', 'w3', 'w4']);
    expect(grants.overlaps).toBe(0);
    for (const listing of listings) expect(listing).not.toHaveBeenCalled();
    // The table goes with the last waiter that used it.
    expect(KnownQueue.count).toBe(0);
  });

  it('a waiter ahead of the predecessor gives up: each grant still waits for the one before it', async () => {
    const name = uniqueLockName('known-ahead-quits');
    const admin = await onServer(0);
    const zks = await Promise.all([1, 2, 3, 4].map((i) => onServer(i)));
    const grants = new Grants();
    const holder = await grants.take(zks[0]!, name, 'h');
    const quit = new AbortController();
    const [w1, w2, w3] = await joinInOrder(admin, name, grants, zks.slice(1), [quit.signal]);
    await until(async () => (await watchesOn(name)) >= 7, 'the waiters watch');
    // w1 (ahead of w3's predecessor w2) gives up: w2 now waits for the holder, w3 for w2.
    quit.abort(new Error('gave up'));
    await expect(w1).rejects.toThrow('gave up');
    await until(async () => (await depth(admin, name)) === 3, 'w1 gone');
    const early = await Promise.race([w2!.then(() => 'granted'), w3!.then(() => 'granted'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    expect(early).toBe('waiting');
    await grants.release(holder);
    const second = await within(w2!, 10_000, 'w2 granted');
    const third = await Promise.race([w3!.then(() => 'granted'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    expect(third).toBe('waiting');
    await grants.release(second);
    await grants.release(await within(w3!, 10_000, 'w3 granted'));
    expect(grants.order).toEqual(['h', 'w2', 'w3']);
    expect(grants.overlaps).toBe(0);
  });

  it('the predecessor gives up while the holder holds: the waiter behind it is not granted, and is once the holder releases', async () => {
    const name = uniqueLockName('known-predecessor-quits');
    const admin = await onServer(0);
    const zks = await Promise.all([1, 2, 3, 4].map((i) => onServer(i)));
    const grants = new Grants();
    const holder = await grants.take(zks[0]!, name, 'h');
    const quit = new AbortController();
    const [w1, w2, w3] = await joinInOrder(admin, name, grants, zks.slice(1), [undefined, quit.signal]);
    await until(async () => (await watchesOn(name)) >= 7, 'the waiters watch');
    // Hand over once, so the process knows the old holder gone: then w2 gives up with w1 holding.
    await grants.release(holder);
    const first = await within(w1!, 10_000, 'w1 granted');
    quit.abort(new Error('gave up'));
    await expect(w2).rejects.toThrow('gave up');
    await until(async () => (await depth(admin, name)) === 2, 'w2 gone');
    const early = await Promise.race([w3!.then(() => 'granted'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    expect(early).toBe('waiting');
    expect(first.held).toBe(true);
    await grants.release(first);
    await grants.release(await within(w3!, 10_000, 'w3 granted'));
    expect(grants.order).toEqual(['h', 'w1', 'w3']);
    expect(grants.overlaps).toBe(0);
  });

  it('the session of a node ahead expires (a waiter, then the holder): no grant before its turn', async () => {
    const name = uniqueLockName('known-expiry');
    const admin = await onServer(0);
    const zks = await Promise.all([1, 2, 3, 4].map((i) => onServer(i)));
    const grants = new Grants();
    const holder = await grants.take(zks[0]!, name, 'h');
    const [w1, w2, w3] = await joinInOrder(admin, name, grants, zks.slice(1));
    await until(async () => (await watchesOn(name)) >= 7, 'the waiters watch');
    // w2's session ends on the server: its node goes as a give-up would, with the holder still holding.
    await expireSession(zks[2]!);
    await expect(w2).rejects.toThrow();
    await until(async () => (await depth(admin, name)) === 3, 'w2 gone');
    const early = await Promise.race([w1!.then(() => 'granted'), w3!.then(() => 'granted'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    expect(early).toBe('waiting');
    // Then the holder's session: w1's turn, and w3 still waits behind it.
    // (counted as released now: its client may hear of the expiry after w1's grant)
    grants.holding--;
    await expireSession(zks[0]!);
    const first = await within(w1!, 10_000, 'w1 granted');
    const third = await Promise.race([w3!.then(() => 'granted'), new Promise((r) => setTimeout(() => r('waiting'), 300))]);
    expect(third).toBe('waiting');
    await grants.release(first);
    await grants.release(await within(w3!, 10_000, 'w3 granted'));
    expect(grants.order).toEqual(['h', 'w1', 'w3']);
    expect(grants.overlaps).toBe(0);
  });

  it('many waiters, some of them of "other processes" (knowledge of their own), some giving up: one holder at a time, FIFO', async () => {
    const name = uniqueLockName('known-many');
    const admin = await onServer(0);
    // 3 sessions sharing the process's knowledge, 2 with knowledge of their own.
    const local = await Promise.all([0, 1, 2].map((i) => onServer(i)));
    const remote = await Promise.all([0, 1].map((i) => elsewhere(i)));
    const zks = [...local, ...remote];
    const grants = new Grants();
    const holder = await grants.take(zks[0]!, name, 'h');
    const n = 30;
    const quits = Array.from({ length: n }, (_, i) => (i % 7 === 3 ? new AbortController() : undefined));
    const waiting = await joinInOrder(
      admin,
      name,
      grants,
      Array.from({ length: n }, (_, i) => zks[i % zks.length]!),
      quits.map((q) => q?.signal),
    );
    // Give-ups spread through the queue, while the holder holds.
    for (const q of quits) q?.abort(new Error('gave up'));
    const stayed = waiting.filter((_, i) => quits[i] === undefined);
    await until(async () => (await depth(admin, name)) === stayed.length + 1, 'the give-ups gone');
    await grants.release(holder);
    for (const w of stayed) {
      const lock = await within(w, 10_000, 'the next grant');
      // Nothing behind it may be granted while it holds.
      await new Promise((r) => setTimeout(r, 5));
      await grants.release(lock);
    }
    const expected = ['h', ...waiting.map((_, i) => `w${i + 1}`).filter((_, i) => quits[i] === undefined)];
    expect(grants.order).toEqual(expected);
    expect(grants.overlaps).toBe(0);
    expect(KnownQueue.count).toBe(0);
  });
});
