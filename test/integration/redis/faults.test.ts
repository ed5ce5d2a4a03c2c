// Redlock with its quorum-counter token while nodes fail: SIGKILLed,
// SIGSTOPped, restarted from their AOF, restarted empty. Every test takes
// the Redis set's fault turn (test/servers/redis.sh hold-faults) for the
// whole file and heals the nodes after each test.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { QuorumError } from '../../../src/errors.js';
import type { FencingToken } from '../../../src/token.js';
import { acquireLock, lockStatus, tryAcquireLock } from '../../../src/sources/redis/index.js';
import { lockKeys } from '../../../src/sources/redis/scripts.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { RedisPool, holdRedisFaults, onPort, redisCtl, redlockPorts } from './helpers.js';

const pool = new RedisPool();
let giveBack: (() => Promise<void>) | undefined;
beforeAll(async () => {
  giveBack = await holdRedisFaults();
}, 11 * 60_000);
afterAll(async () => {
  pool.closeAll();
  await giveBack?.();
}, 120_000);
afterEach(async () => {
  pool.closeAll();
  await redisCtl('heal');
}, 120_000);

/** Node names of test/servers/redis.sh for the five Redlock nodes. */
const NODES = ['1', '2', '3', '4', '5'] as const;

describe('Redlock with nodes down', () => {
  it('2 of 5 down: still grants, with a larger token', async () => {
    const name = uniqueLockName('twodown');
    const first = await acquireLock(pool.redlock(), name, { ttlMs: 5000 });
    await first.release();
    await redisCtl('kill', '4');
    await redisCtl('kill', '5');
    const lock = await acquireLock(pool.redlock(), name, { ttlMs: 5000, nodeTimeoutMs: 100, timeoutMs: 10_000 });
    expect(lock.held).toBe(true);
    expect(lock.token).toBeGreaterThan(first.token);
    await lock.release();
  });

  it('3 of 5 down: acquire fails with QuorumError and leaves no key on the two that answered', async () => {
    const name = uniqueLockName('threedown');
    for (const n of ['3', '4', '5']) await redisCtl('kill', n);
    const error = await acquireLock(pool.redlock(), name, { ttlMs: 5000, nodeTimeoutMs: 100, timeoutMs: 10_000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumError);
    expect((error as QuorumError).code).toBe('NO_QUORUM');
    expect((error as Error).message).toMatch(/only 2 of 5 nodes answered, 3 needed/);
    const tried = await tryAcquireLock(pool.redlock(), name, { ttlMs: 5000, nodeTimeoutMs: 100 }).catch((e: unknown) => e);
    expect(tried).toBeInstanceOf(QuorumError);
    for (const port of redlockPorts().slice(0, 2)) {
      expect(await onPort(port, 'EXISTS', ...lockKeys(name).filter((_, i) => i !== 1)), `port ${port}`).toBe(0);
    }
  });

  it('a release whose node timed out never deletes another holder\'s key', async () => {
    const name = uniqueLockName('latedelete');
    const [lockKey] = lockKeys(name);
    const a = await acquireLock(pool.redlock(), name, { ttlMs: 3000, nodeTimeoutMs: 100 });
    await redisCtl('pause', '5');
    // A's key expires on the four nodes that still answer (a stall of A, or their clocks running ahead).
    for (const port of redlockPorts().slice(0, 4)) await onPort(port, 'DEL', lockKey);
    const b = await acquireLock(pool.redlock(), name, { ttlMs: 10_000, nodeTimeoutMs: 100, timeoutMs: 10_000 });
    const bValue = await onPort<string>(redlockPorts()[0]!, 'GET', lockKey);
    expect(bValue).toMatch(/ /);
    await a.release(); // node 5 does not answer: its part of the release times out
    for (const port of redlockPorts().slice(0, 4)) expect(await onPort(port, 'GET', lockKey), `port ${port}`).toBe(bValue);
    await redisCtl('resume', '5');
    // A's release reaches node 5 now; B's key, wherever it is, stays.
    await until(async () => (await onPort(redlockPorts()[4]!, 'PING')) === 'PONG', 'node 5 to answer again');
    for (const port of redlockPorts().slice(0, 4)) expect(await onPort(port, 'GET', lockKey), `port ${port}`).toBe(bValue);
    expect((await lockStatus(pool.redlock(), name)).holder?.token).toBe(b.token);
    expect(b.held).toBe(true);
    await b.release();
  });
});

describe('the quorum counter', () => {
  const GRANTS = Number(process.env.FK_QUORUM_GRANTS ?? 1000);

  it(`${GRANTS} grants while random minorities are SIGSTOPped, SIGKILLed and restarted from their AOF: tokens strictly increase`, async () => {
    const name = uniqueLockName('quorum');
    const contenders = Array.from({ length: 3 }, () => pool.redlock());
    const tokens: FencingToken[] = [];
    const faults = { pause: 0, kill: 0, restart: 0, resume: 0 };
    let holders = 0;
    let done = false;
    let noQuorum = 0;

    // Never more than two of the five nodes faulted at once (a majority always answers).
    const faulted = new Map<string, 'paused' | 'killed'>();
    const driver = (async () => {
      while (!done) {
        await new Promise((r) => setTimeout(r, 50 + Math.random() * 150));
        if (done) break;
        const healthy = NODES.filter((n) => !faulted.has(n));
        const broken = [...faulted.keys()];
        if (broken.length < 2 && (broken.length === 0 || Math.random() < 0.5)) {
          const n = healthy[Math.floor(Math.random() * healthy.length)] as string;
          if (Math.random() < 0.5) {
            await redisCtl('pause', n);
            faulted.set(n, 'paused');
            faults.pause++;
          } else {
            await redisCtl('kill', n);
            faulted.set(n, 'killed');
            faults.kill++;
          }
        } else {
          const n = broken[Math.floor(Math.random() * broken.length)] as string;
          if (faulted.get(n) === 'paused') {
            await redisCtl('resume', n);
            faults.resume++;
          } else {
            await redisCtl('restart', n); // from its AOF
            faults.restart++;
          }
          faulted.delete(n);
        }
      }
    })();

    try {
      await Promise.all(
        contenders.map(async (clients) => {
          // Until every kind of fault has happened too (grants can outrun the fault driver).
          while (tokens.length < GRANTS || faults.pause === 0 || faults.kill === 0 || faults.restart === 0 || faults.resume === 0) {
            // A node that just came back may still be reconnecting, or working off the
            // commands queued while it was stopped: a round can then miss a majority.
            const lock = await acquireLock(clients, name, { ttlMs: 2000, nodeTimeoutMs: 100, timeoutMs: 60_000 }).catch((error: unknown) => {
              if (!(error instanceof QuorumError)) throw error;
              noQuorum++;
              return null;
            });
            if (lock === null) continue;
            holders++;
            if (holders !== 1) throw new Error(`${holders} holders at token ${lock.token}`);
            tokens.push(lock.token);
            await new Promise((r) => setImmediate(r));
            holders--;
            await lock.release();
          }
        }),
      );
    } finally {
      done = true;
      await driver;
    }
    expect(tokens.length).toBeGreaterThanOrEqual(GRANTS);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `grant ${i}: ${tokens[i]} after ${tokens[i - 1]}`).toBe(true);
    // The faults happened, every kind of them.
    expect(faults.pause).toBeGreaterThan(0);
    expect(faults.kill).toBeGreaterThan(0);
    expect(faults.restart).toBeGreaterThan(0);
    expect(faults.resume).toBeGreaterThan(0);
    console.log(`quorum counter: ${tokens.length} grants, faults ${JSON.stringify(faults)}, ${noQuorum} rounds without a majority`);
  }, 180_000);

  it('a node restarted EMPTY breaks it: a second holder at the same time, with a token that is not larger', async () => {
    const name = uniqueLockName('empty');
    await redisCtl('kill', '4');
    await redisCtl('kill', '5');
    const aClients = pool.redlock();
    const a = await acquireLock(aClients, name, { ttlMs: 30_000, nodeTimeoutMs: 100, timeoutMs: 10_000 });
    // A's claims on nodes 4 and 5 wait in their clients' offline queues: drop them, so they never arrive.
    aClients[3]!.disconnect();
    aClients[4]!.disconnect();
    // Killed first, and restarted once its port is closed: the script's restart-empty checks
    // the port right after the kill and can find the dying process's listener still there.
    await redisCtl('kill', '3');
    await until(async () => !(await onPort(redlockPorts()[2]!, 'PING').then(() => true, () => false)), 'node 3\'s port to close');
    await redisCtl('restart-empty', '3'); // loses A's key and the lock's counter
    await redisCtl('restart', '4');
    await redisCtl('restart', '5');
    const b = await tryAcquireLock(pool.redlock(), name, { ttlMs: 30_000, nodeTimeoutMs: 100 });
    // What breaks: nodes 3, 4 and 5 form a majority that never saw A's grant.
    expect(b).not.toBeNull();
    expect(a.held).toBe(true);
    expect(b!.held).toBe(true);
    expect(b!.token <= a.token).toBe(true);
    await b!.release();
    await a.release();
  });
});
