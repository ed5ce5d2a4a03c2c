// What the single-instance lock shares between the grants of one client, so
// that a loop of acquire and release costs no timer per grant: one watchdog
// timer for every grant's renewals, and the step-down clock's one timer, both
// left armed when a grant ends. Each test below holds a grant whose renewal or
// step-down is due before the instant that timer was left armed for (or
// after it), which the timer must be moved for. And the acquire scripts: one
// integer per reply, and loaded again when the server forgot them.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LockLostError } from '../../src/errors.js';
import { acquireLock, lockStatus, tryAcquireLock } from '../../adapters/redis/index.js';
import { ACQUIRE, ACQUIRE_FIRST, lockKeys } from '../../adapters/redis/scripts.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { uniqueLockName } from '../helpers/unique.js';
import { within } from '../helpers/wait.js';
import { RedisPool, holdRedisFaults, hostPort, onPort, singleUrl } from './redis-helpers.js';

const pool = new RedisPool();
afterEach(() => pool.closeAll());
// SCRIPT FLUSH below makes every client of the single node load its scripts again: no fault test meanwhile.
let giveBack: (() => Promise<void>) | undefined;
beforeAll(async () => {
  giveBack = await holdRedisFaults();
}, 11 * 60_000);
afterAll(async () => giveBack?.(), 120_000);
const singlePort = (): number => hostPort(singleUrl()).port;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The grant's key is still there with its value, and carries a TTL (the watchdog extended it). */
async function stillOurs(name: string, token: bigint): Promise<void> {
  expect((await lockStatus(pool.single(), name)).holder?.token).toBe(token);
  expect(await onPort<number>(singlePort(), 'PTTL', lockKeys(name)[0])).toBeGreaterThan(0);
}

describe('one watchdog timer per client', () => {
  it('a short-TTL grant after a long one on the same client is renewed: the timer is moved to the earlier renewal', async () => {
    const client = pool.single();
    const long = await acquireLock(client, uniqueLockName('long'), { ttlMs: 60_000 });
    const name = uniqueLockName('short');
    const short = await acquireLock(client, name, { ttlMs: 600 });
    // Without a renewal the key is gone after 600 ms and the holding steps down before that.
    await sleep(1500);
    expect(short.held).toBe(true);
    await stillOurs(name, short.token);
    await short.release();
    await long.release();
  });

  it('a grant after a released short-TTL one is renewed: the timer left armed finds nothing due and is armed for the next', async () => {
    const client = pool.single();
    const first = await acquireLock(client, uniqueLockName('first'), { ttlMs: 600 });
    await first.release();
    const name = uniqueLockName('next');
    const next = await acquireLock(client, name, { ttlMs: 1500 });
    await sleep(2500);
    expect(next.held).toBe(true);
    await stillOurs(name, next.token);
    await next.release();
  });

  it('releasing one grant leaves the renewals of the others', async () => {
    const client = pool.single();
    const a = await acquireLock(client, uniqueLockName('a'), { ttlMs: 600 });
    const name = uniqueLockName('b');
    const b = await acquireLock(client, name, { ttlMs: 600 });
    await a.release();
    await sleep(1500);
    expect(b.held).toBe(true);
    await stillOurs(name, b.token);
    await b.release();
  });
});

describe('one step-down timer per client', () => {
  it('a short grant after a released long one steps down at its own deadline: the clock\'s timer is moved to the earlier deadline', async () => {
    const proxy = await TcpProxy.to(`127.0.0.1:${singlePort()}`);
    try {
      const client = pool.open(`redis://127.0.0.1:${proxy.port}`);
      // Leaves the client's step-down timer armed some 45 s ahead.
      const long = await acquireLock(client, uniqueLockName('long'), { ttlMs: 60_000 });
      await long.release();
      const lock = await acquireLock(client, uniqueLockName('short'), { ttlMs: 900, safetyMarginMs: 200, nodeTimeoutMs: 100 });
      proxy.blackhole();
      const aborted = new Promise<void>((r) => lock.signal.addEventListener('abort', () => r()));
      await within(aborted, 10_000, 'the short grant\'s step-down deadline');
      expect((lock.signal.reason as LockLostError).reason).toBe('deadline');
      expect(lock.held).toBe(false);
    } finally {
      await proxy.close();
    }
  });
});

describe('the acquire scripts', () => {
  it('answer one integer: the token when granted, -3 - the holder\'s PTTL when refused (-2: a key without a TTL)', async () => {
    const name = uniqueLockName('reply');
    const [lockKey, counterKey, waitersKey] = lockKeys(name);
    const port = singlePort();
    const first = (value: string): Promise<unknown> => onPort(port, 'EVAL', ACQUIRE_FIRST.text, 2, lockKey, counterKey, value, 10_000);
    const queued = (value: string, entry: string): Promise<unknown> => onPort(port, 'EVAL', ACQUIRE.text, 3, lockKey, counterKey, waitersKey, value, 10_000, entry);
    await onPort(port, 'SET', counterKey, '41');
    expect(await first('a owner')).toBe(42);
    const refused = (await first('b owner')) as number;
    expect(refused).toBeLessThanOrEqual(-3);
    expect(-refused - 3).toBeLessThanOrEqual(10_000);
    // Queued: refused and put in the waiter list once; granted and taken out of it.
    expect(await queued('b owner', 'chan b1')).toBeLessThanOrEqual(-3);
    expect(await queued('b owner', 'chan b1')).toBeLessThanOrEqual(-3);
    expect(await onPort(port, 'LRANGE', waitersKey, 0, -1)).toEqual(['chan b1']);
    await onPort(port, 'DEL', lockKey);
    expect(await queued('b owner', 'chan b1')).toBe(43);
    expect(await onPort(port, 'EXISTS', waitersKey)).toBe(0);
    await onPort(port, 'SET', lockKey, 'not ours'); // no TTL: set by someone else
    expect(await first('c owner')).toBe(-2);
    expect(await tryAcquireLock(pool.single(), name)).toBeNull();
    await onPort(port, 'DEL', lockKey, counterKey);
  });

  it('a server that forgot the scripts (SCRIPT FLUSH): acquire, renewal and release send them again with EVAL', async () => {
    const client = pool.single();
    const name = uniqueLockName('flushed');
    const warm = await acquireLock(client, name, { ttlMs: 600 });
    await warm.release();
    await onPort(singlePort(), 'SCRIPT', 'FLUSH');
    const lock = await acquireLock(client, name, { ttlMs: 600 });
    expect(lock.token).toBeGreaterThan(warm.token);
    await onPort(singlePort(), 'SCRIPT', 'FLUSH');
    await sleep(1000); // renewals at 200 ms intervals, the first after the flush by EVAL
    expect(lock.held).toBe(true);
    await stillOurs(name, lock.token);
    await onPort(singlePort(), 'SCRIPT', 'FLUSH');
    await lock.release();
    expect(await onPort(singlePort(), 'EXISTS', lockKeys(name)[0])).toBe(0);
  });
});
