// Many acquires on one client: nothing per wait that one per client (or per
// signal) can serve. 64 concurrent acquires, waits, timeouts and failed
// tries on one session print no MaxListenersExceededWarning, and the
// client's 'state' listeners and a shared signal's 'abort' listeners do not
// grow with the number of waits.
import { getEventListeners } from 'node:events';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LockTimeoutError } from '../../../src/errors.js';
import { acquireLock, tryAcquireLock, type ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { LOCKS, queueChildren } from './lock-helpers.js';

const N = 64;
const clients = new ClientPool();
let server: string;
const warnings: Error[] = [];
const onWarning = (warning: Error): void => {
  warnings.push(warning);
};

beforeAll(() => {
  server = testServers().zkStandalone;
  process.on('warning', onWarning);
});
afterEach(() => clients.closeAll());
afterAll(() => {
  process.off('warning', onWarning);
});

/** Warnings are emitted on a later tick: let them arrive before reading. */
async function warningsSoFar(): Promise<string[]> {
  await new Promise((resolve) => setImmediate(resolve));
  return warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map((w) => w.message);
}

describe(`${N} concurrent acquires on one client`, () => {
  it('on distinct locks, on one lock, with a shared signal and timeout, timing out, and failing to try: no listener warning, listeners do not grow', async () => {
    const zk = await clients.connect(server, 10_000);
    const holder = await clients.connect(server, 10_000);
    const stateListeners = (): number => zk.listenerCount('state');

    // Distinct locks, all granted at once.
    const name = uniqueLockName('listeners');
    const distinct = await Promise.all(Array.from({ length: N }, (_, i) => acquireLock(zk, `${name}/d${i}`)));
    for (const lock of distinct) expect(lock.held).toBe(true);
    await Promise.all(distinct.map((l) => l.release()));
    // Per client, at most: the holdings' listener (present now), the waits'
    // listener, the listener of removals that must not wait for a reconnect.
    const baseline = stateListeners();
    const perClient = baseline + 2;

    // One lock held elsewhere: N waiters on it, sharing one signal and one timeout.
    const contended = `${name}/one`;
    const blocker = await acquireLock(holder, contended);
    const shared = new AbortController();
    const waiting = Array.from({ length: N }, () => acquireLock(zk, contended, { signal: shared.signal, timeoutMs: 60_000 }));
    await until(async () => (await queueChildren(holder, `${LOCKS}/${contended}`)).length === N + 1, 'every waiter queued');
    // The waits are really pending on one client: its listeners did not grow with them.
    expect(stateListeners()).toBeLessThanOrEqual(perClient);
    expect(getEventListeners(shared.signal, 'abort').length).toBeLessThanOrEqual(1);
    await blocker.release();
    for (let i = 0; i < N; i++) {
      const lock: ZooKeeperLock = await (waiting[i] as Promise<ZooKeeperLock>);
      await lock.release();
    }

    // N waits that time out, and N tries that find the lock busy, while it is held.
    const blocker2 = await acquireLock(holder, contended);
    const timeouts = await Promise.allSettled(Array.from({ length: N }, () => acquireLock(zk, contended, { timeoutMs: 200 })));
    for (const t of timeouts) expect(t.status === 'rejected' && t.reason instanceof LockTimeoutError).toBe(true);
    const tries = await Promise.all(Array.from({ length: N }, () => tryAcquireLock(zk, contended)));
    expect(tries.every((t) => t === null)).toBe(true);
    await blocker2.release();
    // Nothing left behind by the timeouts and the tries.
    await until(async () => (await queueChildren(holder, `${LOCKS}/${contended}`)).length === 0, 'the queue to empty');
    expect(stateListeners()).toBeLessThanOrEqual(perClient);

    expect(await warningsSoFar()).toEqual([]);
  }, 60_000);
});
