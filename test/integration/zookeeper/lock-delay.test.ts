// Lock-delay against a real standalone ZooKeeper: after a holder's session
// expired (really, through expireSession) the next holder waits lockDelayMs
// before its grant resolves, measured on the monotonic clock from the moment
// the waiter's client hears of the expiry; after a clean release of its own predecessor it does not wait (a
// delay of a minute that would blow the 10 s liveness bound); an old
// clean-release record does not excuse a later expiry; a node that joined
// behind the waiter and expired does not make a clean handoff unclean; a
// participant without the option (a plain delete) counts as unclean; the
// delay ends with the caller's timeout and signal, leaving nothing behind.
//
// Most tests pin the lock's container with a foreign child ('keeper',
// ignored by the queue), so the server's container reaper (1 s on the test
// servers) cannot remove it, and its record, under the test: a reaped parent
// counts as unclean, which would hide the case; see pinParent.
import { performance } from 'node:perf_hooks';
import { describe, expect, it, vi } from 'vitest';
import { LockLostError, LockTimeoutError } from '../../../src/errors.js';
import { expireSession } from '../../../src/testing/expire-session.js';
import { acquireLock, lockStatus, tryAcquireLock, type ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { LOCKS, serverWatchCount } from './lock-helpers.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;

/** The delay the waiting tests measure. */
const DELAY = 1500;
/** The delay of the tests that must not wait: the liveness bound (10 s) would catch a wait. */
const NEVER = 60_000;
const parentOf = (name: string): string => `${LOCKS}/${name}`;
const childOf = (lock: ZooKeeperLock): string => lock.path.slice(lock.path.lastIndexOf('/') + 1);

async function createIfMissing(path: string, mode: 'persistent' | 'container'): Promise<void> {
  await file.admin.create(path, null, { mode }).catch((error: unknown) => {
    if ((error as { code?: string }).code !== 'ZK_NODEEXISTS') throw error;
  });
}

/**
 * The lock's container, kept from the reaper by a foreign child, and with a
 * clean record to start from (the child's create and a write of the parent in
 * one multi: mzxid = pzxid, as a clean release leaves it), so that the
 * test's first holder is not delayed: a lock without a record (first use)
 * counts as unclean. Returns its removal.
 */
async function pinParent(name: string): Promise<() => Promise<void>> {
  await createIfMissing('/fencekeeper', 'persistent');
  await createIfMissing(LOCKS, 'persistent');
  await createIfMissing(parentOf(name), 'container');
  await file.admin.multi([
    { op: 'create', path: `${parentOf(name)}/keeper` },
    { op: 'setData', path: parentOf(name), data: 'keeper' },
  ]);
  return () => file.admin.delete(`${parentOf(name)}/keeper`);
}

/** `test` on a fresh lock name whose parent is pinned (pinParent), unpinned after it, whatever its outcome. */
async function onPinnedLock(label: string, test: (name: string) => Promise<void>): Promise<void> {
  const name = uniqueLockName(label);
  const unpin = await pinParent(name);
  try {
    await test(name);
  } finally {
    await unpin();
  }
}

/** When `acquiring` resolves, on the monotonic clock. */
function grantedAt<T>(acquiring: Promise<T>): Promise<{ value: T; at: number }> {
  return acquiring.then((value) => ({ value, at: performance.now() }));
}

/**
 * A waiter on `waiterZk`, queued behind a holder that `end` ends (an
 * expiry, a plain release): its lock once granted, and how long after the
 * end. The end is the instant the waiter's client hears that the holder's
 * node is gone (a watch of the test's own beside the recipe's, delivered by
 * the same notification): the earliest the waiter can know of it, so the
 * time `end` spends before the expiry (expireSession dials a connection of
 * its own first) is not counted as waited. The grant's time is taken when it
 * resolves, even while `end` is still running.
 */
async function grantAfterEnd(
  name: string,
  waiterZk: ZooKeeperClient,
  waiting: Promise<ZooKeeperLock>,
  end: () => Promise<unknown>,
): Promise<{ lock: ZooKeeperLock; waitedMs: number }> {
  const next = grantedAt(waiting);
  await queued(name, 1);
  const holder = (await lockStatus(file.admin, name)).holder;
  if (holder === null) throw new Error(`${name}: no holder to end`);
  let deletedAt: (at: number) => void = () => undefined;
  const ended = new Promise<number>((resolve) => (deletedAt = resolve));
  const watched = await waiterZk.exists(holder.path, {
    watch: (event) => {
      if (event.type === 'deleted') deletedAt(performance.now());
    },
  });
  expect(watched, 'the holder node, watched before its end').not.toBeNull();
  await end();
  const from = await within(ended, 30_000, "the waiter's client told the holder node is gone");
  const { value: lock, at } = await within(next, 30_000, 'the waiter granted');
  return { lock, waitedMs: at - from };
}

/** An acquire by an arrival, started now: its result once granted, and how long that took. */
async function arrival<T>(acquire: () => Promise<T>, what: string): Promise<{ value: T; waitedMs: number }> {
  const calledAt = performance.now();
  const { value, at } = await within(grantedAt(acquire()), 30_000, what);
  return { value, waitedMs: at - calledAt };
}

async function queued(name: string, waiters: number): Promise<void> {
  await until(async () => (await lockStatus(file.admin, name)).waiters.length === waiters, `${waiters} waiter(s) queued`);
}

async function recordOf(name: string): Promise<string> {
  return Buffer.from((await file.admin.getData(parentOf(name))).data).toString('utf8');
}

describe('lock-delay after an unclean end', () => {
  it('the holder expires: the waiter behind it waits lockDelayMs before its grant resolves', async () => {
    const name = uniqueLockName('delay-expiry');
    const [a, b] = await clients.many(2, server);
    const holder = await acquireLock(a!, name, { lockDelayMs: DELAY });
    const { lock, waitedMs } = await grantAfterEnd(name, b!, acquireLock(b!, name, { lockDelayMs: DELAY }), async () => {
      await expireSession(a!);
      expect((holder.signal.reason as LockLostError).reason).toBe('session_expired');
    });
    expect(waitedMs).toBeGreaterThanOrEqual(DELAY);
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('the holder expires: an arrival at the empty queue waits too (tryAcquireLock as well)', async () => {
    await onPinnedLock('delay-arrival', async (name) => {
      const [a, b] = await clients.many(2, server);
      await acquireLock(a!, name, { lockDelayMs: DELAY });
      await expireSession(a!);
      await until(async () => (await lockStatus(file.admin, name)).holder === null, 'the expired holder gone');
      const { value: lock, waitedMs } = await arrival(() => tryAcquireLock(b!, name, { lockDelayMs: DELAY }), 'the arrival granted');
      expect(lock).not.toBeNull();
      expect(waitedMs).toBeGreaterThanOrEqual(DELAY);
      await lock!.release();
    });
  });

  it('a participant without lockDelayMs releases with a plain delete, which the next holder counts as unclean', async () => {
    const name = uniqueLockName('delay-plain');
    const [a, b] = await clients.many(2, server);
    const holder = await acquireLock(a!, name);
    const { lock, waitedMs } = await grantAfterEnd(name, b!, acquireLock(b!, name, { lockDelayMs: DELAY }), async () => {
      await holder.release();
      // The default release wrote nothing to the parent.
      expect((await file.admin.exists(parentOf(name)))!.version).toBe(0);
    });
    expect(waitedMs).toBeGreaterThanOrEqual(DELAY);
    await lock.release();
  });
});

describe('lock-delay after a clean release', () => {
  it('the waiter behind a cleanly released holder does not wait; the record names the released node', async () => {
    await onPinnedLock('delay-clean', async (name) => {
      const [a, b] = await clients.many(2, server);
      const holder = await within(acquireLock(a!, name, { lockDelayMs: NEVER }), 10_000, 'the first holder granted');
      const next = acquireLock(b!, name, { lockDelayMs: NEVER });
      await queued(name, 1);
      await holder.release();
      const lock = await within(next, 10_000, 'the waiter granted without a delay');
      expect(lock.held).toBe(true);
      expect(await recordOf(name)).toBe(childOf(holder));
      await lock.release();
    });
  });

  it('the first acquire of a lock (no record yet: a new or reaped container) counts as unclean and waits', async () => {
    const name = uniqueLockName('delay-first');
    const zk = await clients.connect(server);
    const { value: lock, waitedMs } = await arrival(() => acquireLock(zk, name, { lockDelayMs: DELAY }), 'the first acquire granted');
    expect(waitedMs).toBeGreaterThanOrEqual(DELAY);
    await lock.release();
  });

  it('an arrival at the empty queue after a clean release does not wait', async () => {
    await onPinnedLock('delay-clean-arrival', async (name) => {
      const [a, b] = await clients.many(2, server);
      const first = await within(acquireLock(a!, name, { lockDelayMs: NEVER }), 10_000, 'the first holder granted');
      await first.release();
      const stat = (await file.admin.exists(parentOf(name)))!;
      expect(stat.mzxid).toBe(stat.pzxid);
      const lock = await within(acquireLock(b!, name, { lockDelayMs: NEVER }), 10_000, 'the arrival granted without a delay');
      expect(lock.held).toBe(true);
      await lock.release();
    });
  });

  it('a node that joined behind the waiter and expired after the clean release does not make the handoff unclean', async () => {
    const name = uniqueLockName('delay-behind');
    const unpin = await pinParent(name);
    const proxy = await TcpProxy.to(server);
    try {
      const a = await clients.connect(server);
      const e = await clients.connect(server);
      const b = await clients.connect(proxy.address);
      const holder = await within(acquireLock(a, name, { lockDelayMs: NEVER }), 10_000, 'the first holder granted');
      const next = acquireLock(b, name, { lockDelayMs: NEVER });
      await queued(name, 1);
      await until(async () => (await serverWatchCount(server, parentOf(name))) >= 2, 'the waiter watching');
      // The waiter hears nothing until the node behind it has come and gone.
      proxy.holdReplies();
      await holder.release();
      const behind = acquireLock(e, name, { lockDelayMs: NEVER }).catch((error: unknown) => error);
      // The server sees the waiter at the head now, and the newcomer behind it.
      await queued(name, 1);
      await expireSession(e);
      expect(await behind).toMatchObject({ code: 'SESSION_EXPIRED' });
      await queued(name, 0);
      // The parent's children changed after the clean release: mzxid and pzxid differ now.
      const stat = (await file.admin.exists(parentOf(name)))!;
      expect(stat.pzxid).toBeGreaterThan(stat.mzxid);
      expect(await recordOf(name)).toBe(childOf(holder));
      proxy.deliverHeld();
      const lock = await within(next, 10_000, 'the waiter granted without a delay');
      expect(lock.held).toBe(true);
      await lock.release();
    } finally {
      await proxy.close();
      await unpin();
    }
  });
});

describe('an old clean-release record', () => {
  it('does not excuse a later expiry, for an arrival at the empty queue', async () => {
    await onPinnedLock('delay-old-arrival', async (name) => {
      const [a, c, b] = await clients.many(3, server);
      const first = await acquireLock(a!, name, { lockDelayMs: DELAY });
      await first.release();
      // The next holder follows a clean release; then its session expires.
      await within(acquireLock(c!, name, { lockDelayMs: DELAY }), 10_000, 'the second holder granted');
      await expireSession(c!);
      await until(async () => (await lockStatus(file.admin, name)).holder === null, 'the expired holder gone');
      expect(await recordOf(name)).toBe(childOf(first)); // the record still names the first, cleanly released node
      const { value: lock, waitedMs } = await arrival(() => acquireLock(b!, name, { lockDelayMs: DELAY }), 'the arrival granted');
      expect(waitedMs).toBeGreaterThanOrEqual(DELAY);
      await lock.release();
    });
  });

  it('does not excuse a later expiry, for a waiter', async () => {
    const name = uniqueLockName('delay-old-waiter');
    const [a, c, b] = await clients.many(3, server);
    const first = await acquireLock(a!, name, { lockDelayMs: DELAY });
    const second = acquireLock(c!, name, { lockDelayMs: DELAY });
    await queued(name, 1);
    await first.release();
    await within(second, 10_000, 'the second holder granted');
    const { lock, waitedMs } = await grantAfterEnd(name, b!, acquireLock(b!, name, { lockDelayMs: DELAY }), () => expireSession(c!));
    expect(waitedMs).toBeGreaterThanOrEqual(DELAY);
    expect(await recordOf(name)).toBe(childOf(first));
    await lock.release();
  });
});

describe('the wait and the caller', () => {
  it("the delay counts against timeoutMs and ends with the caller's signal, leaving nothing behind", async () => {
    await onPinnedLock('delay-stop', async (name) => {
      const [a, b] = await clients.many(2, server);
      await within(acquireLock(a!, name, { lockDelayMs: NEVER }), 10_000, 'the first holder granted');
      await expireSession(a!);
      await until(async () => (await lockStatus(file.admin, name)).holder === null, 'the expired holder gone');
      await expect(acquireLock(b!, name, { lockDelayMs: NEVER, timeoutMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
      expect(await lockStatus(file.admin, name)).toMatchObject({ holder: null, waiters: [] });
      const controller = new AbortController();
      const trying = tryAcquireLock(b!, name, { lockDelayMs: NEVER, signal: controller.signal });
      await until(async () => (await lockStatus(file.admin, name)).holder !== null, 'the try waiting out the delay at the head');
      controller.abort(new Error('gave up'));
      await expect(trying).rejects.toThrow('gave up');
      expect(await lockStatus(file.admin, name)).toMatchObject({ holder: null, waiters: [] });
    });
  });

  it('a parent we may not write (no WRITE in its ACL): the release falls back to a plain delete, and the lock is free', async () => {
    const name = uniqueLockName('delay-readonly-parent');
    await createIfMissing('/fencekeeper', 'persistent');
    await createIfMissing(LOCKS, 'persistent');
    // READ | CREATE | DELETE for everyone, no WRITE: the queue works, the record cannot be written.
    await file.admin.create(parentOf(name), null, { mode: 'container', acl: [{ perms: 1 | 4 | 8, id: { scheme: 'world', id: 'anyone' } }] });
    const zk = await clients.connect(server);
    const lock = await within(acquireLock(zk, name, { lockDelayMs: 200 }), 10_000, 'the first holder granted');
    const multi = vi.spyOn(zk, 'multi');
    await within(lock.release(), 10_000, 'the release');
    await expect(multi.mock.results[0]!.value).rejects.toMatchObject({ code: 'ZK_NOAUTH' });
    expect(await file.admin.exists(lock.path)).toBeNull();
    expect((await file.admin.exists(parentOf(name)))?.version ?? 0).toBe(0);
  });

  it('bad lockDelayMs: INVALID_ARGUMENT before anything is created', async () => {
    const name = uniqueLockName('delay-input');
    const zk = await clients.connect(server);
    for (const lockDelayMs of [-1, Number.NaN, Infinity, '100' as never, 2 ** 31]) {
      await expect(acquireLock(zk, name, { lockDelayMs })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(tryAcquireLock(zk, name, { lockDelayMs })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(await file.admin.exists(parentOf(name))).toBeNull();
  });
});
