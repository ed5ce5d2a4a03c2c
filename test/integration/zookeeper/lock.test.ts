// The lock recipe against a real standalone ZooKeeper: mutual exclusion and
// token order under contention, fairness, no herd, nothing left behind by
// aborts, timeouts and tryAcquireLock, every way a holding ends, the
// step-down deadline, a lost create2 reply, and a reaped container parent.
import diagnostics from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { LockLostError, LockTimeoutError } from '../../../src/errors.js';
import { acquireLock, lockStatus, observeLock, tryAcquireLock, type ZooKeeperLock as Lock } from '../../../src/sources/zookeeper/recipes/lock.js';
import type { FencingToken } from '../../../src/token.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { LOCKS, lastReplyHeldBack, queueChildren, serverWatchCount, serverWatches } from './lock-helpers.js';
import { deferred, until, within } from '../../helpers/wait.js';
import { fourLetterWord } from '../../helpers/zookeeper.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;

const parentOf = (name: string): string => `${LOCKS}/${name}`;

/**
 * The step-down timing test: the reply to the holder's last acknowledged
 * request is held back for holdMs, far longer than the slack a timer may be
 * late on a loaded 2-core machine, and the margin is larger than the slack
 * too, so both a deadline counted from the reply's arrival and one without
 * the margin land outside the bounds. The held reply arrives well before the
 * deadline (holdMs < timeout - margin), and before the client would presume
 * the connection dead (two thirds of the timeout without a byte).
 */
const STEP_DOWN = { sessionTimeoutMs: 6000, marginMs: 2000, holdMs: 2500, slackMs: 1500 } as const;

/** Abort reasons of a lock's signal, as the LockLostError it carries. */
function lossOf(lock: Lock): LockLostError {
  const reason: unknown = lock.signal.reason;
  expect(reason).toBeInstanceOf(LockLostError);
  return reason as LockLostError;
}

function nextAbort(signal: AbortSignal): Promise<{ at: number; reason: unknown }> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve({ at: performance.now(), reason: signal.reason });
    else signal.addEventListener('abort', () => resolve({ at: performance.now(), reason: signal.reason }), { once: true });
  });
}

describe('mutual exclusion and token order', () => {
  it('16 sessions x 20 acquisitions: never two holders, every grant has a larger token', async () => {
    const name = uniqueLockName('mutex');
    const zks = await clients.many(16, server);
    let holders = 0;
    let maxHolders = 0;
    const grants: { client: number; token: FencingToken }[] = [];
    const violations: string[] = [];
    await Promise.all(
      zks.map(async (zk, client) => {
        for (let i = 0; i < 20; i++) {
          const lock = await acquireLock(zk, name);
          holders++;
          maxHolders = Math.max(maxHolders, holders);
          const last = grants.at(-1);
          if (last !== undefined && lock.token <= last.token) violations.push(`grant ${grants.length}: ${lock.token} after ${last.token}`);
          grants.push({ client, token: lock.token });
          if (!lock.held) violations.push(`grant ${grants.length} not held`);
          // Hold across a few turns of the event loop, so others' replies interleave.
          await new Promise((r) => setImmediate(r));
          await new Promise((r) => setTimeout(r, i % 3));
          holders--;
          await lock.release();
        }
      }),
    );
    expect(violations).toEqual([]);
    expect(maxHolders).toBe(1);
    expect(grants).toHaveLength(16 * 20);
    expect(new Set(grants.map((g) => g.client)).size).toBe(16);
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
  });

  it('one session, many concurrent acquireLock calls on the same lock', async () => {
    const name = uniqueLockName('onesession');
    const zk = await clients.connect(server);
    let holders = 0;
    let maxHolders = 0;
    const tokens: FencingToken[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let i = 0; i < 10; i++) {
          const lock = await acquireLock(zk, name);
          holders++;
          maxHolders = Math.max(maxHolders, holders);
          tokens.push(lock.token);
          await new Promise((r) => setImmediate(r));
          holders--;
          await lock.release();
        }
      }),
    );
    expect(maxHolders).toBe(1);
    expect(tokens).toHaveLength(80);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
  });

  it('one session holding many different locks at once', async () => {
    const zk = await clients.connect(server);
    const names = Array.from({ length: 20 }, () => uniqueLockName('many'));
    const locks = await Promise.all(names.map((n) => acquireLock(zk, n)));
    expect(locks.every((l) => l.held)).toBe(true);
    expect(new Set(locks.map((l) => l.token)).size).toBe(20);
    await Promise.all(locks.map((l) => l.release()));
    for (const n of names) expect(await queueChildren(file.admin, parentOf(n))).toEqual([]);
  });
});

describe('fairness', () => {
  it('waiters are granted in the order they arrived', async () => {
    const name = uniqueLockName('fair');
    const [holderZk, ...zks] = await clients.many(9, server);
    const holder = await acquireLock(holderZk!, name);
    const order: number[] = [];
    const done: Promise<void>[] = [];
    for (const [i, zk] of zks.entries()) {
      done.push(
        acquireLock(zk, name).then(async (lock) => {
          order.push(i);
          await lock.release();
        }),
      );
      // The next waiter starts only once this one's node is in the queue.
      await until(async () => (await lockStatus(file.admin, name)).waiters.length === i + 1, `waiter ${i} queued`);
    }
    await holder.release();
    await Promise.all(done);
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });
});

describe('no herd', () => {
  it('with 50 waiters, a release wakes exactly one of them', async () => {
    const name = uniqueLockName('herd');
    const parent = parentOf(name);
    const holderZk = await clients.connect(server);
    const zks = await clients.many(10, server);
    const holder = await acquireLock(holderZk, name);
    const granted: Lock[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 50; i++) {
      waits.push(
        acquireLock(zks[i % 10]!, name).then(
          (lock) => void granted.push(lock),
          () => undefined, // the clients close at the end of the test
        ),
      );
    }
    // Every waiter has its node and its predecessor watch registered on the
    // server (50 exists watches + the holder's own-node watch).
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 50, '50 waiters queued');
    await until(async () => (await serverWatchCount(server, parent)) >= 51, 'all watches registered');

    const sessions = new Set([...zks, holderZk].map((z) => z.sessionId));
    const events: { path: string; type: string; sessionId: bigint }[] = [];
    const onWatch = (message: unknown): void => {
      const m = message as { sessionId: bigint; type: string; path: string };
      // The parent too: a waiter watching the parent's children (the herd
      // recipe) is woken by every release.
      if (sessions.has(m.sessionId) && (m.path === parent || m.path.startsWith(`${parent}/`))) events.push(m);
    };
    diagnostics.subscribe('fencekeeper:zookeeper:watch', onWatch);
    try {
      await holder.release();
      await until(() => granted.length === 1, 'the next waiter granted');
      // A round trip on every session: any notification the server queued
      // for it before this reply has been delivered by now.
      await Promise.all(zks.map((zk) => zk.exists(parent)));
      // The releasing holder's own-node watch fires on its own session; every
      // other delivered event woke a waiter.
      const woken = events.filter((e) => e.sessionId !== holderZk.sessionId);
      expect(woken).toHaveLength(1);
      expect(woken[0]!.type).toBe('deleted');
      expect(woken[0]!.path).toBe(holder.path);
      // Nothing fired on the holder's session but its own node's watch.
      expect(events.filter((e) => e.sessionId === holderZk.sessionId).map((e) => e.path)).toEqual([holder.path]);
      expect(granted).toHaveLength(1);
      expect(granted[0]!.held).toBe(true);
    } finally {
      diagnostics.unsubscribe('fencekeeper:zookeeper:watch', onWatch);
    }
    await granted[0]!.release();
    await until(() => granted.length === 2, 'the second waiter granted');
    await clients.closeAll();
    await Promise.all(waits);
  });
});

describe('nothing is left behind', () => {
  it('a timeout removes our node', async () => {
    const name = uniqueLockName('timeout');
    const [a, b] = await clients.many(2, server);
    const holder = await acquireLock(a!, name);
    await expect(acquireLock(b!, name, { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([holder.path.slice(parentOf(name).length + 1)]);
    await holder.release();
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
  });

  it('an abort while waiting removes our node and rejects with the signal\'s reason', async () => {
    const name = uniqueLockName('abort');
    const [a, b] = await clients.many(2, server);
    const holder = await acquireLock(a!, name);
    const ac = new AbortController();
    const waiting = acquireLock(b!, name, { signal: ac.signal });
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'waiter queued');
    const why = new Error('caller gave up');
    ac.abort(why);
    await expect(waiting).rejects.toBe(why);
    expect((await lockStatus(file.admin, name)).waiters).toEqual([]);
    expect(await queueChildren(file.admin, parentOf(name))).toHaveLength(1);
    await holder.release();
  });

  it('an abort in the same tick as acquireLock (create in flight) leaves no node, held or free lock', async () => {
    const name = uniqueLockName('abortinflight');
    const [a, b] = await clients.many(2, server);
    // Free lock: the create would have won it.
    for (let i = 0; i < 5; i++) {
      const ac = new AbortController();
      const p = acquireLock(b!, name, { signal: ac.signal });
      ac.abort();
      await expect(p).rejects.toMatchObject({ name: 'AbortError' });
      expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
    }
    // Held lock.
    const holder = await acquireLock(a!, name);
    const ac = new AbortController();
    const p = acquireLock(b!, name, { signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toMatchObject({ name: 'AbortError' });
    expect((await lockStatus(file.admin, name)).waiters).toEqual([]);
    await holder.release();
    // And an already-aborted signal never creates anything.
    await expect(acquireLock(b!, name, { signal: AbortSignal.abort() })).rejects.toMatchObject({ name: 'AbortError' });
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
  });

  it('tryAcquireLock: null while held (no node left), a lock when free', async () => {
    const name = uniqueLockName('try');
    const [a, b] = await clients.many(2, server);
    const first = await tryAcquireLock(a!, name);
    expect(first).not.toBeNull();
    expect(first!.held).toBe(true);
    expect(await tryAcquireLock(b!, name)).toBeNull();
    expect(await tryAcquireLock(a!, name)).toBeNull(); // the same session is no exception
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([first!.path.split('/').at(-1)]);
    await first!.release();
    const second = await tryAcquireLock(b!, name);
    expect(second).not.toBeNull();
    expect(second!.token > first!.token).toBe(true);
    await second!.release();
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
  });
});

describe('how a holding ends', () => {
  it('release: signal aborts with reason released, held false, release() is idempotent', async () => {
    const zk = await clients.connect(server);
    const lock = await acquireLock(zk, uniqueLockName('release'));
    expect(lock.held).toBe(true);
    expect(lock.signal.aborted).toBe(false);
    const first = lock.release();
    expect(lock.signal.aborted).toBe(true);
    expect(lossOf(lock).reason).toBe('released');
    expect(lossOf(lock).code).toBe('LOCK_LOST');
    expect(lock.held).toBe(false);
    const second = lock.release();
    expect(second).toBe(first);
    await Promise.all([first, second, lock.release()]);
    expect(await file.admin.exists(lock.path)).toBeNull();
  });

  it('our node deleted by another client: node_deleted', async () => {
    const zk = await clients.connect(server);
    const lock = await acquireLock(zk, uniqueLockName('deleted'));
    const aborted = nextAbort(lock.signal);
    await file.admin.delete(lock.path);
    await aborted;
    expect(lossOf(lock).reason).toBe('node_deleted');
    expect(lock.held).toBe(false);
    await lock.release(); // a node already gone is fine
  });

  it('client close: the signal aborts, held false, the node is gone', async () => {
    const zk = await clients.connect(server);
    const lock = await acquireLock(zk, uniqueLockName('closed'));
    await zk.close();
    expect(lock.signal.aborted).toBe(true);
    // Regression: while connected, the server deletes our ephemeral (and
    // notifies our own-node watch) before it answers closeSession; the
    // holding reported 'node_deleted' until it could ask zk.closing.
    expect(lossOf(lock).reason).toBe('closed');
    expect(lock.held).toBe(false);
    expect(await file.admin.exists(lock.path)).toBeNull();
    await lock.release();
  });

  it('client close while disconnected: closed', async () => {
    const { proxy, zk } = await file.proxied();
    const lock = await acquireLock(zk, uniqueLockName('closedoffline'));
    proxy.cut();
    proxy.blackhole();
    await until(() => zk.state === 'suspended', 'the client to notice the cut');
    await zk.close();
    expect(lossOf(lock).reason).toBe('closed');
    expect(lock.held).toBe(false);
    await lock.release();
  });

  it('connection cut past the session timeout: deadline first, then the session expires; the next holder has a larger token', async () => {
    const name = uniqueLockName('expiry');
    const { proxy, zk } = await file.proxied(2000);
    const other = await clients.connect(server);
    const lock = await acquireLock(zk, name);
    const aborted = nextAbort(lock.signal);
    const next = acquireLock(other, name);
    proxy.blackhole();
    await aborted;
    expect(lossOf(lock).reason).toBe('deadline');
    expect(lock.held).toBe(false);
    const successor = await next; // the server expired the session and deleted the node
    expect(successor.token > lock.token).toBe(true);
    proxy.resume();
    await until(() => zk.state === 'expired', 'the client to learn its session expired');
    expect(lossOf(lock).reason).toBe('deadline');
    expect(lock.held).toBe(false);
    await lock.release();
    await successor.release();
  });

  it('step-down: the signal aborts at (send time of the last acknowledged request) + timeout - margin, not counted from a reply that arrived seconds late', async () => {
    const name = uniqueLockName('stepdown');
    const { proxy, zk } = await file.proxied(STEP_DOWN.sessionTimeoutMs);
    expect(zk.sessionTimeoutMs).toBe(STEP_DOWN.sessionTimeoutMs);
    const other = await clients.connect(server);
    const lock = await acquireLock(zk, name, { safetyMarginMs: STEP_DOWN.marginMs });
    const order: string[] = [];
    const aborted = nextAbort(lock.signal).then((abort) => {
      order.push('holder stepped down');
      return { ...abort, state: zk.state };
    });
    const next = acquireLock(other, name).then((l) => {
      order.push('other granted');
      return l;
    });
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'the other client queued');
    const reply = await lastReplyHeldBack(proxy, zk, STEP_DOWN.holdMs);
    // The fault happened: the last acknowledged request's reply arrived
    // far later than the request went out, and the lock was still held.
    expect(reply.deliveredAt - reply.forwardedBy).toBeGreaterThan(STEP_DOWN.slackMs);
    expect(lock.held).toBe(true);
    const successor = await next;
    const abort = await aborted;
    expect(order).toEqual(['holder stepped down', 'other granted']);
    expect(lossOf(lock).reason).toBe('deadline');
    expect(abort.state).not.toBe('expired');
    const { sessionTimeoutMs, marginMs, slackMs } = STEP_DOWN;
    // Never before the deadline counted from the send (it was sent after sentAfter)...
    expect(abort.at).toBeGreaterThanOrEqual(reply.sentAfter + sessionTimeoutMs - marginMs);
    // ...and not later than a timer's lateness on a loaded machine after it
    // (it was sent before forwardedBy). Counted from the reply's arrival it
    // would be holdMs later, past this bound and past the session's expiry.
    expect(abort.at).toBeLessThanOrEqual(reply.forwardedBy + sessionTimeoutMs - marginMs + slackMs);
    await successor.release();
  });
});

describe('lost create reply', () => {
  it('the connection drops with create2 in flight: the lock adopts its node, one node for one acquire', async () => {
    const name = uniqueLockName('lostreply');
    const parent = parentOf(name);
    const { proxy, zk } = await file.proxied();
    const other = await clients.connect(server);
    // Someone holds the lock, so our create makes a waiter, and the parent exists.
    const holder = await acquireLock(other, name);
    proxy.loseReplyTo(`${parent}/`);
    const acquiring = acquireLock(zk, name);
    await until(() => proxy.repliesLost === 1, 'the create2 reply to be dropped');
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'our node in the queue');
    const status = await lockStatus(file.admin, name);
    expect(status.waiters[0]!.sessionId).toBe(zk.sessionId);
    await holder.release();
    const lock = await acquiring;
    expect(lock.path).toBe(status.waiters[0]!.path);
    expect(lock.token).toBe(status.waiters[0]!.token);
    expect(await queueChildren(file.admin, parent)).toEqual([lock.path.slice(parent.length + 1)]);
    expect(zk.state).toBe('connected');
    await lock.release();
    expect(await queueChildren(file.admin, parent)).toEqual([]);
  });

  it('uncontended: the reply to create2 + getChildren is lost, the lock is still granted with its one node', async () => {
    const name = uniqueLockName('lostreply1');
    const parent = parentOf(name);
    const { proxy, zk } = await file.proxied();
    // Make the parent exist so the first create succeeds (an empty container is not reaped).
    const warm = await acquireLock(zk, name);
    await file.admin.create(`${parent}/keep`);
    await warm.release();
    proxy.loseReplyTo(`${parent}/`);
    const lock = await acquireLock(zk, name);
    expect(proxy.repliesLost).toBe(1);
    expect(lock.held).toBe(true);
    expect(await queueChildren(file.admin, parent)).toEqual([lock.path.slice(parent.length + 1), 'keep'].sort());
    await lock.release();
    await file.admin.delete(`${parent}/keep`);
  });
});

describe('container parent', () => {
  it('a lock whose parent was reaped can be acquired again, with a larger token', async () => {
    const name = uniqueLockName('reaped');
    const zk = await clients.connect(server);
    const first = await acquireLock(zk, name);
    await first.release();
    // The server reaps empty containers every znode.container.checkIntervalMs (1 s in test/servers).
    await until(async () => (await file.admin.exists(parentOf(name))) === null, 'the container parent reaped');
    const second = await acquireLock(zk, name);
    expect(second.held).toBe(true);
    expect(second.token > first.token).toBe(true);
    await second.release();
  });

  it('a nested name (jobs/reindex): both container levels reaped, then acquired again', async () => {
    const group = uniqueLockName('group');
    const name = `${group}/reindex`;
    const zk = await clients.connect(server);
    const first = await acquireLock(zk, name);
    await first.release();
    await until(async () => (await file.admin.exists(parentOf(group))) === null, 'both containers reaped');
    const second = await acquireLock(zk, name);
    expect(second.path.startsWith(`${parentOf(name)}/`)).toBe(true);
    expect(second.token > first.token).toBe(true);
    await second.release();
  });
});

describe('observeLock', () => {
  it('reports the holder and follows changes', async () => {
    const name = uniqueLockName('observe');
    const [a, b] = await clients.many(2, server);
    const observer = observeLock(file.admin, name);
    try {
      expect(await observer.holder()).toBeNull();
      const changed = deferred();
      const off = observer.onChange(() => changed.resolve());
      const lock = await acquireLock(a!, name);
      await changed.promise;
      off();
      await until(async () => (await observer.holder())?.token === lock.token, 'observer sees the holder');
      const holder = await observer.holder();
      expect(holder!.sessionId).toBe(a!.sessionId);
      expect(holder!.path).toBe(lock.path);
      const next = acquireLock(b!, name);
      await lock.release();
      const second = await next;
      await until(async () => (await observer.holder())?.token === second.token, 'observer sees the new holder');
      await second.release();
      await until(async () => (await observer.holder()) === null, 'observer sees no holder');
    } finally {
      observer.close();
    }
  });

  it('an observer whose session expired does not keep answering from its cache', async () => {
    const name = uniqueLockName('observeexpired');
    const { proxy, zk: watcherZk } = await file.proxied(2000);
    const [a, b] = await clients.many(2, server);
    const observer = observeLock(watcherZk, name);
    const first = await acquireLock(a!, name);
    await until(async () => (await observer.holder())?.token === first.token, 'observer sees the holder');
    proxy.blackhole();
    await until(() => watcherZk.state === 'expired', 'the observer client expired');
    const next = acquireLock(b!, name);
    await first.release();
    const second = await next;
    // The cache still names `first`, who released: a verify() built on it
    // would admit a token that is no longer the holder's.
    await expect(observer.holder()).rejects.toMatchObject({ code: 'SESSION_EXPIRED' });
    observer.close();
    await second.release();
  });
});

describe('requests per cycle', () => {
  /** Requests the server has received on the connection of session `sid` (the cons four-letter word). */
  async function received(sid: bigint): Promise<number> {
    const text = await fourLetterWord(server, 'cons');
    const line = text.split('\n').find((l) => l.includes(`sid=0x${sid.toString(16)},`));
    const match = /recved=(\d+)/.exec(line ?? '');
    if (match === null) throw new Error(`no connection for session 0x${sid.toString(16)} in:\n${text}`);
    return Number(match[1]);
  }

  it('a lock released at once costs create2 + getChildren + delete: the own-node watch is not sent eagerly in a write of its own', async () => {
    // It was: exists(own node, watch) left right after the grant, a third
    // socket write per cycle (plus its reply and the deleted notification).
    const zk = await clients.connect(server, 10_000);
    const name = uniqueLockName('requests');
    const warm = await acquireLock(zk, name);
    // A foreign child keeps the container parent from being reaped mid-test
    // (a reaped parent costs a failed create and the parents' creates).
    await file.admin.create(`${parentOf(name)}/keep`);
    await warm.release();
    const before = await received(zk.sessionId);
    const cycles = 20;
    for (let i = 0; i < cycles; i++) await (await acquireLock(zk, name)).release();
    expect((await received(zk.sessionId)) - before).toBe(3 * cycles);
    await file.admin.delete(`${parentOf(name)}/keep`);
  });

  it('a lock held past the turn of the event loop watches its own node', async () => {
    const zk = await clients.connect(server);
    const lock = await acquireLock(zk, uniqueLockName('ownwatch'));
    await until(() => serverWatches(server, lock.path), 'the own-node watch on the server');
    const aborted = nextAbort(lock.signal);
    await file.admin.delete(lock.path);
    await aborted;
    expect(lossOf(lock).reason).toBe('node_deleted');
  });
});

describe('disconnections shorter than the session', () => {
  it('a holder that reconnects keeps the lock, and its own-node watch was re-armed', async () => {
    const { proxy, zk } = await file.proxied();
    const lock = await acquireLock(zk, uniqueLockName('holderreconnect'));
    // The own-node watch is registered before the cut, so it is the
    // reconnect's setWatches that re-arms it (a watch first sent after the
    // reconnect would pass this test without any re-arm).
    await until(() => serverWatches(server, lock.path), 'the own-node watch on the server');
    const states: string[] = [];
    zk.on('state', (state: string) => states.push(state));
    proxy.cut();
    await until(() => states.join() === 'suspended,connected', 'the client to notice the cut and reconnect');
    expect(lock.held).toBe(true);
    expect(lock.signal.aborted).toBe(false);
    const aborted = nextAbort(lock.signal);
    await file.admin.delete(lock.path);
    // A watch that was not re-armed never fires: fail with that, not with the test's timeout.
    await within(aborted, 20_000, 'the re-armed own-node watch to fire');
    expect(lossOf(lock).reason).toBe('node_deleted');
  });

  it('a waiter disconnected while its predecessor leaves is granted after it reconnects (setWatches)', async () => {
    const name = uniqueLockName('waiterreconnect');
    const { proxy, zk } = await file.proxied();
    const other = await clients.connect(server);
    const holder = await acquireLock(other, name);
    const waiting = acquireLock(zk, name);
    await until(async () => (await serverWatchCount(server, parentOf(name))) >= 2, 'the waiter watches the holder');
    proxy.cut();
    proxy.blackhole(); // reconnection attempts hang until resume()
    await until(() => zk.state === 'suspended', 'the waiter to notice the cut');
    await holder.release();
    proxy.resume();
    const lock = await waiting;
    expect(lock.held).toBe(true);
    expect(lock.token > holder.token).toBe(true);
    await lock.release();
  });

  it('a waiter whose session expires rejects with SessionExpiredError and leaves no node', async () => {
    const name = uniqueLockName('waiterexpired');
    const { proxy, zk } = await file.proxied(2000);
    const other = await clients.connect(server);
    const holder = await acquireLock(other, name);
    const waiting = acquireLock(zk, name);
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'waiter queued');
    proxy.blackhole();
    await expect(waiting).rejects.toMatchObject({ code: 'SESSION_EXPIRED' });
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 0, 'the server to drop the expired waiter');
    await holder.release();
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([]);
  });
});

describe('giving up while disconnected', () => {
  it('timeoutMs is honoured while the client is disconnected (it waited for the session to expire), and the node is removed after the reconnect', async () => {
    const name = uniqueLockName('timeoutoffline');
    const { proxy, zk } = await file.proxied();
    const other = await clients.connect(server);
    const holder = await acquireLock(other, name);
    proxy.cut();
    proxy.blackhole();
    await until(() => zk.state === 'suspended', 'the client to notice the cut');
    await expect(acquireLock(zk, name, { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(zk.state).toBe('suspended'); // not 'expired': the caller was not kept waiting for the session's end
    const ac = new AbortController();
    const aborted = acquireLock(zk, name, { signal: ac.signal });
    ac.abort();
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    expect(zk.state).toBe('suspended');
    proxy.resume();
    await until(() => zk.state === 'connected', 'the client to reconnect');
    // The creates went out after the reconnect; the background removal follows them.
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 0, 'no waiter node left');
    await expect(zk.exists(parentOf(name))).resolves.not.toBeNull();
    expect(await queueChildren(file.admin, parentOf(name))).toEqual([holder.path.slice(parentOf(name).length + 1)]);
    await holder.release();
  });
});
