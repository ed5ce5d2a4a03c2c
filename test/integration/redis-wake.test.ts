// fencekeeper/redis: how a release reaches a waiter, on the real servers (the
// single instance on FK_REDIS, Redlock on the five nodes of FK_REDLOCK).
// A waiter's subscriber must work with the client options users set
// (ioredis's `enableOfflineQueue: false`).
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Redis, type RedisOptions } from 'ioredis';
import { acquireLock, type RedisTarget } from '../../adapters/redis/index.js';
import { WAKE_CHANNEL, lockKeys } from '../../adapters/redis/scripts.js';
import { uniqueLockName } from '../helpers/unique.js';
import { until } from '../helpers/wait.js';
import { holdRedisFaults, hostPort, onPort, redlockUrls, singleUrl } from './redis-helpers.js';

const opened: Redis[] = [];
afterEach(() => {
  for (const c of opened.splice(0)) c.disconnect();
});
// Every node must answer here: no other file's node faults meanwhile.
let giveBack: (() => Promise<void>) | undefined;
beforeAll(async () => {
  giveBack = await holdRedisFaults();
}, 11 * 60_000);
afterAll(async () => giveBack?.(), 120_000);

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
        const entries = await onPort<string[]>(port, 'LRANGE', lockKeys(name)[2], 0, -1);
        if (entries.length < count) continue;
        const subscribed = await Promise.all(entries.map(async (e) => (await onPort<[string, number]>(port, 'PUBSUB', 'NUMSUB', WAKE_CHANNEL + e.split(' ')[0]))[1]));
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
});
