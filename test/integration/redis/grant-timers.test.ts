// The timers of the single-instance lock's grants on one client: each
// grant's watchdog renews it at a third of its own TTL (one tick per grant,
// started again after each renewal's answer), whatever the client's other grants
// do, and the client's step-down clock ends each grant at its own deadline.
// The uncontended acquire's own path (its first attempt, without the waiting
// loop): a signal that aborts while it is under way, and a client's first
// grant, which waits for the source's identity. And the acquire scripts: one
// integer per reply, and loaded again when the server forgot them.
import { afterEach, describe, expect, it } from 'vitest';
import type { LockLostError } from '../../../src/errors.js';
import { acquireLock, lockStatus, tryAcquireLock } from '../../../src/sources/redis/index.js';
import { ACQUIRE, ACQUIRE_FIRST, lockKeys } from '../../../src/sources/redis/scripts.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { within } from '../../helpers/wait.js';
import { RedisPool, holdRedisFaultsForFile, hostPort, onPort, singleUrl } from './helpers.js';

const pool = new RedisPool();
afterEach(() => pool.closeAll());
// SCRIPT FLUSH below makes every client of the single node load its scripts again: no fault test meanwhile.
holdRedisFaultsForFile();
const singlePort = (): number => hostPort(singleUrl()).port;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The grant's key is still there with its value, and carries a TTL (the watchdog extended it). */
async function stillOurs(name: string, token: bigint): Promise<void> {
  expect((await lockStatus(pool.single(), name)).holder?.token).toBe(token);
  expect(await onPort<number>(singlePort(), 'PTTL', lockKeys(name)[0])).toBeGreaterThan(0);
}

// Short enough that a grant without renewals is gone well within RENEWED_FOR_MS (a watchdog
// renewing only once would lose it at a third of the TTL + the TTL, 3.2 s), long enough that a
// loaded machine's stall does not outlast the margin between two renewals (a 900 ms TTL did in CI).
const SHORT_TTL_MS = 2400;
const RENEWED_FOR_MS = 5000;

describe('the watchdog of each grant', () => {
  it('a short-TTL grant beside a long one on the same client is renewed again and again', async () => {
    const client = pool.single();
    const long = await acquireLock(client, uniqueLockName('long'), { ttlMs: 60_000 });
    const name = uniqueLockName('short');
    const short = await acquireLock(client, name, { ttlMs: SHORT_TTL_MS, nodeTimeoutMs: 800 });
    // Without renewals the key is gone after SHORT_TTL_MS and the holding steps down before that.
    await sleep(RENEWED_FOR_MS);
    expect(short.held).toBe(true);
    await stillOurs(name, short.token);
    await short.release();
    await long.release();
  });

  it('a grant after a released short-TTL one on the same client is renewed', async () => {
    const client = pool.single();
    const first = await acquireLock(client, uniqueLockName('first'), { ttlMs: SHORT_TTL_MS, nodeTimeoutMs: 800 });
    await first.release();
    const name = uniqueLockName('next');
    const next = await acquireLock(client, name, { ttlMs: SHORT_TTL_MS, nodeTimeoutMs: 800 });
    await sleep(RENEWED_FOR_MS);
    expect(next.held).toBe(true);
    await stillOurs(name, next.token);
    await next.release();
  });

  it('releasing one grant leaves the renewals of the others', async () => {
    const client = pool.single();
    const a = await acquireLock(client, uniqueLockName('a'), { ttlMs: SHORT_TTL_MS, nodeTimeoutMs: 800 });
    const name = uniqueLockName('b');
    const b = await acquireLock(client, name, { ttlMs: SHORT_TTL_MS, nodeTimeoutMs: 800 });
    await a.release();
    await sleep(RENEWED_FOR_MS);
    expect(b.held).toBe(true);
    await stillOurs(name, b.token);
    await b.release();
  });
});

describe('the client\'s step-down clock', () => {
  it('a short grant beside a long one steps down at its own deadline, not the long one\'s', async () => {
    const proxy = await TcpProxy.to(`127.0.0.1:${singlePort()}`);
    try {
      const client = pool.open(`redis://127.0.0.1:${proxy.port}`);
      // The clock's timer is armed for the long grant's deadline, some 45 s ahead, when the short one comes.
      const long = await acquireLock(client, uniqueLockName('long'), { ttlMs: 60_000 });
      const lock = await acquireLock(client, uniqueLockName('short'), { ttlMs: 900, safetyMarginMs: 200, nodeTimeoutMs: 100 });
      proxy.blackhole();
      const aborted = new Promise<void>((r) => lock.signal.addEventListener('abort', () => r()));
      await within(aborted, 10_000, 'the short grant\'s step-down deadline');
      expect((lock.signal.reason as LockLostError).reason).toBe('deadline');
      expect(lock.held).toBe(false);
      await long.release();
    } finally {
      await proxy.close();
    }
  });
});

describe('the first attempt of an acquire', () => {
  it('granted after its signal aborted: given back at once, and the acquire rejects with the signal\'s reason', async () => {
    const name = uniqueLockName('late');
    const stop = new AbortController();
    const acquiring = acquireLock(pool.single(), name, { signal: stop.signal });
    stop.abort(new Error('gave up')); // the script is on its way: the grant arrives after this
    expect(((await acquiring.catch((e: unknown) => e)) as Error).message).toBe('gave up');
    expect(await onPort(singlePort(), 'EXISTS', lockKeys(name)[0])).toBe(0);
    const next = await tryAcquireLock(pool.single(), name);
    expect(next).not.toBeNull();
    await next?.release();
  });

  it('a client\'s first grant is handed out with its sequencer: the source\'s identity is read first', async () => {
    const client = pool.single();
    const lock = await acquireLock(client, uniqueLockName('first'));
    expect(lock.sequencer.source).toEqual({ kind: 'redis', id: await onPort(singlePort(), 'GET', 'fencekeeper:source-id') });
    await lock.release();
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
    expect(await queued('b owner', 'place chan b1')).toBeLessThanOrEqual(-3);
    expect(await queued('b owner', 'place chan b1')).toBeLessThanOrEqual(-3);
    expect(await onPort(port, 'ZRANGE', waitersKey, 0, -1)).toEqual(['place chan b1']);
    await onPort(port, 'DEL', lockKey);
    expect(await queued('b owner', 'place chan b1')).toBe(43);
    expect(await onPort(port, 'EXISTS', waitersKey)).toBe(0);
    await onPort(port, 'SET', lockKey, 'not ours'); // no TTL: set by someone else
    expect(await first('c owner')).toBe(-2);
    expect(await tryAcquireLock(pool.single(), name)).toBeNull();
    await onPort(port, 'DEL', lockKey, counterKey);
  });

  it('a server that forgot the scripts (SCRIPT FLUSH): acquire, renewal and release send them again with EVAL', async () => {
    const client = pool.single();
    const name = uniqueLockName('flushed');
    const warm = await acquireLock(client, name, { ttlMs: 900, nodeTimeoutMs: 300 });
    await warm.release();
    await onPort(singlePort(), 'SCRIPT', 'FLUSH');
    const lock = await acquireLock(client, name, { ttlMs: 900, nodeTimeoutMs: 300 });
    expect(lock.token).toBeGreaterThan(warm.token);
    await onPort(singlePort(), 'SCRIPT', 'FLUSH');
    await sleep(1500); // renewals every 300 ms, the first after the flush by EVAL
    expect(lock.held).toBe(true);
    await stillOurs(name, lock.token);
    await onPort(singlePort(), 'SCRIPT', 'FLUSH');
    await lock.release();
    expect(await onPort(singlePort(), 'EXISTS', lockKeys(name)[0])).toBe(0);
  });
});
