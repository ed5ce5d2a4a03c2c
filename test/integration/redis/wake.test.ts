// fencekeeper/redis: how a release reaches a waiter, on the real servers (the
// single instance on FK_REDIS, Redlock on the five nodes of FK_REDLOCK).
// A waiter's subscriber must work with the client options users set
// (ioredis's `enableOfflineQueue: false`), and a release hands the lock to
// the waiter it wakes (a reservation): a holder that asks again at once
// comes after it, and a woken waiter that leaves hands the lock on.
import { afterEach, describe, expect, it } from 'vitest';
import { Redis, type RedisOptions } from 'ioredis';
import { acquireLock, lockStatus, tryAcquireLock, type RedisClient, type RedisLock, type RedisTarget } from '../../../src/sources/redis/index.js';
import { ACQUIRE, CLAIM, RESERVED, WAKE_CHANNEL, lockKeys } from '../../../src/sources/redis/scripts.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { holdRedisFaultsForFile, hostPort, onPort, redlockUrls, singleUrl } from './helpers.js';

const opened: Redis[] = [];
afterEach(() => {
  for (const c of opened.splice(0)) c.disconnect();
});
// Every node must answer here: no other file's node faults meanwhile.
holdRedisFaultsForFile();

/** A connected client (without an offline queue, a command before 'ready' fails). */
async function open(url: string, extra: RedisOptions = {}): Promise<Redis> {
  const c = new Redis({ ...hostPort(url), retryStrategy: () => 50, ...extra });
  c.on('error', () => {});
  opened.push(c);
  if (c.status !== 'ready') await new Promise((resolve) => c.once('ready', resolve));
  return c;
}

const kinds = [
  ['single instance', (): readonly string[] => [singleUrl()]],
  ['Redlock', redlockUrls],
] as const;

async function target(urls: readonly string[], extra?: RedisOptions): Promise<RedisTarget> {
  const clients = await Promise.all(urls.map((u) => open(u, extra)));
  return clients.length === 1 ? (clients[0] as Redis) : clients;
}

/**
 * `count` waiters' entries on every node, each with its wake channel
 * subscribed there: a release now wakes the oldest. (Every node: each
 * attempt of a Redlock waiter reaches all of them, and all refuse it.)
 */
async function queued(urls: readonly string[], name: string, count: number): Promise<void> {
  const ports = urls.map((u) => hostPort(u).port);
  const need = ports.length;
  await until(
    async () => {
      let ready = 0;
      for (const port of ports) {
        const entries = await onPort<string[]>(port, 'ZRANGE', lockKeys(name)[2], 0, -1);
        if (entries.length < count) continue;
        const subscribed = await Promise.all(entries.map(async (e) => (await onPort<[string, number]>(port, 'PUBSUB', 'NUMSUB', WAKE_CHANNEL + e.split(' ')[1]))[1]));
        if (subscribed.every((n) => n > 0)) ready++;
      }
      return ready >= need;
    },
    `${count} waiter(s) queued and subscribed on every node`,
  );
}

describe.each(kinds)('%s', (_kind, urls) => {
  it('with ioredis enableOfflineQueue: false, a release wakes the waiter (it does not wait for the holder\'s TTL)', async () => {
    const name = uniqueLockName('offline');
    const holder = await acquireLock(await target(urls(), { enableOfflineQueue: false }), name, { ttlMs: 60_000 });
    // Its own clients: its subscriber is a duplicate() of a client without an offline queue.
    const waiting = acquireLock(await target(urls(), { enableOfflineQueue: false }), name, { ttlMs: 60_000, timeoutMs: 20_000 });
    waiting.catch(() => {});
    await queued(urls(), name, 1);
    await holder.release();
    const next = await waiting;
    expect(next.token).toBeGreaterThan(holder.token);
    await next.release();
  }, 60_000);

  it('a release hands the lock to the waiter it wakes: the holder asking again at once is refused, and granted after it', async () => {
    const name = uniqueLockName('handoff');
    const mine = await target(urls());
    const holder = await acquireLock(mine, name, { ttlMs: 60_000 });
    const order: string[] = [];
    const waiting = acquireLock(await target(urls()), name, { ttlMs: 60_000, timeoutMs: 20_000 }).then((lock) => {
      order.push('waiter');
      return lock;
    });
    waiting.catch(() => {});
    await queued(urls(), name, 1);
    // Sent right behind the release, on the same connections (before the woken waiter can try): the lock is the waiter's.
    const released = holder.release();
    const tried = tryAcquireLock(mine, name, { ttlMs: 60_000 });
    await released;
    expect(await tried).toBeNull();
    const again = acquireLock(mine, name, { ttlMs: 60_000, timeoutMs: 20_000 }).then((lock) => {
      order.push('holder again');
      return lock;
    });
    const next = await waiting;
    await next.release();
    const last = await again;
    expect(order).toEqual(['waiter', 'holder again']);
    expect(next.token).toBeGreaterThan(holder.token);
    expect(last.token).toBeGreaterThan(next.token);
    await last.release();
  }, 60_000);

  it('a woken waiter that leaves before taking the lock hands it on to the next waiter; meanwhile nobody holds it', async () => {
    const name = uniqueLockName('handon');
    const holder = await acquireLock(await target(urls()), name, { ttlMs: 60_000 });
    // The first waiter's attempts stop reaching the server once told to: woken, it never takes its reservation,
    // and they fail when the test says so (a node timeout of 20 s: its reservation, twice that, outlasts the
    // second waiter's timeout, so only a hand-on can grant the second in time, not the reservation's end).
    let hold = false;
    const blocked: Array<(error: Error) => void> = [];
    const acquireScripts = new Set([ACQUIRE.sha, CLAIM.sha]);
    const stalled = (await Promise.all(urls().map((u) => open(u)))).map(
      (c): RedisClient => ({
        call: (command, args) => {
          if (hold && command === 'evalsha' && acquireScripts.has(args[0] as string)) return new Promise((_, reject) => blocked.push(reject));
          return c.call(command, args);
        },
        duplicate: (override) => c.duplicate(override),
        options: c.options,
      }),
    );
    const first = acquireLock(stalled.length === 1 ? (stalled[0] as RedisClient) : stalled, name, { ttlMs: 60_000, nodeTimeoutMs: 20_000 }).catch((e: unknown) => e);
    await queued(urls(), name, 1);
    const second = acquireLock(await target(urls()), name, { ttlMs: 60_000, timeoutMs: 20_000 });
    second.catch(() => {});
    await queued(urls(), name, 2);
    hold = true;
    await holder.release();
    await until(() => blocked.length > 0, 'the first waiter to be woken');
    // Reserved for the first waiter on every node (Redlock's release returns once a majority answered): no grant, no holder.
    const reservation = new RegExp(`^${RESERVED}\\S+ \\S+ 1 40000$`);
    await until(
      async () => (await Promise.all(urls().map((u) => onPort<string | null>(hostPort(u).port, 'GET', lockKeys(name)[0])))).every((v) => reservation.test(v ?? '')),
      'the lock reserved for the first waiter on every node',
      10_000,
    );
    expect((await lockStatus(await target(urls()), name)).holder).toBeNull();
    expect(await tryAcquireLock(await target(urls()), name)).toBeNull();
    // Its attempt fails; leaving, it hands the lock on to the second (asleep until the holder's TTL otherwise).
    for (const reject of blocked) reject(new Error('cut off by the test'));
    expect((await first) as Error).toMatchObject({ code: expect.stringMatching(/^(CONNECTION_LOSS|NO_QUORUM)$/) });
    const next: RedisLock = await second;
    expect(next.token).toBeGreaterThan(holder.token);
    await next.release();
  }, 60_000);
});
