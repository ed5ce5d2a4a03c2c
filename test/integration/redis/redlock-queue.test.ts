// Redlock's waiting stays live when the joins of its waiters reach the nodes
// in different orders (each waiter's requests to five nodes travel five
// connections; a loaded machine or a network orders them differently per
// node). A release reserves the lock on each node for the waiter that node
// lists first: with a FIFO list per node those were different waiters, none
// with a majority, and each failed attempt handed its nodes on to the next
// waiter of each list, again a different one per node (the scale bench's
// 1,001 contenders joining at once got 73 grants in 170 s). The waiters here
// reach each node after delays of this file's own clients, chosen so that
// no two nodes see the same waiter first (a Latin square). Against the five
// real nodes of FK_REDLOCK; nothing is timed beyond a liveness bound far
// above what the grants take (well under a second each on a quiet machine).
import { afterEach, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { MAX_TTL_MS } from '../../../src/sources/redis/options.js';
import { acquireLock, type RedisClient } from '../../../src/sources/redis/index.js';
import { lockKeys } from '../../../src/sources/redis/scripts.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { RedisPool, holdRedisFaultsForFile, onPort, redlockPorts, redlockUrls } from './helpers.js';

const pool = new RedisPool();
afterEach(() => pool.closeAll());
// Every node must answer: no other file's node faults meanwhile.
holdRedisFaultsForFile();

/** Every command through `client` sent `ms` later (the same delay for all keeps their order on the connection). */
function delayed(client: Redis, ms: number): RedisClient {
  return {
    call: (command, args) => new Promise((resolve) => setTimeout(resolve, ms)).then(() => client.call(command, args)),
    duplicate: (override) => client.duplicate(override),
    options: client.options,
  };
}

/** Clients to the five nodes whose delays rotate with `row`: row r reaches node k after ((r + k) mod 5) * stepMs. */
function rotated(row: number, stepMs: number): RedisClient[] {
  const urls = redlockUrls();
  return urls.map((u, k) => delayed(pool.open(u), ((row + k) % urls.length) * stepMs));
}

// Node timeouts far above the delays and any stall of a loaded machine: a timeout would split the rounds for another reason.
const SETTINGS = { ttlMs: 20_000, nodeTimeoutMs: 2_000 } as const;
const STEP_MS = 60;
// Far above what the grants take (five: about a second; forty: about 12 s, the delays' round trips, on a quiet machine).
const LIVENESS_MS = 30_000;

const listed = async (port: number, name: string): Promise<number> => onPort<number>(port, 'ZCARD', lockKeys(name)[2]);

describe('Redlock waiters whose joins reach the nodes in different orders', () => {
  it('five waiters, each first on another node: all five get the lock, one after the other', async () => {
    const name = uniqueLockName('latin');
    const holder = await acquireLock(pool.redlock(), name, SETTINGS);
    const granted: number[] = [];
    const waiters = Array.from({ length: 5 }, (_, i) =>
      acquireLock(rotated(i, STEP_MS), name, { ...SETTINGS, timeoutMs: LIVENESS_MS }).then(async (lock) => {
        granted.push(i);
        expect(lock.token).toBeGreaterThan(holder.token);
        await lock.release();
        return lock.token;
      }),
    );
    for (const w of waiters) w.catch(() => {});
    await until(async () => (await Promise.all(redlockPorts().map((p) => listed(p, name)))).every((n) => n === 5), 'all five waiters listed on every node');
    await holder.release();
    const tokens = await within(Promise.all(waiters), LIVENESS_MS, `five grants (${granted.length} so far)`);
    expect(new Set(tokens).size).toBe(5);
    expect([...granted].sort()).toEqual([0, 1, 2, 3, 4]);
  }, 3 * LIVENESS_MS);

  it('40 contenders joining at once over five sessions, each session first on another node: every one is granted', async () => {
    const name = uniqueLockName('storm');
    const holder = await acquireLock(pool.redlock(), name, SETTINGS);
    const sessions = Array.from({ length: 5 }, (_, s) => rotated(s, STEP_MS));
    let granted = 0;
    let last = holder.token;
    const contenders = Array.from({ length: 40 }, (_, i) =>
      acquireLock(sessions[i % 5] as RedisClient[], name, { ...SETTINGS, timeoutMs: 4 * LIVENESS_MS }).then(async (lock) => {
        granted++;
        // One holder at a time, tokens growing: the release comes before the next grant.
        expect(lock.token).toBeGreaterThan(last);
        last = lock.token;
        await lock.release();
      }),
    );
    for (const c of contenders) c.catch(() => {});
    await until(async () => (await Promise.all(redlockPorts().map((p) => listed(p, name)))).every((n) => n >= 20), 'the contenders listed on every node', LIVENESS_MS);
    await holder.release();
    await within(Promise.all(contenders), 3 * LIVENESS_MS, `40 grants (${granted} so far)`);
    expect(granted).toBe(40);
  }, 6 * LIVENESS_MS);

  it('a waiter\'s entry stays within 64 bytes (the longest name, TTL and handoff): each node keeps the waiter set compact (a listpack)', async () => {
    const name = uniqueLockName('compact') + 'x'.repeat(400);
    const longest = { ttlMs: MAX_TTL_MS, nodeTimeoutMs: MAX_TTL_MS - 1 };
    const holder = await acquireLock(pool.redlock(), name, longest);
    const waiting = acquireLock(pool.redlock(), name, { ...longest, timeoutMs: LIVENESS_MS });
    waiting.catch(() => {});
    await until(async () => (await Promise.all(redlockPorts().map((p) => listed(p, name)))).every((n) => n === 1), 'the waiter listed on every node');
    for (const port of redlockPorts()) {
      const [entry] = await onPort<string[]>(port, 'ZRANGE', lockKeys(name)[2], 0, 0);
      expect(Buffer.byteLength(entry ?? '')).toBeLessThanOrEqual(64);
      expect(await onPort(port, 'OBJECT', 'ENCODING', lockKeys(name)[2])).toBe('listpack');
    }
    await holder.release();
    const next = await within(waiting, LIVENESS_MS, 'the waiter\'s grant');
    await next.release();
  }, 3 * LIVENESS_MS);
});
