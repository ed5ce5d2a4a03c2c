// The read-write lock recipe against a real standalone ZooKeeper: readers
// overlap and writers are alone (counted over 8 clients x 25 grants), the
// token rule (a writer's token is larger than every grant before it), arrival
// order with no writer starvation, each waiter watching only what it waits
// for (one wake-up per release), nothing left behind by aborts, timeouts and
// the try-forms, a lost create reply adopted, and a writer whose session
// expired refused by a PostgreSQL fence.
import diagnostics from 'node:diagnostics_channel';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError, LockTimeoutError, StaleTokenError } from '../../../src/errors.js';
import { expireSession } from '../../../src/testing/expire-session.js';
import type { ZooKeeperLock as Lock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { acquireReadLock, acquireWriteLock, tryAcquireReadLock, tryAcquireWriteLock, RW_LOCKS_ROOT } from '../../../src/sources/zookeeper/recipes/rw-lock.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { queuePath } from '../../../src/sources/zookeeper/recipes/queue-path.js';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import type { FencingToken } from '../../../src/token.js';
import { migrate, withFence } from '../../../adapters/postgres/index.js';
import { adminPool, createSchema, dropSchema, newPool, uniqueName } from '../postgres/helpers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';
import { queueChildren } from './lock-helpers.js';

const file = new StandaloneFile();
const { server, clients } = file;

const parentOf = (name: string): string => `${RW_LOCKS_ROOT}/${name}`;
const childOf = (lock: Lock): string => lock.path.slice(lock.path.lastIndexOf('/') + 1);

/** The queue's children in arrival order (by sequence suffix). */
async function queue(name: string): Promise<string[]> {
  const children = await queueChildren(file.admin, parentOf(name));
  return children.sort((a, b) => Number(a.slice(-10)) - Number(b.slice(-10)));
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('readers share, writers are alone, tokens', () => {
  it('8 clients x 25 mixed grants: readers overlap, a writer holds alone, a writer\'s token is larger than every grant before it', async () => {
    const name = uniqueLockName('rwmix');
    const zks = await clients.many(8, server);
    let readers = 0;
    let writers = 0;
    let maxReaders = 0;
    const violations: string[] = [];
    /** Every grant in the order our process saw it granted. */
    const granted: { kind: 'read' | 'write'; token: FencingToken }[] = [];
    /** The largest token of a writer already released. */
    let maxReleasedWrite = 0n;
    await Promise.all(
      zks.map(async (zk, client) => {
        for (let i = 0; i < 25; i++) {
          const write = (client + i) % 4 === 0;
          const lock = write ? await acquireWriteLock(zk, name) : await acquireReadLock(zk, name);
          if (write) {
            writers++;
            if (writers > 1 || readers > 0) violations.push(`writer with ${writers - 1} writers and ${readers} readers`);
            // Every grant before a writer's, read or write, has a smaller token.
            for (const g of granted) if (g.token >= lock.token) violations.push(`writer ${lock.token} after ${g.kind} ${g.token}`);
          } else {
            readers++;
            maxReaders = Math.max(maxReaders, readers);
            if (writers > 0) violations.push(`reader with a writer`);
            // Larger than every writer's before it.
            for (const g of granted) if (g.kind === 'write' && g.token >= lock.token) violations.push(`reader ${lock.token} after writer ${g.token}`);
          }
          // Larger than every writer already released. (Not every reader: readers
          // granted together by one writer's release may see their grants here in
          // any order, one of them released before another's grant arrives.)
          if (lock.token <= maxReleasedWrite) violations.push(`${write ? 'writer' : 'reader'} ${lock.token} after a released writer ${maxReleasedWrite}`);
          if (!lock.held) violations.push('granted but not held');
          expect(lock.sequencer.kind).toBe(write ? 'write' : 'read');
          granted.push({ kind: write ? 'write' : 'read', token: lock.token });
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
    expect(granted.filter((g) => g.kind === 'write')).toHaveLength(50);
    expect(maxReaders).toBeGreaterThan(1);
    expect(await queue(name)).toEqual([]);
  });

  it('read, write and plain locks of one name are separate namespaces', async () => {
    const name = uniqueLockName('rwns');
    const zk = await clients.connect(server);
    const source = zookeeperSource(zk);
    const plain = await source.acquireLock(name);
    const write = await source.tryAcquireWriteLock(name);
    expect(write).not.toBeNull();
    expect(plain.sequencer.kind).toBe('lock');
    expect(write!.sequencer).toMatchObject({ kind: 'write', name });
    expect(write!.path.startsWith(`${parentOf(name)}/`)).toBe(true);
    expect(queuePath('rwlock', name)).toBe(parentOf(name));
    expect(await source.tryAcquireReadLock(name)).toBeNull();
    await write!.release();
    const read = await source.tryAcquireReadLock(name);
    expect(read!.sequencer).toMatchObject({ kind: 'read', name });
    await Promise.all([read!.release(), plain.release()]);
  });
});

describe('arrival order, no writer starvation', () => {
  it('a reader arriving after a waiting writer waits behind it; readers before the writer share', async () => {
    const name = uniqueLockName('rwfifo');
    const [a, b, c, d] = await clients.many(4, server);
    const r1 = await acquireReadLock(a!, name);
    const r2 = await acquireReadLock(b!, name); // shares with r1
    const order: string[] = [];
    const w = acquireWriteLock(c!, name).then((lock) => (order.push('w'), lock));
    await until(async () => (await queue(name)).length === 3, 'the writer queued');
    // Behind the waiting writer: no read lock, though only readers hold.
    expect(await tryAcquireReadLock(d!, name)).toBeNull();
    const r3 = acquireReadLock(d!, name).then((lock) => (order.push('r3'), lock));
    await until(async () => (await queue(name)).length === 4, 'the late reader queued');
    await r1.release();
    await pause(50);
    expect(order).toEqual([]);
    await r2.release();
    const writer = await w;
    expect(writer.held).toBe(true);
    await pause(50);
    expect(order).toEqual(['w']);
    await writer.release();
    const reader = await r3;
    expect(order).toEqual(['w', 'r3']);
    expect(reader.token > writer.token).toBe(true);
    await reader.release();
    expect(await queue(name)).toEqual([]);
  });

  it('writers are granted in arrival order among themselves and behind earlier readers', async () => {
    const name = uniqueLockName('rwfifo2');
    const zks = await clients.many(6, server);
    const first = await acquireWriteLock(zks[0]!, name);
    const order: number[] = [];
    const waits: Promise<Lock>[] = [];
    for (let i = 1; i < 6; i++) {
      const acquire = i % 2 === 0 ? acquireReadLock : acquireWriteLock;
      waits.push(acquire(zks[i]!, name).then((lock) => (order.push(i), lock)));
      await until(async () => (await queue(name)).length === i + 1, `waiter ${i} queued`);
    }
    await first.release();
    for (const wait of waits) await (await wait).release();
    expect(order).toEqual([1, 2, 3, 4, 5]);
  });
});

describe('each waiter watches only what it waits for', () => {
  it('one wake-up per release: a reader waits for the nearest writer ahead, a writer for its predecessor', async () => {
    const name = uniqueLockName('rwherd');
    const parent = parentOf(name);
    const zks = await clients.many(7, server);
    // Queue: R0 R1 (holding) W2 R3 R4 W5 R6: W2 waits for R1, R3 and R4 for W2, W5 for R4, R6 for W5.
    const kinds = ['r', 'r', 'w', 'r', 'r', 'w', 'r'] as const;
    const held: Lock[] = [];
    const grants = new Map<number, Lock>();
    const waits: Promise<void>[] = [];
    for (let i = 0; i < kinds.length; i++) {
      const acquire = kinds[i] === 'w' ? acquireWriteLock : acquireReadLock;
      const p = acquire(zks[i]!, name).then((lock) => void grants.set(i, lock));
      if (i < 2) {
        await p;
        held.push(grants.get(i)!);
      } else {
        waits.push(p);
        await until(async () => (await queue(name)).length === i + 1, `node ${i} queued`);
      }
    }
    const nodes = await queue(name);
    const sessions = new Map(zks.map((zk, i) => [zk.sessionId, i]));
    const events: { client: number; path: string; type: string }[] = [];
    const onWatch = (message: unknown): void => {
      const m = message as { sessionId: bigint; type: string; path: string };
      const client = sessions.get(m.sessionId);
      if (client !== undefined && m.path.startsWith(`${parent}/`)) events.push({ client, path: m.path.slice(parent.length + 1), type: m.type });
    };
    /** After a round trip on every session, the events that woke a waiter (not a holder's own-node watch). */
    const wakeUps = async (): Promise<{ client: number; path: string }[]> => {
      await Promise.all(zks.map((zk) => zk.exists(parent)));
      const woken = events.splice(0).filter((e) => e.path !== nodes[e.client]).map(({ client, path }) => ({ client, path }));
      return woken.sort((x, y) => x.client - y.client);
    };
    diagnostics.subscribe('fencekeeper:zookeeper:watch', onWatch);
    try {
      // R0 goes: nobody waited for it.
      await held[0]!.release();
      expect(await wakeUps()).toEqual([]);
      // R1 goes: W2, its only watcher, wakes and holds.
      await held[1]!.release();
      await until(() => grants.has(2), 'W2 granted');
      expect(await wakeUps()).toEqual([{ client: 2, path: nodes[1] }]);
      // W2 goes: R3 and R4 wake (both granted); W5 and R6 do not.
      await grants.get(2)!.release();
      await until(() => grants.has(3) && grants.has(4), 'R3 and R4 granted');
      expect(await wakeUps()).toEqual([{ client: 3, path: nodes[2] }, { client: 4, path: nodes[2] }]);
      // R3 goes: W5 waits for R4, not R3: nobody wakes.
      await grants.get(3)!.release();
      expect(await wakeUps()).toEqual([]);
      expect(grants.has(5)).toBe(false);
      // R4 goes: W5 wakes and holds; R6 still waits for W5.
      await grants.get(4)!.release();
      await until(() => grants.has(5), 'W5 granted');
      expect(await wakeUps()).toEqual([{ client: 5, path: nodes[4] }]);
      await grants.get(5)!.release();
      await until(() => grants.has(6), 'R6 granted');
      expect(await wakeUps()).toEqual([{ client: 6, path: nodes[5] }]);
    } finally {
      diagnostics.unsubscribe('fencekeeper:zookeeper:watch', onWatch);
    }
    await grants.get(6)!.release();
    await Promise.all(waits);
    expect(await queue(name)).toEqual([]);
  });

  it('a waiting writer that gives up: the reader behind it waits for the writer ahead of it instead', async () => {
    const name = uniqueLockName('rwgiveup');
    const [a, b, c] = await clients.many(3, server);
    const w1 = await acquireWriteLock(a!, name);
    const ac = new AbortController();
    const w2 = acquireWriteLock(b!, name, { signal: ac.signal });
    await until(async () => (await queue(name)).length === 2, 'W2 queued');
    let granted: Lock | null = null;
    const r = acquireReadLock(c!, name).then((lock) => (granted = lock));
    await until(async () => (await queue(name)).length === 3, 'R queued');
    ac.abort();
    await expect(w2).rejects.toMatchObject({ name: 'AbortError' });
    await pause(50);
    expect(granted).toBeNull();
    await w1.release();
    const reader = await r;
    expect(reader.held).toBe(true);
    await reader.release();
    expect(await queue(name)).toEqual([]);
  });
});

describe('nothing is left behind', () => {
  it('timeouts and aborts of readers and writers remove their nodes', async () => {
    const name = uniqueLockName('rwleave');
    const [a, b] = await clients.many(2, server);
    const writer = await acquireWriteLock(a!, name);
    await expect(acquireReadLock(b!, name, { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    await expect(acquireWriteLock(b!, name, { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    const ac = new AbortController();
    const waiting = acquireReadLock(b!, name, { signal: ac.signal });
    await until(async () => (await queue(name)).length === 2, 'the reader queued');
    const why = new Error('caller gave up');
    ac.abort(why);
    await expect(waiting).rejects.toBe(why);
    // An abort with the create in flight.
    const ac2 = new AbortController();
    const inFlight = acquireWriteLock(b!, name, { signal: ac2.signal });
    ac2.abort();
    await expect(inFlight).rejects.toMatchObject({ name: 'AbortError' });
    expect(await tryAcquireWriteLock(b!, name)).toBeNull();
    expect(await tryAcquireReadLock(b!, name)).toBeNull();
    expect(await queue(name)).toEqual([childOf(writer)]);
    await writer.release();
    expect(await queue(name)).toEqual([]);
    const reader = await acquireReadLock(a!, name);
    expect(await tryAcquireWriteLock(b!, name)).toBeNull();
    expect(await queue(name)).toEqual([childOf(reader)]);
    await reader.release();
  });

  it('bad input is refused before any I/O', async () => {
    const zk = await clients.connect(server);
    await expect(acquireReadLock(zk, '/abs')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquireWriteLock(zk, 'x', { timeoutMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquireWriteLock(zk, 'x', { lockDelayMs: 10 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await file.admin.exists(parentOf('x'))).toBeNull();
  });

  it('a lost create reply: the waiting reader adopts its node, one node for one acquire', async () => {
    const name = uniqueLockName('rwlost');
    const parent = parentOf(name);
    const { proxy, zk } = await file.proxied();
    const other = await clients.connect(server);
    const writer = await acquireWriteLock(other, name);
    proxy.loseReplyTo(`${parent}/`);
    const acquiring = acquireReadLock(zk, name);
    await until(() => proxy.repliesLost === 1, 'the create2 reply to be dropped');
    await until(async () => (await queue(name)).length === 2, 'our node in the queue');
    const ours = (await queue(name))[1]!;
    await writer.release();
    const reader = await acquiring;
    expect(childOf(reader)).toBe(ours);
    expect(await queue(name)).toEqual([ours]);
    await reader.release();
    expect(await queue(name)).toEqual([]);
  });
});

describe('a holder whose session expired', () => {
  const admin = adminPool();
  const schema = uniqueName('rwfence');
  const pool = newPool(schema, uniqueName('rwfence'), 4);
  beforeAll(async () => {
    await createSchema(admin, schema);
    await migrate(pool);
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(admin, schema);
  });

  it('held turns false, the next writer is granted, and the stale writer\'s write is refused by the fence', async () => {
    const name = uniqueLockName('rwexpire');
    const resource = `rwexpire/${name}`;
    const [a, b, c] = await clients.many(3, server);
    const write = (token: FencingToken, value: string) =>
      withFence(pool, resource, token, (client: pg.PoolClient) => client.query('SELECT $1::text', [value]));
    const stale = await acquireWriteLock(a!, name);
    await within(write(stale.token, 'first'), 20_000, 'the first fenced write');
    // One join at a time: joins from two clients reach the server in either order, and the order is the point.
    const readerWaits = acquireReadLock(b!, name);
    await until(async () => (await queue(name)).length === 2, 'a reader waiting');
    const writerWaits = acquireWriteLock(c!, name);
    await until(async () => (await queue(name)).length === 3, 'a reader and a writer waiting');
    await within(expireSession(a! as ZooKeeperClient), 20_000, 'the session expiry');
    await until(() => stale.signal.aborted, 'the stale writer to step down');
    expect(stale.held).toBe(false);
    // Whichever the client heard first: the session's end, or its node's deletion (a reconnect can win the race to the server).
    expect(['session_expired', 'node_deleted']).toContain((stale.signal.reason as LockLostError).reason);
    // The reader behind it is granted first (arrival order), then the writer.
    const reader = await within(readerWaits, 20_000, 'the reader behind the expired writer');
    expect(reader.token > stale.token).toBe(true);
    await reader.release();
    const next = await within(writerWaits, 20_000, 'the next writer');
    expect(next.token > reader.token).toBe(true);
    await within(write(next.token, 'second'), 20_000, 'the next writer\'s fenced write');
    // The paused writer wakes up and writes with its old token: refused.
    await expect(write(stale.token, 'late')).rejects.toBeInstanceOf(StaleTokenError);
    await next.release();
    expect(await queue(name)).toEqual([]);
  });
});
