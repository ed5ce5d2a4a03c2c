// fencekeeper/redis against the real servers: the single-instance lock on
// FK_REDIS and Redlock on the five nodes of FK_REDLOCK, none of them faulted
// here (test/integration/redis/faults.test.ts breaks nodes; this file holds
// the set's fault turn so that no other file does meanwhile).
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError, LockTimeoutError } from '../../../src/errors.js';
import type { FencingToken } from '../../../src/token.js';
import { acquireLock, lockStatus, redisSource, tryAcquireLock, type RedisClient, type RedisTarget } from '../../../src/sources/redis/index.js';
import { ACQUIRE, CLAIM, RAISE, lockKeys } from '../../../src/sources/redis/scripts.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { takeTurns } from '../../helpers/sources.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { RedisPool, counting, holdRedisFaultsForFile, hostPort, onPort, redlockPorts, singleUrl } from './helpers.js';

const pool = new RedisPool();
afterEach(() => pool.closeAll());
// These tests count on all five Redlock nodes answering: no other file's node faults meanwhile.
holdRedisFaultsForFile();
const singlePort = (): number => hostPort(singleUrl()).port;

function strictlyIncreasing(tokens: readonly FencingToken[]): void {
  for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `token ${i}: ${tokens[i]} after ${tokens[i - 1]}`).toBe(true);
}

describe.each([
  ['single instance', (): RedisTarget => pool.single(), (): number[] => [singlePort()]],
  ['Redlock', (): RedisTarget => pool.redlock(), redlockPorts],
])('%s', (_kind, target, ports) => {
  it('grants with a token, refuses a second holder, frees on release, and release is idempotent', async () => {
    const name = uniqueLockName('basic');
    const t = target();
    const a = await acquireLock(t, name, { ttlMs: 3000, nodeTimeoutMs: 500, owner: 'holder-a' });
    expect(a.held).toBe(true);
    expect(a.name).toBe(name);
    expect(a.signal.aborted).toBe(false);
    expect(await tryAcquireLock(t, name)).toBeNull();
    const status = await lockStatus(t, name);
    expect(status.holder).toMatchObject({ token: a.token, owner: 'holder-a', key: lockKeys(name)[0] });
    await Promise.all([a.release(), a.release()]);
    expect(a.held).toBe(false);
    expect((a.signal.reason as LockLostError).reason).toBe('released');
    // Redlock's release returns once a majority answered; the other nodes' deletes follow.
    await until(async () => {
      for (const port of ports()) if ((await onPort(port, 'EXISTS', lockKeys(name)[0])) !== 0) return false;
      return true;
    }, 'the lock key to be gone on every node', 10_000);
    const b = await tryAcquireLock(t, name);
    expect(b?.token).toBeGreaterThan(a.token);
    await b?.release();
    expect((await lockStatus(t, name)).holder).toBeNull();
  });

  it('mutual exclusion under contention: 8 clients x 25 grants, no overlap, tokens strictly increasing', async () => {
    const name = uniqueLockName('contend');
    const sources = Array.from({ length: 8 }, () => redisSource(target(), { ttlMs: 5000 }));
    const tokens = await takeTurns(sources, name, 25, { timeoutMs: 60_000 });
    expect(tokens).toHaveLength(200);
    strictlyIncreasing(tokens);
  });

  it('the watchdog keeps the key alive past its TTL; the token stays the grant\'s', async () => {
    const name = uniqueLockName('renew');
    const t = target();
    // 2.5 TTLs: without renewals the key is gone and the holding stepped down long before. A 600 ms TTL
    // (renewals 200 ms apart, a 50 ms node timeout) lost the grant to a stall of a loaded CI machine.
    const lock = await acquireLock(t, name, { ttlMs: 2000, nodeTimeoutMs: 600 });
    await new Promise((r) => setTimeout(r, 5000));
    expect(lock.held).toBe(true);
    expect((await lockStatus(t, name)).holder?.token).toBe(lock.token);
    await lock.release();
  });

  it('a timeout and an abort leave nothing behind: no key, no waiter entry', async () => {
    const name = uniqueLockName('giveup');
    const t = target();
    const holder = await acquireLock(t, name, { ttlMs: 5000 });
    const timedOut = await acquireLock(target(), name, { timeoutMs: 200 }).catch((e: unknown) => e);
    expect(timedOut).toBeInstanceOf(LockTimeoutError);
    const stop = new AbortController();
    const waiting = acquireLock(target(), name);
    setTimeout(() => stop.abort(new Error('stop waiting')), 100);
    const aborted = await acquireLock(target(), name, { signal: stop.signal }).catch((e: unknown) => e);
    expect((aborted as Error).message).toBe('stop waiting');
    // The two that gave up have left every node's waiter list; the one still waiting is there.
    await until(async () => {
      for (const port of ports()) if ((await onPort(port, 'ZCARD', lockKeys(name)[2])) !== 1) return false;
      return true;
    }, 'only the remaining waiter in the waiter lists', 10_000);
    await holder.release();
    const third = await waiting; // the one still waiting gets it
    await third.release();
    await until(async () => {
      for (const port of ports()) if ((await onPort(port, 'EXISTS', lockKeys(name)[0], lockKeys(name)[2])) !== 0) return false;
      return true;
    }, 'the lock and waiter keys to be gone on every node');
  });
});

describe('waiting', () => {
  it('one release wakes one waiter: 20 waiters, 1 release, 1 attempt', async () => {
    const name = uniqueLockName('wakeone');
    const holder = await acquireLock(pool.single(), name, { ttlMs: 60_000 });
    let attempts = 0;
    const granted: number[] = [];
    const waiters = Array.from({ length: 20 }, (_, i) =>
      acquireLock(
        counting(pool.single(), (command, args) => {
          if (command === 'evalsha' && args[0] === ACQUIRE.sha) attempts++;
        }),
        name,
        { ttlMs: 60_000 },
      ).then((lock) => {
        granted.push(i);
        return lock;
      }),
    );
    await until(async () => (await onPort<number>(singlePort(), 'ZCARD', lockKeys(name)[2])) === 20, 'all 20 waiters in the waiter list');
    attempts = 0;
    await holder.release();
    await until(() => granted.length === 1, 'one waiter to get the lock');
    // Give any other waiter that was woken time to try (none should).
    await new Promise((r) => setTimeout(r, 300));
    expect(attempts).toBe(1);
    // And so on down the line: each release wakes the next, one attempt per grant.
    for (let i = 0; i < 19; i++) {
      const lock = await waiters[granted[i] as number]!;
      await lock.release();
      await until(() => granted.length === i + 2, `waiter ${i + 2} to get the lock`);
    }
    expect(attempts).toBe(20);
    await (await waiters[granted[19] as number]!).release();
  });

  it('Redlock: a release wakes a waiter (no retry before the holder\'s TTL otherwise)', async () => {
    const name = uniqueLockName('redwake');
    const holder = await acquireLock(pool.redlock(), name, { ttlMs: 60_000 });
    let claims = 0;
    const clients: RedisClient[] = pool.redlock().map((c) =>
      counting(c, (command, args) => {
        if (command === 'evalsha' && args[0] === CLAIM.sha) claims++;
      }),
    );
    const waiting = acquireLock(clients, name, { ttlMs: 60_000 });
    // A first round, then one that puts it in each node's waiter list.
    await until(() => claims >= 10, 'the waiter\'s first two rounds');
    await holder.release();
    const lock = await within(waiting, 20_000, 'the waiter to be woken by the release');
    expect(lock.token).toBeGreaterThan(holder.token);
    await lock.release();
  });
});

describe('the holder that lost its key', () => {
  it('a renewal the server refuses ends the holding (renewal_failed); its release never deletes the next holder\'s key', async () => {
    const name = uniqueLockName('stale');
    const [lockKey] = lockKeys(name);
    // Room for a loaded machine (a 300 ms node timeout was outlasted at load 12): every command may
    // take 3 s, and A's first renewal, due 3 s after the grant, may be refused up to 3.75 s late
    // before A's step-down deadline (the 9 s TTL less its 2.25 s margin) would end the holding first.
    const patient = { nodeTimeoutMs: 3000 };
    const a = await acquireLock(pool.single(), name, { ttlMs: 9000, ...patient });
    // The key expires under A (what a TTL cut short by a clock jump, or a long stall of A, does).
    await onPort(singlePort(), 'DEL', lockKey);
    const b = await acquireLock(pool.single(), name, { ttlMs: 10_000, ...patient });
    expect(b.token).toBeGreaterThan(a.token);
    await until(() => a.signal.aborted, 'A\'s next renewal to be refused');
    expect((a.signal.reason as LockLostError).reason).toBe('renewal_failed');
    expect(a.held).toBe(false);
    await a.release();
    const value = await onPort<string | null>(singlePort(), 'GET', lockKey);
    expect(value).not.toBeNull();
    expect(b.held).toBe(true);
    expect((await lockStatus(pool.single(), name, patient)).holder?.token).toBe(b.token);
    await b.release();
  });

  it('renewals that get no answer: held turns false and the signal aborts at the step-down deadline', async () => {
    const name = uniqueLockName('silent');
    const proxy = await TcpProxy.to(`127.0.0.1:${singlePort()}`);
    try {
      const client = pool.open(`redis://127.0.0.1:${proxy.port}`);
      const lock = await acquireLock(client, name, { ttlMs: 900, safetyMarginMs: 200, nodeTimeoutMs: 100 });
      proxy.blackhole();
      const aborted = new Promise<void>((r) => lock.signal.addEventListener('abort', () => r()));
      await within(aborted, 10_000, 'the step-down deadline');
      expect(lock.held).toBe(false);
      expect((lock.signal.reason as LockLostError).reason).toBe('deadline');
      // The server ends the key on its own a margin later; the next holder gets a larger token.
      const next = await acquireLock(pool.single(), name, { timeoutMs: 10_000 });
      expect(next.token).toBeGreaterThan(lock.token);
      await next.release();
    } finally {
      await proxy.close();
    }
  });
});

describe('the quorum counter\'s write-back (step 3) on one node', () => {
  it('raises the counter only where the key is ours, and never lowers it', async () => {
    const name = uniqueLockName('raise');
    const [lockKey, counterKey] = lockKeys(name);
    const port = redlockPorts()[0]!;
    const raise = (value: string, t: number): Promise<unknown> => onPort(port, 'EVAL', RAISE.text, 2, lockKey, counterKey, value, String(t));
    await onPort(port, 'SET', lockKey, 'ours owner', 'PX', 10_000);
    expect(await raise('ours owner', 7)).toBe(1);
    expect(await onPort(port, 'GET', counterKey)).toBe('7');
    // A late write-back of an older grant's t (a node that answered after a later grant raised it): refused.
    expect(await raise('ours owner', 5)).toBe(0);
    expect(await raise('ours owner', 7)).toBe(0);
    expect(await onPort(port, 'GET', counterKey)).toBe('7');
    // Another holder's key: refused, whatever t.
    expect(await raise('theirs owner', 100)).toBe(0);
    expect(await onPort(port, 'GET', counterKey)).toBe('7');
    await onPort(port, 'DEL', lockKey, counterKey);
  });
});

describe('the quorum counter\'s step 1 with a proposed token (step 3 merged into it) on one node', () => {
  it('raises the counter to the proposal only where the SET took and the counter is below it', async () => {
    const name = uniqueLockName('claim');
    const keys = lockKeys(name);
    const port = redlockPorts()[0]!;
    const claim = (value: string, proposal: string): Promise<unknown> => onPort(port, 'EVAL', CLAIM.text, 3, ...keys, value, 10_000, '', proposal);
    await onPort(port, 'SET', keys[1], '7');
    // Below the counter: the SET takes, the counter stays (steps 2-3 must run).
    expect(await claim('a owner', '7')).toEqual([1, '7']);
    expect(await onPort(port, 'GET', keys[1])).toBe('7');
    await onPort(port, 'DEL', keys[0]);
    // Above it: both at once.
    expect(await claim('b owner', '9')).toEqual([2, '9']);
    expect(await onPort(port, 'GET', keys[1])).toBe('9');
    // The key is taken: nothing, whatever the proposal.
    const [refused] = (await claim('c owner', '100')) as unknown[];
    expect(refused).toBe(0);
    expect(await onPort(port, 'GET', keys[1])).toBe('9');
    await onPort(port, 'DEL', keys[0]);
    // No proposal: step 1 alone.
    expect(await claim('d owner', '')).toEqual([1, '9']);
    await onPort(port, 'DEL', ...keys);
  });
});

describe('Redlock: step 3 merged into step 1', () => {
  it('a set\'s next grant of a lock proposes its last token + 1: no RAISE round; a stale proposal falls back to steps 2-3 with a larger token', async () => {
    const name = uniqueLockName('merged');
    const sent: string[] = [];
    const counted = pool.redlock().map((c) => counting(c, (command, args) => {
      if (command === 'evalsha' || command === 'eval') sent.push(args[0] === CLAIM.sha || args[0] === CLAIM.text ? 'CLAIM' : args[0] === RAISE.sha || args[0] === RAISE.text ? 'RAISE' : 'other');
    }));
    const first = await acquireLock(counted, name, { ttlMs: 5000 });
    await first.release();
    // The set's first grant of the lock knows no token: steps 1, 2-3.
    expect(sent.filter((s) => s === 'RAISE').length).toBeGreaterThanOrEqual(3);
    sent.length = 0;
    const second = await acquireLock(counted, name, { ttlMs: 5000 });
    expect(second.token).toBe(first.token + 1n);
    expect(sent.filter((s) => s === 'CLAIM')).toHaveLength(5);
    expect(sent.filter((s) => s === 'RAISE')).toHaveLength(0);
    expect((await lockStatus(counted, name)).holder?.token).toBe(second.token);
    await second.release();
    // Another set's grants raise the counters past what this set knows.
    const other = pool.redlock();
    let theirs = 0n;
    for (let i = 0; i < 3; i++) {
      const lock = await acquireLock(other, name, { ttlMs: 5000 });
      theirs = lock.token;
      await lock.release();
    }
    sent.length = 0;
    const third = await acquireLock(counted, name, { ttlMs: 5000 });
    expect(third.token > theirs).toBe(true);
    expect(sent.filter((s) => s === 'RAISE').length).toBeGreaterThanOrEqual(3);
    await third.release();
  });

  it('a proposal a minority of nodes refuses still grants with it, and lockStatus shows the token the majority carries', async () => {
    const name = uniqueLockName('minority');
    const clients = pool.redlock();
    const first = await acquireLock(clients, name, { ttlMs: 5000 });
    await first.release();
    await until(async () => {
      for (const port of redlockPorts()) if ((await onPort(port, 'EXISTS', lockKeys(name)[0])) !== 0) return false;
      return true;
    }, 'the lock key to be gone on every node', 10_000);
    // Two nodes' counters above the next proposal (a split vote of other clients would leave that).
    const high = first.token + 100n;
    for (const port of redlockPorts().slice(3)) await onPort(port, 'SET', lockKeys(name)[1], high.toString());
    const lock = await acquireLock(clients, name, { ttlMs: 5000 });
    expect(lock.token).toBe(first.token + 1n);
    expect((await lockStatus(clients, name)).holder?.token).toBe(lock.token);
    await lock.release();
    // Three nodes above it: the proposal has no majority, steps 2-3 give a token above them all.
    for (const port of redlockPorts().slice(2)) await onPort(port, 'SET', lockKeys(name)[1], high.toString());
    const next = await acquireLock(clients, name, { ttlMs: 5000 });
    expect(next.token).toBe(high + 1n);
    expect((await lockStatus(clients, name)).holder?.token).toBe(next.token);
    await next.release();
  });
});

describe('sources and input', () => {
  it('redisSource: kind, description, and the contract through the source alone', async () => {
    const single = redisSource(pool.single(), { ttlMs: 2000 });
    const red = redisSource(pool.redlock(), { ttlMs: 2000 });
    expect(single.kind).toBe('redis');
    expect(red.kind).toBe('redlock');
    expect(single.description).toContain(`127.0.0.1:${singlePort()}`);
    expect(Object.isFrozen(single)).toBe(true);
    for (const source of [single, red]) {
      const name = uniqueLockName('source');
      const lock = await source.acquireLock(name, { owner: 'through-source' });
      expect(await source.tryAcquireLock(name)).toBeNull();
      expect((await source.lockStatus(name)).holder?.owner).toBe('through-source');
      await lock.release();
    }
  });

  it('two client objects on one server are refused for Redlock by run_id, before any lock command', async () => {
    const name = uniqueLockName('same');
    const [a, b] = pool.redlock(2);
    const again = pool.open(`redis://127.0.0.1:${redlockPorts()[0]}`);
    const error = await acquireLock([a!, b!, again], name).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/same Redis server/);
    for (const port of redlockPorts().slice(0, 2)) expect(await onPort(port, 'EXISTS', lockKeys(name)[0])).toBe(0);
  });
});
