// The N-permit semaphore against a real standalone ZooKeeper: never more
// than N held (8 clients x 25 grants), per-slot tokens that only grow, a
// released slot taken by the next waiter in arrival order, the head alone
// woken by a release, nothing left behind by aborts, timeouts, try and a
// size mismatch, a lost claim reply adopted, and a slot freed by a holder's
// session expiry.
import diagnostics from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError, LockTimeoutError, PermitsMismatchError } from '../../../src/errors.js';
import { expireSession } from '../../../src/testing/expire-session.js';
import { acquirePermit, tryAcquirePermit, SEMAPHORES_ROOT, type ZooKeeperPermit as Permit } from '../../../src/sources/zookeeper/recipes/permit.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { queuePath } from '../../../src/sources/zookeeper/recipes/queue-path.js';
import { digestAclId } from '../../../src/sources/zookeeper/client.js';
import { CREATOR_ALL_ACL, Perms, READ_ACL_UNSAFE } from '../../../src/sources/zookeeper/protocol.js';
import type { FencingToken } from '../../../src/token.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';
import { queueChildren, LOCKS } from './lock-helpers.js';
import { RequestCounter } from './helpers.js';
import { acquireLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { acquireReadLock, acquireWriteLock, RW_LOCKS_ROOT } from '../../../src/sources/zookeeper/recipes/rw-lock.js';

const file = new StandaloneFile();
const { server, clients } = file;

const parentOf = (name: string): string => `${SEMAPHORES_ROOT}/${name}`;
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The semaphore's children: queue nodes (waiters) and slot nodes (holders). */
async function children(name: string): Promise<{ waiters: string[]; slots: string[] }> {
  const all = await queueChildren(file.admin, parentOf(name));
  return { waiters: all.filter((c) => c.includes('-lock-')), slots: all.filter((c) => c.startsWith('slot-')).sort() };
}

describe('at most N held, per-slot tokens', () => {
  it('8 clients x 25 grants of 3 permits: never more than 3 held, never two on a slot, each slot\'s tokens increase', async () => {
    const name = uniqueLockName('sem');
    const zks = await clients.many(8, server);
    const holding = new Set<number>();
    let held = 0;
    let maxHeld = 0;
    const violations: string[] = [];
    const lastToken = new Map<number, FencingToken>();
    let grants = 0;
    await Promise.all(
      zks.map(async (zk) => {
        for (let i = 0; i < 25; i++) {
          const permit = await acquirePermit(zk, name, { permits: 3 });
          held++;
          maxHeld = Math.max(maxHeld, held);
          if (held > 3) violations.push(`${held} held`);
          if (permit.slot < 0 || permit.slot >= 3 || permit.permits !== 3) violations.push(`slot ${permit.slot} of ${permit.permits}`);
          if (holding.has(permit.slot)) violations.push(`slot ${permit.slot} held twice`);
          holding.add(permit.slot);
          const last = lastToken.get(permit.slot);
          if (last !== undefined && permit.token <= last) violations.push(`slot ${permit.slot}: ${permit.token} after ${last}`);
          lastToken.set(permit.slot, permit.token);
          if (!permit.held) violations.push('granted but not held');
          expect(permit.sequencer).toMatchObject({ kind: 'permit', name: `${name}#${permit.slot}`, token: permit.token });
          grants++;
          // Held long beside a round trip, so all 3 permits are taken at times.
          await pause(5 + (i % 3) * 5);
          holding.delete(permit.slot);
          held--;
          await permit.release();
        }
      }),
    );
    expect(violations).toEqual([]);
    expect(grants).toBe(200);
    expect(maxHeld).toBe(3);
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });

  it('a released slot goes to the next waiter, in arrival order, with a larger token', async () => {
    const name = uniqueLockName('semreuse');
    const zks = await clients.many(5, server);
    const source = zookeeperSource(zks[0]!);
    const p0 = await source.acquirePermit(name, { permits: 2 });
    const p1 = await acquirePermit(zks[1]!, name, { permits: 2 });
    expect([p0.slot, p1.slot].sort()).toEqual([0, 1]);
    const order: number[] = [];
    const waits: Promise<Permit>[] = [];
    for (let i = 2; i < 5; i++) {
      waits.push(acquirePermit(zks[i]!, name, { permits: 2 }).then((p) => (order.push(i), p)));
      await until(async () => (await children(name)).waiters.length === i - 1, `waiter ${i} queued`);
    }
    expect(await tryAcquirePermit(zks[0]!, name, { permits: 2 })).toBeNull();
    await p1.release();
    const w2 = await waits[0]!;
    expect(w2.slot).toBe(p1.slot);
    expect(w2.token > p1.token).toBe(true);
    await pause(50);
    expect(order).toEqual([2]);
    await p0.release();
    const w3 = await waits[1]!;
    expect(w3.slot).toBe(p0.slot);
    expect(w3.token > p0.token).toBe(true);
    await w2.release();
    const w4 = await waits[2]!;
    expect(w4.slot).toBe(w2.slot);
    expect(order).toEqual([2, 3, 4]);
    await Promise.all([w3.release(), w4.release()]);
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });
});

describe('no herd', () => {
  it('a release wakes the head (its slot watch) and, as the head takes the slot, the one waiter behind it', async () => {
    const name = uniqueLockName('semherd');
    const parent = parentOf(name);
    const zks = await clients.many(7, server);
    const holders = [await acquirePermit(zks[0]!, name, { permits: 2 }), await acquirePermit(zks[1]!, name, { permits: 2 })];
    const granted = new Map<number, Permit>();
    const waits: Promise<void>[] = [];
    for (let i = 2; i < 7; i++) {
      waits.push(acquirePermit(zks[i]!, name, { permits: 2 }).then((p) => void granted.set(i, p), () => undefined));
      await until(async () => (await children(name)).waiters.length === i - 1, `waiter ${i} queued`);
    }
    const waiters = (await children(name)).waiters.sort((a, b) => Number(a.slice(-10)) - Number(b.slice(-10)));
    const sessions = new Map(zks.map((zk, i) => [zk.sessionId, i]));
    const events: { client: number; path: string }[] = [];
    const onWatch = (message: unknown): void => {
      const m = message as { sessionId: bigint; type: string; path: string };
      const client = sessions.get(m.sessionId);
      if (client !== undefined && client >= 2 && m.path.startsWith(`${parent}/`)) events.push({ client, path: m.path.slice(parent.length + 1) });
    };
    diagnostics.subscribe('fencekeeper:zookeeper:watch', onWatch);
    try {
      const freed = holders[0]!;
      await freed.release();
      await until(() => granted.has(2), 'the head granted');
      // The new head lists and watches the slots: let that settle, then a round trip on every session.
      await until(async () => (await children(name)).waiters.length === 4, 'the head left the queue');
      await pause(100);
      await Promise.all(zks.map((zk) => zk.exists(parent)));
      // Not a wake-up: the head's watch on its own queue node, deleted by its claim.
      const woken = events.splice(0).filter((e) => e.client !== 2 || e.path !== waiters[0]);
      // Client 2 (the head) woke on the freed slot; client 3 on client 2's queue node. Nobody else.
      expect(new Set(woken.map((e) => e.client))).toEqual(new Set([2, 3]));
      expect(woken.filter((e) => e.client === 2).map((e) => e.path)).toEqual([`slot-${freed.slot}`]);
      expect(woken.filter((e) => e.client === 3).map((e) => e.path)).toEqual([waiters[0]]);
      expect(granted.get(2)!.slot).toBe(freed.slot);
    } finally {
      diagnostics.unsubscribe('fencekeeper:zookeeper:watch', onWatch);
    }
    await holders[1]!.release();
    for (let i = 2; i < 7; i++) {
      await until(() => granted.has(i), `waiter ${i} granted`);
      await granted.get(i)!.release();
    }
    await Promise.all(waits);
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });
});

describe('nothing is left behind', () => {
  it('timeouts, aborts and try leave no queue node and no slot', async () => {
    const name = uniqueLockName('semleave');
    const [a, b] = await clients.many(2, server);
    const holder = await acquirePermit(a!, name, { permits: 1 });
    await expect(acquirePermit(b!, name, { permits: 1, timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    const ac = new AbortController();
    const waiting = acquirePermit(b!, name, { permits: 1, signal: ac.signal });
    await until(async () => (await children(name)).waiters.length === 1, 'the waiter queued');
    const why = new Error('caller gave up');
    ac.abort(why);
    await expect(waiting).rejects.toBe(why);
    const ac2 = new AbortController();
    const inFlight = acquirePermit(b!, name, { permits: 1, signal: ac2.signal });
    ac2.abort();
    await expect(inFlight).rejects.toMatchObject({ name: 'AbortError' });
    expect(await tryAcquirePermit(b!, name, { permits: 1 })).toBeNull();
    expect(await children(name)).toEqual({ waiters: [], slots: ['slot-0'] });
    await holder.release();
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
    // The head timing out while it watches the slots (not while behind a predecessor).
    const again = await acquirePermit(a!, name, { permits: 1 });
    await expect(acquirePermit(b!, name, { permits: 1, timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(await children(name)).toEqual({ waiters: [], slots: ['slot-0'] });
    await again.release();
  });

  it('an abort on a free semaphore with the claim in flight leaves no slot', async () => {
    const name = uniqueLockName('semabortclaim');
    const zk = await clients.connect(server);
    for (let i = 0; i < 5; i++) {
      const ac = new AbortController();
      const p = acquirePermit(zk, name, { permits: 2, signal: ac.signal });
      // Abort once the join's write is answered, as the claim goes out.
      await new Promise((r) => setImmediate(r));
      setImmediate(() => ac.abort());
      await p.then((permit) => permit.release(), () => undefined);
      await until(async () => (await children(name)).slots.length === 0 && (await children(name)).waiters.length === 0, 'nothing left');
    }
  });

  it('another permits for a name in use: PermitsMismatchError, leaving nothing behind', async () => {
    const name = uniqueLockName('semmismatch');
    const [a, b] = await clients.many(2, server);
    const holder = await acquirePermit(a!, name, { permits: 2 });
    const refused = await acquirePermit(b!, name, { permits: 3 }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PermitsMismatchError);
    expect(refused).toMatchObject({ code: 'PERMITS_MISMATCH', permits: 3, inUse: 2, lock: name });
    await expect(tryAcquirePermit(b!, name, { permits: 1 })).rejects.toBeInstanceOf(PermitsMismatchError);
    expect(await children(name)).toEqual({ waiters: [], slots: [`slot-${holder.slot}`] });
    const second = await acquirePermit(b!, name, { permits: 2 });
    await Promise.all([holder.release(), second.release()]);
  });

  it('bad input is refused before any I/O', async () => {
    const zk = await clients.connect(server);
    const name = uniqueLockName('sembad');
    for (const permits of [0, -1, 1.5, 1025, Number.NaN, '2', undefined]) {
      await expect(acquirePermit(zk, name, { permits } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(acquirePermit(zk, name, undefined as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquirePermit(zk, name, { permits: 2, lockDelayMs: 5 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquirePermit(zk, 'x'.repeat(1023), { permits: 10 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquirePermit(zk, name, { permits: 2, timeoutMs: -5 })).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await file.admin.exists(parentOf(name))).toBeNull();
  });

  it('the claim\'s reply is lost: the permit adopts its slot, one slot for one acquire', async () => {
    const name = uniqueLockName('semlost');
    const parent = parentOf(name);
    const { proxy, zk } = await file.proxied();
    proxy.loseReplyTo(`${parent}/slot-`);
    const permit = await acquirePermit(zk, name, { permits: 2 });
    expect(proxy.repliesLost).toBe(1);
    expect(permit.held).toBe(true);
    expect(await children(name)).toEqual({ waiters: [], slots: [`slot-${permit.slot}`] });
    const stat = await file.admin.exists(permit.path);
    expect(stat!.czxid).toBe(permit.token);
    await permit.release();
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });
});

describe('a slot node deleted by hand', () => {
  it('ends its holding; the late release of it leaves the slot\'s next holder alone', async () => {
    const name = uniqueLockName('semdeleted');
    const [a, b] = await clients.many(2, server);
    const first = await acquirePermit(a!, name, { permits: 1 });
    await until(async () => (await file.admin.exists(first.path)) !== null, 'the slot node');
    const next = acquirePermit(b!, name, { permits: 1 });
    await until(async () => (await children(name)).waiters.length === 1, 'the waiter queued');
    // The holder looks at its grant, so its own-node watch serves a holding.
    expect(first.held).toBe(true);
    await file.admin.delete(first.path);
    const taken = await next;
    await until(() => first.signal.aborted, 'the first holder to learn of the deletion');
    expect((first.signal.reason as LockLostError).reason).toBe('node_deleted');
    expect(taken.slot).toBe(first.slot);
    await first.release();
    expect(await file.admin.exists(taken.path)).not.toBeNull();
    expect(taken.held).toBe(true);
    await taken.release();
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });
});

describe('session expiry', () => {
  it('frees the slot: held turns false, the next waiter takes that slot with a larger token', async () => {
    const name = uniqueLockName('semexpire');
    const [a, b] = await clients.many(2, server);
    const stale = await acquirePermit(a!, name, { permits: 1 });
    const next = acquirePermit(b!, name, { permits: 1 });
    await until(async () => (await children(name)).waiters.length === 1, 'the waiter queued');
    await expireSession(a!);
    await until(() => stale.signal.aborted, 'the stale holder to step down');
    expect(stale.held).toBe(false);
    expect((stale.signal.reason as LockLostError).reason).toBe('session_expired');
    const taken = await next;
    expect(taken.slot).toBe(stale.slot);
    expect(taken.token > stale.token).toBe(true);
    expect(taken.sequencer.name).toBe(stale.sequencer.name);
    // The stale holder's release sends nothing (its session is gone) and cannot touch the new holder's slot.
    await stale.release();
    expect(taken.held).toBe(true);
    await taken.release();
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });
});

describe('round trips of an uncontended cycle (acquire, release)', () => {
  it('plain, read and write locks: 2 socket writes; a permit: 3 (its claim is a second round trip)', async () => {
    const wire = new RequestCounter();
    // A long session: no ping between the counts.
    const zk = await clients.connect({ connectString: server, sessionTimeoutMs: 30_000, connector: wire.connector });
    const name = uniqueLockName('semtrips');
    // Parents that stay (a child of their own keeps the server from reaping them between cycles).
    for (const parent of [`${LOCKS}/${name}`, `${RW_LOCKS_ROOT}/${name}`]) {
      // Every ancestor first: on a fresh server not even /fencekeeper/rwlocks exists yet.
      const segments = parent.split('/').filter((s) => s !== '');
      for (let i = 1; i <= segments.length; i++) {
        await file.admin.create(`/${segments.slice(0, i).join('/')}`, null, { mode: 'container' }).catch((error: unknown) => {
          if ((error as { code?: string }).code !== 'ZK_NODEEXISTS') throw error;
        });
      }
      await file.admin.create(`${parent}/keep`);
    }
    await (await acquirePermit(zk, name, { permits: 2 })).release();
    await file.admin.create(`${parentOf(name)}/keep`);
    await (await acquireLock(zk, name)).release(); // the source's identity, read once per client
    const cycle = async (take: () => Promise<{ release(): Promise<void> }>): Promise<{ writes: number; sent: number }> => {
      const [writes, sent] = [wire.writes, wire.sent];
      await (await take()).release();
      return { writes: wire.writes - writes, sent: wire.sent - sent };
    };
    expect(await cycle(() => acquireLock(zk, name))).toEqual({ writes: 2, sent: 3 });
    expect(await cycle(() => acquireReadLock(zk, name))).toEqual({ writes: 2, sent: 3 });
    expect(await cycle(() => acquireWriteLock(zk, name))).toEqual({ writes: 2, sent: 3 });
    // join: create + getChildren + getData (the size); claim: multi + getData (the slot's czxid); release: delete.
    expect(await cycle(() => acquirePermit(zk, name, { permits: 2 }))).toEqual({ writes: 3, sent: 6 });
    for (const parent of [`${LOCKS}/${name}`, `${RW_LOCKS_ROOT}/${name}`, parentOf(name)]) await file.admin.delete(`${parent}/keep`);
  });
});

describe('with an ACL', () => {
  it('the container, the queue and the slot nodes carry it: another identity can neither join nor delete a slot', async () => {
    const alice = await clients.connect({ connectString: server, sessionTimeoutMs: 4000, auth: [{ scheme: 'digest', credentials: 'alice:alice-secret' }] });
    const mallory = await clients.connect({ connectString: server, sessionTimeoutMs: 4000, auth: [{ scheme: 'digest', credentials: 'mallory:mallory-secret' }] });
    const acl = [...CREATOR_ALL_ACL, ...READ_ACL_UNSAFE];
    const stored = [`${Perms.ALL}/digest/${digestAclId('alice', 'alice-secret')}`, `${Perms.READ}/world/anyone`].sort();
    const name = uniqueLockName('semacl');
    const permit = await zookeeperSource(alice, { acl }).acquirePermit(name, { permits: 2 });
    const aclOf = async (path: string): Promise<string[]> => (await alice.getACL(path)).acl.map((e) => `${e.perms}/${e.id.scheme}/${e.id.id}`).sort();
    expect(queuePath('semaphore', name)).toBe(parentOf(name));
    expect(() => queuePath('nope' as never, name)).toThrow(InvalidArgumentError);
    expect(await aclOf(parentOf(name))).toEqual(stored);
    expect(await aclOf(permit.path)).toEqual(stored);
    await expect(mallory.delete(permit.path)).rejects.toMatchObject({ code: 'ZK_NOAUTH' });
    await expect(acquirePermit(mallory, name, { permits: 2 })).rejects.toMatchObject({ code: 'ZK_NOAUTH' });
    expect(permit.held).toBe(true);
    await permit.release();
    expect(await children(name)).toEqual({ waiters: [], slots: [] });
  });
});
