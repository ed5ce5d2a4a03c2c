// fencekeeper/redis never leaves a promise rejected without a handler while
// its nodes fail (an unhandled rejection ends a user's Node process), and
// its locks work again once the faults heal. On private nodes of this file
// (ports 16500-16510, test/helpers/private-redis.ts), not the shared
// FK_REDLOCK set: it needs no fault turn.
//
// The bug this guards against: ioredis resubscribes a subscriber on its own
// after a reconnect, with a promise nobody can handle; when the node is
// paused right then and the subscriber is closed before it answers (its
// last waiter left, or status --watch ended), that promise rejects with
// "Connection is closed.".
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireLock } from '../../../src/sources/redis/index.js';
import { PrivateRedis } from '../../helpers/private-redis.js';
import { client, redlockStress, waiterLeavesDuringResubscribe, watcherStopsDuringResubscribe } from '../../helpers/redis-robustness.js';
import { lockKeys } from '../../../src/sources/redis/scripts.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { countUnhandledRejections } from '../../helpers/unhandled.js';
import { until } from '../../helpers/wait.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SINGLE_PORT = 16500;
const REDLOCK_PORTS = [16501, 16502, 16503];
const CHILD_PORT = 16510;

let single: PrivateRedis;
let redlock: PrivateRedis[] = [];
beforeAll(async () => {
  // Keyspace notifications for status --watch.
  single = await PrivateRedis.start(SINGLE_PORT, ['--notify-keyspace-events', 'K$gx']);
  redlock = await Promise.all(REDLOCK_PORTS.map((p) => PrivateRedis.start(p)));
}, 60_000);
afterAll(async () => {
  await Promise.all([single, ...redlock].filter(Boolean).map((n) => n.stop()));
});

const unhandled = countUnhandledRejections();

describe('faults while subscribers resubscribe', () => {
  it('a waiter gives up while its subscriber resubscribes to a paused node: no unhandled rejection, and a release wakes the next waiter after another reconnect', async () => {
    const result = await waiterLeavesDuringResubscribe(single);
    expect(result.pausedAtResubscribe).toBe(true); // the fault happened where it hurts
    expect((result.gaveUpWith as Error).name).toBe('AbortError');
    expect(unhandled.messages()).toEqual([]);
    // woken by the release (the holder's TTL is a minute, the waiter's limit 20 s): subscribed again after the cut
    expect(result.wokenAfter).toBe(true);
  }, 60_000);

  it('status --watch ends while its subscriber resubscribes to a paused node: no unhandled rejection, and the next watch works', async () => {
    const result = await watcherStopsDuringResubscribe(single);
    expect(result.pausedAtResubscribe).toBe(true);
    expect(result.events.map((e) => e.type)).toEqual(['queue', 'disconnected']); // never "reconnected": the resubscribe was not confirmed
    expect(unhandled.messages()).toEqual([]);
    // After a cut: told of it, subscribed again (by us, not ioredis), and a grant after that is shown.
    // (the release after it may add one more listing before the watch ends)
    expect(result.afterResume.map((e) => e.type).slice(0, 4)).toEqual(['queue', 'disconnected', 'reconnected', 'queue']);
    expect(result.afterResume[3]).toMatchObject({ type: 'queue', entries: [{ role: 'holder' }] });
  }, 60_000);

  it('the same in a fresh process, with Node\'s default for an unhandled rejection: it exits 0', async () => {
    const child = spawn(process.execPath, [`${ROOT}node_modules/vite-node/vite-node.mjs`, `${ROOT}test/fixtures/redis-robustness-child.ts`], {
      cwd: ROOT,
      env: { ...process.env, FK_PORT: String(CHILD_PORT) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(stderr).not.toMatch(/Connection is closed|unhandled/i);
    expect({ code, stdout: stdout.trim() }).toEqual({ code: 0, stdout: 'ok' });
  }, 60_000);
});

describe('Redlock on three private nodes under random faults', () => {
  it('pauses (some at a resubscribe), SIGKILLs with restarts from the AOF, and cuts: no unhandled rejection, tokens increase, and locks work after', async () => {
    const figures = await redlockStress(redlock, Number(process.env.FK_ROBUSTNESS_MS ?? 15_000));
    expect(unhandled.messages()).toEqual([]);
    for (let i = 1; i < figures.tokens.length; i++) expect(figures.tokens[i]! > figures.tokens[i - 1]!, `grant ${i}`).toBe(true);
    // The faults happened, every kind.
    expect(figures.faults.pause).toBeGreaterThan(0);
    expect(figures.faults.kill).toBeGreaterThan(0);
    expect(figures.faults.cut).toBeGreaterThan(0);
    expect(figures.faults.pauseAtResubscribe).toBeGreaterThan(0);
    expect(figures.grants).toBeGreaterThan(0);
    console.log(`redlock stress: ${figures.grants} grants, ${figures.gaveUp} gave up, ${figures.noQuorum} without a majority, faults ${JSON.stringify(figures.faults)}`);

    // Healed: a holder, a waiter woken by its release.
    const clients = redlock.map((n) => client(n.port));
    try {
      const name = uniqueLockName('after');
      const first = await acquireLock(clients, name, { ttlMs: 60_000, timeoutMs: 10_000 });
      const next = acquireLock(clients, name, { ttlMs: 60_000, timeoutMs: 20_000 });
      // In the waiter lists of a majority: subscribed, so the release wakes it (no re-check would, within its limit).
      const [, , waitersKey] = lockKeys(name);
      await until(async () => (await Promise.all(clients.map((c) => c.zcard(waitersKey)))).filter((n) => n > 0).length >= 2, 'the waiter to queue up');
      await first.release();
      const second = await next;
      expect(second.token).toBeGreaterThan(first.token);
      await second.release();
    } finally {
      for (const c of clients) c.disconnect();
    }
  }, 90_000);
});
