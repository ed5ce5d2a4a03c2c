// What every source does with a lock name that is not well-formed Unicode
// (a lone UTF-16 surrogate), against the real servers: refused with
// INVALID_ARGUMENT before any request, by the one rule every source's name
// check shares (assertLockName). Sent, such a name would reach Redis or etcd
// as UTF-8 with U+FFFD in its place: "\ud800" and "\udc00" would be one lock
// with one token counter, and the granted lock's sequencer would throw.
// Also the Redis TTL's upper bound, refused at the options check.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../../src/errors.js';
import { acquireLock as redisAcquire, redisSource, tryAcquireLock as redisTryAcquire } from '../../../src/sources/redis/index.js';
import { lockKeys } from '../../../src/sources/redis/scripts.js';
import { SOURCES, type OpenSource } from '../../helpers/sources.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { RedisPool, counting, hostPort, onPort, singleUrl } from '../redis/helpers.js';

const LONE = [['a high surrogate', '\ud800'], ['a low surrogate', '\udc00'], ['a reversed pair', '\udc00\ud800']] as const;

describe.each(SOURCES.map((s) => [s.kind, s] as const))('%s: a lock name with a lone surrogate', (_kind, under) => {
  let open: OpenSource;
  beforeAll(async () => {
    open = await under.open();
  }, 60_000);
  afterAll(async () => open?.close(), 60_000);

  it.each(LONE)('%s is refused with INVALID_ARGUMENT by acquire and tryAcquire', async (_what, bad) => {
    const name = `${uniqueLockName('lone')}${bad}`;
    for (const call of [() => open.source.acquireLock(name, { timeoutMs: 1000 }), () => open.source.tryAcquireLock(name)]) {
      const error = await call().then(
        (lock) => lock,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).code).toBe('INVALID_ARGUMENT');
      expect((error as Error).message).toMatch(/well-formed Unicode: a lone surrogate/);
    }
    // The same name with the surrogate as a character of its own (its escape): granted, and its sequencer names it.
    const good = name.replace(bad, 'ok');
    const lock = await open.source.acquireLock(good, { timeoutMs: 20_000 });
    try {
      expect(lock.sequencer.name).toBe(good);
    } finally {
      await lock.release();
    }
  }, 60_000);
});

describe('Redis: before any command', () => {
  const pool = new RedisPool();
  afterEach(() => pool.closeAll());
  const port = (): number => hostPort(singleUrl()).port;

  it('"\\ud800" and "\\udc00" are refused, not granted as one lock under the key of U+FFFD', async () => {
    const prefix = uniqueLockName('pair');
    const client = pool.single();
    await expect(redisAcquire(client, `${prefix}\ud800`, { timeoutMs: 1000 })).rejects.toThrow(InvalidArgumentError);
    await expect(redisTryAcquire(client, `${prefix}\udc00`)).rejects.toThrow(InvalidArgumentError);
    // Nothing reached the server: no lock key, no token counter under the name the server would have made of them.
    const [lockKey, counterKey] = lockKeys(`${prefix}\ufffd`);
    expect(await onPort(port(), 'EXISTS', lockKey, counterKey)).toBe(0);
  });

  it('a TTL beyond a timer\'s range (2^31 - 1 ms, 24.8 days) is refused by acquire and by redisSource', async () => {
    const name = uniqueLockName('ttl');
    const client = pool.single();
    const thirtyDays = 30 * 24 * 3600 * 1000;
    for (const ttlMs of [thirtyDays, 2 ** 31]) {
      const error = await redisAcquire(client, name, { ttlMs }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toMatch(/ttlMs must be at most 2147483647/);
      expect(() => redisSource(client, { ttlMs })).toThrow(/ttlMs must be at most 2147483647/);
    }
    expect(await onPort(port(), 'EXISTS', ...lockKeys(name))).toBe(0);
    // The largest TTL a timer keeps is granted, and its waiter sleeps instead of polling:
    // in 2 s, a handful of scripts at most (the issue saw 70-178 with a 30-day TTL).
    const lock = await redisAcquire(client, name, { ttlMs: 2 ** 31 - 1, nodeTimeoutMs: 10_000 });
    try {
      let scripts = 0;
      const waiterClient = counting(pool.single(), () => scripts++);
      const waiter = redisAcquire(waiterClient, name, { ttlMs: 2 ** 31 - 1, nodeTimeoutMs: 10_000, timeoutMs: 2000 }).catch((e: unknown) => e);
      const warnings: string[] = [];
      const onWarning = (w: Error): void => void warnings.push(w.name);
      process.on('warning', onWarning);
      try {
        expect((await waiter as Error).name).toBe('LockTimeoutError');
      } finally {
        process.off('warning', onWarning);
      }
      expect(warnings).not.toContain('TimeoutOverflowWarning');
      // Every command the waiter sent is counted: its few attempts, not one every millisecond.
      expect(scripts).toBeLessThan(10);
    } finally {
      await lock.release();
    }
  }, 60_000);
});
