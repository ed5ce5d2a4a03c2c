// The etcd source against the single etcd node: mutual exclusion and
// increasing tokens under contention, the fair queue (one release wakes one
// waiter), tokens that are our key's create revision, one lease per client,
// nothing left behind on abort, timeout or a busy try, lost replies adopted,
// the lease's and the key's loss ending the holding.
import { setTimeout as sleep } from 'node:timers/promises';
import { Host } from 'etcd3/lib/connection-pool.js';
import { describe, expect, it, vi } from 'vitest';
import { acquireLock, etcdSession, etcdSource, lockStatus, tryAcquireLock, type EtcdLock } from '../../../src/sources/etcd/index.js';
import { ClientClosedError, LockLostError, LockTimeoutError, SessionExpiredError } from '../../../src/errors.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { EtcdPool, counting, lostReply, queueKeys, singleHosts } from './helpers.js';
import type { EtcdTxnResponse } from '../../../src/sources/etcd/client.js';
import { takeTurns } from '../../helpers/sources.js';

const pool = new EtcdPool();

function ended(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/** n turns each for every source, strictly one holder at a time; the tokens in grant order. */
describe('etcd lock', () => {
  it('8 clients x 25 grants: one holder at a time, tokens strictly increasing in grant order, the queue empty after', async () => {
    const name = uniqueLockName('etcd_contention');
    const sources = pool.many(8).map((etcd) => etcdSource(etcd));
    expect(sources[0]!.kind).toBe('etcd');
    const tokens = await within(takeTurns(sources, name, 25), 120_000, '200 grants');
    expect(tokens).toHaveLength(200);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `grant ${i}: ${tokens[i]} after ${tokens[i - 1]}`).toBe(true);
    expect(await queueKeys(pool.client(), name)).toEqual([]);
  });

  it('the token is a bigint, our key\'s create revision, and the key hangs on the client\'s one lease', async () => {
    const etcd = pool.client();
    const a = await acquireLock(etcd, uniqueLockName('etcd_token_a'));
    const b = await acquireLock(etcd, uniqueLockName('etcd_token_b'));
    expect(typeof a.token).toBe('bigint');
    const [keyA] = await queueKeys(etcd, a.name);
    expect(keyA).toEqual({ key: a.key, createRevision: a.token, lease: etcdSession(etcd).leaseId });
    // One lease per process, not per lock.
    expect(b.lease).toBe(a.lease);
    expect(b.token > a.token).toBe(true);
    await Promise.all([a.release(), b.release()]);
  });

  it('two acquires of one lock from one client queue as two keys (one key per join, not per lease)', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('etcd_same_client');
    const first = await acquireLock(etcd, name);
    const second = acquireLock(etcd, name);
    await until(async () => (await queueKeys(etcd, name)).length === 2, 'the second join\'s key');
    expect(first.held).toBe(true);
    await first.release();
    const next = await within(second, 10_000, 'the second acquire');
    expect(next.token > first.token).toBe(true);
    expect(next.key).not.toBe(first.key);
    await next.release();
    // A name is used again once its acquire has left: deleted keys stay in etcd's index until it compacts.
    const again = await acquireLock(etcd, name);
    expect([first.key, next.key]).toContain(again.key);
    expect(again.token > next.token).toBe(true);
    await again.release();
  });

  it('waiters are granted in the order they joined', async () => {
    const etcds = pool.many(5);
    const name = uniqueLockName('etcd_order');
    const holder = await acquireLock(etcds[0]!, name);
    const order: number[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 1; i < etcds.length; i++) {
      waits.push(
        acquireLock(etcds[i]!, name).then(async (lock) => {
          order.push(i);
          await lock.release();
        }),
      );
      await until(async () => (await queueKeys(etcds[0]!, name)).length === i + 1, `waiter ${i} queued`);
    }
    await holder.release();
    await within(Promise.all(waits), 20_000, 'every waiter');
    expect(order).toEqual([1, 2, 3, 4]);
  });

  it('one release wakes one waiter: exactly one delete event reaches the waiters, and only the next one looks again', async () => {
    const name = uniqueLockName('etcd_herd');
    const holderClient = pool.client();
    const holder = await acquireLock(holderClient, name);
    const waiters = pool.many(5).map((etcd) => counting(etcd));
    const granted: EtcdLock[] = [];
    const waits: Promise<EtcdLock>[] = [];
    for (const [i, { client }] of waiters.entries()) {
      // Queued one by one, so waiter i watches waiter i-1's key.
      waits.push(
        acquireLock(client, name, { owner: `waiter ${i}` }).then((lock) => {
          granted.push(lock);
          return lock;
        }),
      );
      await until(async () => (await queueKeys(holderClient, name)).length === i + 2, `waiter ${i} queued`);
    }
    // Created, not only asked for: a watch starts where etcd creates it (a delete before that is found by a look, not delivered).
    await until(() => waiters.every((w) => w.counts.watchesMade === 1 && w.counts.watchesCreated === 1), 'every waiter watching its predecessor');
    const rangesBefore = waiters.map((w) => w.counts.range);

    await holder.release();
    const first = await within(waits[0]!, 10_000, 'the first waiter');
    // Release the next holder too: a herd would have woken every waiter twice by now.
    await first.release();
    const second = await within(waits[1]!, 10_000, 'the second waiter');

    expect(waiters.map((w) => w.counts.deletesDelivered)).toEqual([1, 1, 0, 0, 0]);
    expect(waiters.map((w, i) => w.counts.range - rangesBefore[i]!)).toEqual([1, 1, 0, 0, 0]);
    expect(granted.map((l) => l.name)).toEqual([name, name]);
    await second.release();
    await within(Promise.all(waits.slice(2).map(async (w) => (await w).release())), 10_000, 'the rest');
  });

  it('waits that come and go one at a time leave the client\'s connections alone: etcd3 resets no member\'s services', async () => {
    // etcd3 cancels a client's watch stream with its last watch and reports the CANCELLED as a failure of the
    // member (resetting every service to it and counting one on its circuit breaker): each wait's watch the
    // client's only one did that at every grant. The spy calls through; etcd3's close resets them too, later.
    const resets = vi.spyOn(Host.prototype, 'resetAllServices');
    try {
      const name = uniqueLockName('etcd_watch_stream');
      const a = pool.client();
      const { client, counts } = counting(pool.client());
      for (let turn = 0; turn < 3; turn++) {
        const held = await acquireLock(a, name);
        // Held past a turn of the event loop: its watch on its own key goes out too.
        await sleep(50);
        const created = counts.watchesCreated;
        const waiting = acquireLock(client, name);
        await until(() => counts.watchesCreated > created, 'the waiter watching the holder');
        await held.release();
        const granted = await within(waiting, 10_000, 'the waiter');
        await sleep(50);
        await granted.release();
      }
      // The stream's CANCELLED comes back within a round trip of the last cancel.
      await sleep(300);
      expect(resets).not.toHaveBeenCalled();
    } finally {
      resets.mockRestore();
    }
  });

  it('a predecessor gone between the waiter\'s join and its watch\'s start: the waiter looks again and is granted', async () => {
    const name = uniqueLockName('etcd_watch_start');
    const held = await acquireLock(pool.client(), name);
    // The join's reply held back until the holder has left: the waiter's watch starts after the delete.
    const { client, counts } = counting(pool.client(), {
      afterTxn: async (attempt) => {
        if (attempt === 1) await held.release();
      },
    });
    const lock = await within(acquireLock(client, name), 10_000, 'the waiter, its predecessor gone before its watch');
    expect(counts.watchesMade).toBe(1);
    expect(counts.deletesDelivered).toBe(0);
    expect((await queueKeys(pool.client(), name)).map((k) => k.key)).toEqual([lock.key]);
    await lock.release();
  });

  it('a timeout, an abort and a busy try-acquire leave no key behind', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('etcd_leftovers');
    const holder = await acquireLock(a!, name);

    await expect(acquireLock(b!, name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect((await queueKeys(a!, name)).map((k) => k.key)).toEqual([holder.key]);

    const controller = new AbortController();
    const aborted = acquireLock(b!, name, { signal: controller.signal });
    await until(async () => (await queueKeys(a!, name)).length === 2, 'the waiter queued');
    const reason = new Error('caller gave up');
    controller.abort(reason);
    await expect(aborted).rejects.toBe(reason);
    expect((await queueKeys(a!, name)).map((k) => k.key)).toEqual([holder.key]);

    // Aborted while its join's transaction is still on its way: the key it puts is deleted after.
    const early = new AbortController();
    const inFlight = acquireLock(b!, name, { signal: early.signal });
    queueMicrotask(() => early.abort(reason));
    await expect(inFlight).rejects.toBe(reason);
    expect((await queueKeys(a!, name)).map((k) => k.key)).toEqual([holder.key]);

    expect(await tryAcquireLock(b!, name)).toBeNull();
    expect((await queueKeys(a!, name)).map((k) => k.key)).toEqual([holder.key]);

    await holder.release();
    const free = await tryAcquireLock(b!, name);
    expect(free).not.toBeNull();
    expect(free!.token > holder.token).toBe(true);
    await free!.release();
    expect(await queueKeys(a!, name)).toEqual([]);
  });

  it('uncontended: an acquire is one transaction whose reply reads nothing back, no watch; a release one delete; a waiter\'s join reads its predecessor in the same transaction', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('etcd_floor');
    await etcdSession(etcd).lease();
    const replies: EtcdTxnResponse[] = [];
    const { client, counts } = counting(etcd, { afterTxn: (_attempt, response) => void replies.push(response) });
    const lock = await acquireLock(client, name);
    await lock.release();
    expect({ txn: counts.txn, range: counts.range, deleteRange: counts.deleteRange, watchesMade: counts.watchesMade }).toEqual({ txn: 1, range: 0, deleteRange: 1, watchesMade: 0 });
    // The queue was empty: the put and the nested comparison that found it empty, no range in the reply.
    expect(replies[0]!.succeeded).toBe(true);
    expect(replies[0]!.responses.some((r) => r.response_range !== undefined && r.response_range !== null)).toBe(false);
    expect(replies[0]!.responses[1]?.response_txn?.succeeded).toBe(true);
    expect(replies[0]!.responses[1]?.response_txn?.responses).toEqual([]);

    const holder = await acquireLock(etcd, name);
    const waiting = acquireLock(client, name);
    await until(async () => replies.length === 2, 'the waiter\'s join to be answered');
    // Our key put, the queue found not empty, and read back in the same transaction.
    const nested = replies[1]!.responses[1]?.response_txn;
    expect(replies[1]!.succeeded).toBe(true);
    expect(nested?.succeeded).toBe(false);
    expect(nested?.responses[0]?.response_range?.kvs.map((kv) => kv.key.toString())).toContain(holder.key);
    await holder.release();
    const next = await within(waiting, 10_000, 'the waiter\'s grant');
    expect(next.token > holder.token).toBe(true);
    await next.release();
  });

  it('a join whose reply was lost is found again and adopted, never duplicated', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('etcd_lost_put');
    let lost = 0;
    const { client, counts } = counting(etcd, {
      afterTxn: (attempt) => {
        // The first transaction is applied by etcd, and its reply never arrives.
        if (attempt === 1) {
          lost++;
          throw lostReply();
        }
      },
    });
    // A second key put by the repeat would stand before it in the queue, and block it for as long as the lease lives.
    const lock = await within(acquireLock(client, name), 10_000, 'the acquire whose first reply was lost');
    expect(lost).toBe(1);
    expect(counts.txn).toBe(2);
    const keys = await queueKeys(etcd, name);
    expect(keys).toEqual([{ key: lock.key, createRevision: lock.token, lease: lock.lease }]);
    expect(lock.held).toBe(true);
    await lock.release();
    expect(await queueKeys(etcd, name)).toEqual([]);

    // The same for a try-acquire.
    let tryLost = 0;
    const again = counting(etcd, {
      afterTxn: (attempt) => {
        if (attempt === 1) {
          tryLost++;
          throw lostReply();
        }
      },
    });
    const tried = await within(tryAcquireLock(again.client, name), 10_000, 'the try-acquire whose first reply was lost');
    expect(tryLost).toBe(1);
    expect(tried).not.toBeNull();
    expect(await queueKeys(etcd, name)).toEqual([{ key: tried!.key, createRevision: tried!.token, lease: tried!.lease }]);
    await tried!.release();
  });

  it('a put of an earlier join applied late (a stray key of ours on the name a join is about to use) is removed, not adopted', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('etcd_stray');
    const lease = etcdSession(etcd).leaseId ?? (await etcdSession(etcd).lease()).id;
    const strayKey = `fencekeeper/locks/${name}/#${lease.toString(16)}-0`;
    const putStray = () =>
      etcd.kv.put({ key: Buffer.from(strayKey), value: Buffer.from(JSON.stringify({ lease: lease.toString(), join: 'an earlier join', owner: 'stray' })), lease: lease.toString() });
    await putStray();
    // A try-acquire finds the queue busy with it, and takes it away.
    expect(await tryAcquireLock(etcd, name)).toBeNull();
    expect(await queueKeys(etcd, name)).toEqual([]);
    await putStray();
    const lock = await within(acquireLock(etcd, name, { owner: 'the real one' }), 10_000, 'the acquire past the stray');
    expect(lock.key).toBe(strayKey);
    expect((await lockStatus(etcd, name)).holder).toMatchObject({ key: strayKey, owner: 'the real one', token: lock.token });
    expect(await queueKeys(etcd, name)).toHaveLength(1);
    await lock.release();
  });

  it('a stray key of ours gone by the time the join reads it back (its compare failed on it) is put anew, not reported as a protocol error', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('etcd_stray_gone');
    let strayKey = '';
    let deleted = 0;
    const { client, counts } = counting(etcd, {
      // The join's compare failed on the stray; it is deleted before the join reads our key back.
      beforeRange: async (request) => {
        if (deleted === 0 && request.key.toString() === strayKey) {
          deleted++;
          await etcd.kv.deleteRange({ key: Buffer.from(strayKey) });
        }
      },
    });
    // The stray hangs on the lease the joins of `client` use, under the name its first join takes.
    const lease = (await etcdSession(client).lease()).id;
    strayKey = `fencekeeper/locks/${name}/#${lease.toString(16)}-0`;
    await etcd.kv.put({ key: Buffer.from(strayKey), value: Buffer.from(JSON.stringify({ lease: lease.toString(), join: 'an earlier join', owner: 'stray' })), lease: lease.toString() });
    const lock = await within(acquireLock(client, name, { owner: 'the real one' }), 10_000, 'the acquire past the vanished stray');
    expect(deleted).toBe(1);
    expect(counts.txn).toBe(2);
    expect(lock.key).toBe(strayKey);
    expect(lock.held).toBe(true);
    expect(await queueKeys(etcd, name)).toEqual([{ key: lock.key, createRevision: lock.token, lease: lock.lease }]);
    expect((await lockStatus(etcd, name)).holder).toMatchObject({ owner: 'the real one', token: lock.token });
    await lock.release();
    expect(await queueKeys(etcd, name)).toEqual([]);
  });

  it('lockStatus lists the holder and the waiters in grant order, with their owners and lease', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('etcd_status');
    expect(await lockStatus(a!, name)).toEqual({ name, holder: null, waiters: [] });
    const holder = await acquireLock(a!, name, { owner: 'the holder' });
    const waiting = acquireLock(b!, name, { owner: 'the waiter' });
    await until(async () => (await lockStatus(a!, name)).waiters.length === 1, 'the waiter listed');
    const status = await lockStatus(a!, name);
    expect(status.holder).toEqual({ key: holder.key, token: holder.token, owner: 'the holder', lease: holder.lease });
    expect(status.waiters[0]!.owner).toBe('the waiter');
    expect(status.waiters[0]!.lease).toBe(etcdSession(b!).leaseId);
    expect(status.waiters[0]!.token > holder.token).toBe(true);
    await holder.release();
    await (await waiting).release();
  });

  it('an owner that JSON must escape is carried in the key\'s value as given', async () => {
    const etcd = pool.client();
    const name = uniqueLockName('etcd_owner');
    const owner = 'a "quoted" \\ owner\n\u2028 ü 🔒';
    const lock = await acquireLock(etcd, name, { owner });
    expect((await lockStatus(etcd, name)).holder).toMatchObject({ key: lock.key, owner, token: lock.token });
    await lock.release();
  });

  it('the lease TTL is the one the server granted (a 1 s request is raised to etcd\'s minimum)', async () => {
    const etcd = pool.client();
    const session = etcdSession(etcd, { ttlSeconds: 1 });
    const lock = await acquireLock(etcd, uniqueLockName('etcd_ttl'));
    expect(session.ttlMs).toBeGreaterThan(1000);
    // The deadline counts from the grant's send time with that TTL, less the default margin (a quarter).
    expect(lock.deadline).toBeLessThanOrEqual(session.deadline! - session.ttlMs! / 4 + 1);
    await lock.release();
  });

  it('the lease\'s keepalives move the deadline on, so a holding outlives several TTLs', async () => {
    const etcd = pool.client();
    etcdSession(etcd, { ttlSeconds: 2 });
    const lock = await acquireLock(etcd, uniqueLockName('etcd_keepalive'));
    const first = lock.deadline;
    await until(() => lock.deadline > first + 2000, 'keepalives acknowledged past a whole TTL', 20_000);
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('a revoked lease ends every holding on it, fails its waiters with SessionExpiredError, and the next acquire gets a new lease', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('etcd_revoke');
    const other = uniqueLockName('etcd_revoke_other');
    const held = await acquireLock(b!, other);
    const holder = await acquireLock(a!, name);
    const waiting = acquireLock(b!, name);
    waiting.catch(() => undefined); // awaited below
    await until(async () => (await queueKeys(a!, name)).length === 2, 'the waiter queued');
    const lease = etcdSession(b!).leaseId!;
    await a!.leaseClient.leaseRevoke({ ID: lease.toString() });

    await within(ended(held.signal), 10_000, 'the holding on the revoked lease to end');
    expect(held.held).toBe(false);
    expect(['session_expired', 'node_deleted']).toContain((held.signal.reason as LockLostError).reason);
    await expect(within(waiting, 10_000, 'the waiter to fail')).rejects.toBeInstanceOf(SessionExpiredError);
    expect((await queueKeys(a!, name)).map((k) => k.key)).toEqual([holder.key]);

    await holder.release();
    const next = await acquireLock(b!, name);
    expect(next.lease).not.toBe(lease);
    await next.release();
  });

  it('our key deleted by someone else ends the holding (node_deleted)', async () => {
    const etcd = pool.client();
    const lock = await acquireLock(etcd, uniqueLockName('etcd_deleted'));
    // Let the watch on our key start (it is armed on the next turn of the event loop).
    await new Promise((r) => setImmediate(r));
    await pool.client().kv.deleteRange({ key: Buffer.from(lock.key) });
    await within(ended(lock.signal), 10_000, 'the holding to end');
    expect((lock.signal.reason as LockLostError).reason).toBe('node_deleted');
    expect(lock.held).toBe(false);
  });

  it('a timeout longer than a timer keeps (30 days) waits: no LockTimeoutError after 1 ms, the lock on release', async () => {
    const name = uniqueLockName('etcd_long_timeout');
    const holder = await acquireLock(pool.client(), name);
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      let settled: unknown = null;
      const waiter = acquireLock(pool.client(), name, { timeoutMs: 30 * 24 * 3600 * 1000 }).then(
        (lock) => (settled = lock),
        (e: unknown) => (settled = e),
      );
      await until(async () => settled !== null || (await queueKeys(pool.client(), name)).length === 2, 'the waiter to join the queue');
      // Longer than the 1 ms an oversized setTimeout delay becomes.
      await new Promise((r) => setTimeout(r, 200));
      expect(settled, 'the waiter settled while the lock was held').toBeNull();
      await holder.release();
      const granted = await within(waiter, 20_000, 'the waiter to be granted');
      expect(granted, String(granted)).not.toBeInstanceOf(Error);
      await (granted as EtcdLock).release();
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).not.toContain('TimeoutOverflowWarning');
  });

  it('a waiter whose own key was deleted fails with node_deleted when it looks again, while the holder still holds, and is never granted', async () => {
    const name = uniqueLockName('etcd_waiter_deleted');
    const holder = await acquireLock(pool.client(), name);
    // Two waiters: P, then W behind it (W watches P's key, P the holder's).
    const pAbort = new AbortController();
    const p = acquireLock(pool.client(), name, { signal: pAbort.signal }).catch((e: unknown) => e);
    await until(async () => (await queueKeys(pool.client(), name)).length === 2, 'P to join the queue');
    const w = acquireLock(pool.client(), name, { timeoutMs: 60_000 }).then(
      (lock) => lock,
      (e: unknown) => e,
    );
    await until(async () => (await queueKeys(pool.client(), name)).length === 3, 'W to join the queue');
    const [, , wKey] = await queueKeys(pool.client(), name);
    // Someone deletes W's key (an operator, a cleanup script): W cannot hear it (it watches P's)...
    await pool.client().kv.deleteRange({ key: Buffer.from(wKey!.key) });
    // ...until P gives up and leaves: W looks again, finds the holder's key where its own should be first, and fails.
    pAbort.abort();
    const error = await within(w, 20_000, 'W to fail after looking again without its key');
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).reason).toBe('node_deleted');
    expect(holder.held).toBe(true);
    expect((await p as Error).name).toBe('AbortError');
    // Nothing of P or W is left: the holder's key alone, then nobody's.
    expect((await queueKeys(pool.client(), name)).map((k) => k.key)).toEqual([holder.key]);
    await holder.release();
    expect(await queueKeys(pool.client(), name)).toEqual([]);
  });

  it('release aborts the signal at once and deletes the key; a second release is the same promise', async () => {
    const etcd = pool.client();
    const lock = await acquireLock(etcd, uniqueLockName('etcd_release'));
    const released = lock.release();
    expect(lock.signal.aborted).toBe(true);
    expect((lock.signal.reason as LockLostError).reason).toBe('released');
    expect(lock.release()).toBe(released);
    await released;
    expect(await queueKeys(etcd, lock.name)).toEqual([]);
  });

  it('closing the session ends its holdings (closed) and revokes the lease', async () => {
    const etcd = pool.client();
    const lock = await acquireLock(etcd, uniqueLockName('etcd_close'));
    await etcdSession(etcd).close();
    expect((lock.signal.reason as LockLostError).reason).toBe('closed');
    expect(await queueKeys(pool.client(), lock.name)).toEqual([]);
  });

  it('closing the etcd3 client itself ends the holdings on its lease (closed)', async () => {
    const etcd = pool.client();
    etcdSession(etcd, { ttlSeconds: 3 });
    const lock = await acquireLock(etcd, uniqueLockName('etcd_client_close'));
    etcd.close();
    await within(ended(lock.signal), 10_000, 'the holding to end');
    expect((lock.signal.reason as LockLostError).reason).toBe('closed');
    await expect(acquireLock(etcd, uniqueLockName('etcd_after_close'))).rejects.toBeInstanceOf(ClientClosedError);
  });

  it('etcd going silent (a black hole): holdings step down by their own clock, waits fail, and release and timeouts still return', async () => {
    const proxy = await TcpProxy.to(singleHosts()[0]!);
    try {
      const direct = pool.client();
      const silent = pool.client([proxy.address]);
      etcdSession(silent, { ttlSeconds: 2 });
      const name = uniqueLockName('etcd_silent');
      const holder = await acquireLock(direct, name);
      const held = await acquireLock(silent, uniqueLockName('etcd_silent_held'));
      const waiting = acquireLock(silent, name);
      waiting.catch(() => undefined); // awaited below
      await until(async () => (await queueKeys(direct, name)).length === 2, 'the waiter queued');

      proxy.blackhole();
      const timedOut = acquireLock(silent, uniqueLockName('etcd_silent_timeout'), { timeoutMs: 100 });
      await within(ended(held.signal), 10_000, 'the holding to step down without replies');
      expect((held.signal.reason as LockLostError).reason).toBe('deadline');
      expect(held.held).toBe(false);
      await expect(within(waiting, 10_000, 'the wait to fail with the lease')).rejects.toBeInstanceOf(SessionExpiredError);
      await expect(within(timedOut, 10_000, 'the timed-out acquire to return')).rejects.toBeInstanceOf(LockTimeoutError);
      await within(held.release(), 10_000, 'release to return while etcd is silent');

      proxy.resume();
      // etcd expires the silent client's lease, and its queued key with it.
      await until(async () => (await queueKeys(direct, name)).length === 1, 'the waiter\'s key to go with its lease', 20_000);
      await holder.release();
    } finally {
      await proxy.close();
    }
  });
});
