// The fault scenarios of test/integration/redis/robustness.test.ts, on
// private nodes (test/helpers/private-redis.ts), shared with its child
// process (test/fixtures/redis-robustness-child.ts) and with the long stress
// run (test/faults/redis-robustness-stress.ts).
//
// What they look for: a promise of ours, or one ioredis makes on our behalf,
// that rejects with nobody to handle it (an unhandled rejection ends a Node
// process by default). The sharpest case: a subscriber reconnects, its
// SUBSCRIBE on the new connection reaches a node that is paused right then,
// and the subscriber is closed before the node answers (its last waiter
// gave up, or was granted the lock by the other nodes).
import { Redis } from 'ioredis';
import { LockTimeoutError, QuorumError } from '../../src/errors.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import type { FencingToken } from '../../src/token.js';
import { acquireLock, type RedisClient, type RedisLock } from '../../src/sources/redis/index.js';
import { lockKeys } from '../../src/sources/redis/scripts.js';
import { REDIS_SERVICE } from '../../src/cli/services/redis.js';
import type { QueueEvent } from '../../src/cli/lock-service.js';
import type { PrivateRedis } from './private-redis.js';
import { uniqueLockName } from './unique.js';
import { until } from './wait.js';

/** A proxy in front of `node` that pauses the node when `armed` and a client sends SUBSCRIBE: the reply is then outstanding until the test resumes it. */
export async function pausingProxy(node: PrivateRedis): Promise<{ proxy: TcpProxy; arm(): void; disarm(): void; readonly fired: number }> {
  let armed = false;
  let fired = 0;
  const proxy = await TcpProxy.start(
    { port: node.port },
    {
      // Synchronous: the node stops before the proxy passes the bytes on, so it never answers them until SIGCONT.
      observe: (chunk, from) => {
        if (!armed || from !== 'client' || !/subscribe/i.test(chunk.toString('latin1'))) return;
        armed = false;
        node.pause();
        fired++;
      },
    },
  );
  return {
    proxy,
    arm: () => {
      armed = true;
    },
    disarm: () => {
      armed = false;
    },
    get fired() {
      return fired;
    },
  };
}

export function client(port: number): Redis {
  // ioredis's defaults, but reconnecting every 50 ms (as a node under a fault test is down for a while).
  const c = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 50 });
  c.on('error', () => {});
  return c;
}

/** The wake channels the node has subscribers on (asked directly, not through a proxy). */
async function wakeChannels(node: PrivateRedis): Promise<number> {
  const admin = client(node.port);
  try {
    return ((await admin.call('PUBSUB', 'CHANNELS', 'fencekeeper:wake:*')) as string[]).length;
  } finally {
    admin.disconnect();
  }
}

/** The entries in the waiter list of lock `name` on the node. */
async function inWaiterList(node: PrivateRedis, name: string): Promise<number> {
  const admin = client(node.port);
  try {
    return (await admin.zcard(lockKeys(name)[2])) as number;
  } finally {
    admin.disconnect();
  }
}

export interface WaiterScenario {
  /** The node was paused with the resubscribe on its way. */
  readonly pausedAtResubscribe: boolean;
  /** What the waiter that gave up got. */
  readonly gaveUpWith: unknown;
  /** A waiter woken by a release after the next reconnect (its holder's TTL is a minute: no re-check would find it). */
  readonly wokenAfter: boolean;
}

/**
 * One client through a proxy; a holder with a long TTL and a waiter. The
 * proxy cuts every connection; the waiter's subscriber reconnects and its
 * SUBSCRIBE reaches the node as the node is paused; the waiter gives up
 * (its signal), which closes the subscriber with that SUBSCRIBE unanswered.
 * Then the node resumes, and after another cut a second waiter must still
 * be woken by the holder's release (its subscriber subscribed again).
 */
export async function waiterLeavesDuringResubscribe(node: PrivateRedis): Promise<WaiterScenario> {
  const pausing = await pausingProxy(node);
  const { proxy } = pausing;
  const c = client(proxy.port);
  // The client as a user's wrapper may pass it: its subscribers seen, to wait until they have closed.
  const subscribers: Redis[] = [];
  const wrapped: RedisClient = {
    call: (command, args) => c.call(command, args),
    duplicate: (override) => {
      const s = c.duplicate(override);
      subscribers.push(s);
      return s;
    },
    options: c.options,
  };
  const name = uniqueLockName('resubscribe');
  try {
    const holder = await acquireLock(wrapped, name, { ttlMs: 60_000 });
    const giveUp = new AbortController();
    const waiting = acquireLock(wrapped, name, { ttlMs: 60_000, signal: giveUp.signal }).then(
      () => new Error('granted while the holder held'),
      (error: unknown) => error,
    );
    // Subscribed, and its attempt after that answered (it is in the waiter list): a cut now catches no command of it.
    await until(async () => (await wakeChannels(node)) === 1 && (await inWaiterList(node, name)) === 1, 'the waiter to subscribe and queue up');
    pausing.arm();
    proxy.cut();
    await until(() => pausing.fired === 1, 'the resubscribe to reach the node, paused');
    giveUp.abort();
    const gaveUpWith = await waiting;
    // The subscriber closed (its last waiter left), what it had pending rejected.
    await until(() => subscribers.length === 1 && subscribers[0]!.status === 'end', 'the subscriber to close');
    await new Promise((r) => setTimeout(r, 100)); // an unhandled rejection is reported by now
    node.resume();

    const next = acquireLock(wrapped, name, { ttlMs: 60_000, timeoutMs: 20_000 });
    await until(async () => (await wakeChannels(node)) === 1, 'the second waiter to subscribe');
    proxy.cut();
    await until(async () => c.status === 'ready' && (await wakeChannels(node)) === 0, 'the cut to close the subscriber on the node');
    await until(async () => (await wakeChannels(node)) === 1, 'the subscriber to subscribe again after the cut');
    await holder.release();
    const lock = await next;
    const wokenAfter = lock.token > holder.token && lock.held;
    await lock.release();
    return { pausedAtResubscribe: pausing.fired === 1, gaveUpWith, wokenAfter };
  } finally {
    node.resume();
    c.disconnect();
    await proxy.close();
  }
}

/**
 * `status --watch` (the CLI's Redis service, in this process) through a
 * proxy: a cut, the watcher's subscriber resubscribing to a node paused
 * right then, and the watch ended (its signal: Ctrl-C) before the node answers.
 */
export async function watcherStopsDuringResubscribe(node: PrivateRedis): Promise<{ pausedAtResubscribe: boolean; events: QueueEvent[]; afterResume: QueueEvent[] }> {
  const pausing = await pausingProxy(node);
  const { proxy } = pausing;
  const context = { origin: '--lock-service', fromCommandLine: true, values: {}, env: {} };
  const name = uniqueLockName('watch');
  const events: QueueEvent[] = [];
  const service = await REDIS_SERVICE.address(`127.0.0.1:${proxy.port}`, context).connect();
  try {
    const stop = new AbortController();
    const watching = service.watchQueue!(name, (e) => events.push(e), stop.signal);
    await until(() => events.some((e) => e.type === 'queue'), 'the first listing');
    pausing.arm();
    proxy.cut();
    await until(() => pausing.fired === 1, 'the resubscribe to reach the node, paused');
    stop.abort();
    await watching;
    // The subscriber is closed by now: ioredis destroys a connection whose server
    // does not answer its FIN after disconnectTimeout (2 s), rejecting what it had pending.
    await new Promise((r) => setTimeout(r, 2500));
    node.resume();
    // The service still works: a second watch, cut off and subscribed again, sees a lock taken after that.
    const again = new AbortController();
    const afterResume: QueueEvent[] = [];
    const second = service.watchQueue!(name, (e) => afterResume.push(e), again.signal);
    await until(() => afterResume.some((e) => e.type === 'queue'), 'the second watch\'s first listing');
    proxy.cut();
    await until(() => afterResume.some((e) => e.type === 'reconnected'), 'the second watch to subscribe again after a cut');
    const direct = client(node.port);
    const lock = await acquireLock(direct, name, { ttlMs: 60_000 });
    await until(() => afterResume.some((e) => e.type === 'queue' && e.entries.length === 1), 'the watch to show the holder');
    await lock.release();
    direct.disconnect();
    again.abort();
    await second;
    return { pausedAtResubscribe: pausing.fired === 1, events, afterResume };
  } finally {
    node.resume();
    await service.close();
    await proxy.close();
  }
}

export interface StressFigures {
  grants: number;
  tokens: FencingToken[];
  gaveUp: number;
  noQuorum: number;
  faults: { pause: number; pauseAtResubscribe: number; kill: number; cut: number };
}

/**
 * Redlock over three private nodes, each behind a proxy: `contenders` sets
 * of clients acquire and release one lock in a loop (waiters that give up
 * now and then, at random), while one node at a time is paused (at random,
 * or, when `targeted`, at the moment a subscriber resubscribes after a cut), SIGKILLed and
 * restarted from its AOF, or cut off by its proxy. Never more than one of
 * the three at once: a majority always answers.
 */
export async function redlockStress(nodes: readonly PrivateRedis[], ms: number, { contenders = 3, targeted = true, gapMs = 100 }: { contenders?: number; targeted?: boolean; gapMs?: number } = {}): Promise<StressFigures> {
  const proxies = await Promise.all(nodes.map((n) => pausingProxy(n)));
  const sets = Array.from({ length: contenders }, () => proxies.map((p) => client(p.proxy.port)));
  const name = uniqueLockName('stress');
  const figures: StressFigures = { grants: 0, tokens: [], gaveUp: 0, noQuorum: 0, faults: { pause: 0, pauseAtResubscribe: 0, kill: 0, cut: 0 } };
  let done = false;
  let holders = 0;
  const sleep = (t: number): Promise<void> => new Promise((r) => setTimeout(r, t));
  const driver = (async () => {
    // Every kind in turn (each happens in a short run), on a node picked at random.
    for (let turn = 0; !done; turn++) {
      await sleep(gapMs + Math.random() * 2 * gapMs);
      if (done) break;
      const i = Math.floor(Math.random() * nodes.length);
      const node = nodes[i] as PrivateRedis;
      const p = proxies[i]!;
      // targeted false: only faults that land at random (a plain cut instead of a pause at a resubscribe).
      const kind = turn % 4 === 0 && !targeted ? 3 : turn % 4;
      if (kind === 0) {
        // A pause at the worst moment: a cut, and the node stops as the first subscriber resubscribes.
        p.arm();
        p.proxy.cut();
        figures.faults.cut++;
        const before = p.fired;
        const limit = performance.now() + 1000;
        while (p.fired === before && performance.now() < limit && !done) await sleep(5);
        p.disarm(); // no subscriber was waiting on this node: nothing to catch
        if (p.fired !== before) figures.faults.pauseAtResubscribe++;
        await sleep(200 + Math.random() * 400);
        node.resume();
      } else if (kind === 1) {
        node.pause();
        figures.faults.pause++;
        await sleep(100 + Math.random() * 500);
        node.resume();
      } else if (kind === 2) {
        await node.kill();
        figures.faults.kill++;
        await sleep(Math.random() * 300);
        await node.restart(); // from its AOF
      } else {
        p.proxy.cut();
        figures.faults.cut++;
      }
    }
  })();
  try {
    await Promise.all(
      sets.map(async (clients) => {
        while (!done) {
          // Some waiters give up early: a waiter leaving closes its subscribers, whatever state they are in.
          const giveUp = Math.random() < 0.3 ? AbortSignal.timeout(Math.floor(Math.random() * 300)) : undefined;
          let lock: RedisLock | null;
          try {
            lock = await acquireLock(clients, name, { ttlMs: 2000, nodeTimeoutMs: 100, timeoutMs: 10_000, ...(giveUp && { signal: giveUp }) });
          } catch (error) {
            if (error instanceof QuorumError) figures.noQuorum++;
            else if (error instanceof LockTimeoutError || (error as Error).name === 'TimeoutError') figures.gaveUp++;
            else throw error;
            continue;
          }
          holders++;
          if (holders !== 1) throw new Error(`${holders} holders at token ${lock.token}`);
          figures.tokens.push(lock.token);
          figures.grants++;
          await sleep(Math.random() * 10);
          holders--;
          await lock.release();
        }
      }).concat(
        (async () => {
          await sleep(ms);
          done = true;
        })(),
      ),
    );
  } finally {
    done = true;
    await driver;
    for (const n of nodes) n.resume();
    await Promise.all(nodes.map((n) => n.restart()));
    for (const c of sets.flat()) c.disconnect();
    await Promise.all(proxies.map((p) => p.proxy.close()));
  }
  return figures;
}
