// Redlock's two scenarios, both Kleppmann's: the first holder's grant stands
// on exactly three of the five nodes (nodes 4 and 5 were down when it
// acquired, and come back without its key), then one node of those three
// loses the key:
//   restart  the node is SIGKILLed and restarted without its data
//            (redis.sh restart-empty): the key and the lock's counter are gone
//   clock    the node's clock jumps forward, which makes its copy of the key
//            expire early. Simulated: PEXPIRE of the key to 5 ms on that node,
//            exactly what the jump does to it. libfaketime cannot run Debian's
//            redis-server here (it recurses in clock_gettime at start-up) and
//            a time namespace does not shift CLOCK_REALTIME, the clock Redis
//            expires keys by. The counter, which never expires, is untouched.
// The second client then asks nodes 3..5, say, which never saw the first
// grant or no longer have it: a majority.
import type { Redis } from 'ioredis';
import { acquireLock, redisSource, type RedisLock } from '../../src/sources/redis/index.js';
import { lockKeys } from '../../src/sources/redis/scripts.js';
import { environmentServers } from '../helpers/server-env.js';
import { uniqueLockName } from '../helpers/unique.js';
import { retrying, until } from '../helpers/wait.js';
import { redisCtl } from './control.js';
import { redlockClockMissing, redlockRestartMissing, type Missing } from './evidence.js';
import { redisClient } from './failover.js';
import type { Resources } from './resources.js';
import { secondHolder, type FaultTrial } from './trial.js';

export const REDLOCK_RESTART =
  "first holder's grant on nodes 1-3 (4 and 5 down while it acquired, then back); one of 1-3 SIGKILLed and restarted without its data";
export const REDLOCK_CLOCK =
  "first holder's grant on nodes 1-3 (4 and 5 down while it acquired, then back); one of 1-3 jumps its clock forward, simulated as PEXPIRE of the key to 5 ms there " +
  '(libfaketime recurses in clock_gettime with Debian\'s redis-server; time namespaces do not shift the wall clock)';

const TTL_MS = 30_000;
// The default for this TTL: a grant returns as soon as a majority answered, so a
// generous timeout costs the trial nothing, and on a loaded machine 100 ms was
// not always enough for a healthy node to answer.
const NODE_TIMEOUT_MS = 500;

/** The five nodes' clients, connected (a node that just came back may still be reconnecting). */
async function connected(): Promise<Redis[]> {
  const clients = environmentServers().redlock.map(redisClient);
  await Promise.all(clients.map((c, i) => until(async () => (await c.ping().catch(() => '')) === 'PONG', `Redlock node ${i + 1} to answer`, 30_000)));
  return clients;
}

async function portClosed(client: Redis): Promise<boolean> {
  const probe = redisClient(`redis://${client.options.host}:${client.options.port}`);
  try {
    probe.options.retryStrategy = () => null;
    return await probe.ping().then(() => false, () => true);
  } finally {
    probe.disconnect();
  }
}

/** The first grant, on nodes 1-3 only: 4 and 5 are killed for it and restarted from their AOF (without its key) after. */
async function grantOnThree(name: string): Promise<{ first: RedisLock; clients: Redis[] }> {
  await redisCtl('kill', '4');
  await redisCtl('kill', '5');
  const clients = environmentServers().redlock.map(redisClient);
  try {
    // Retried: a round without a majority (a node slow to answer) releases everything it claimed.
    const first = await retrying(() => acquireLock(clients, name, { ttlMs: TTL_MS, nodeTimeoutMs: NODE_TIMEOUT_MS, timeoutMs: 10_000, owner: 'first' }), 30_000, `the first grant of ${name}`);
    return { first, clients };
  } catch (error) {
    for (const c of clients) c.disconnect();
    throw error;
  } finally {
    // Its claims to 4 and 5 wait in those clients' offline queues: drop them, so they never arrive.
    clients[3]?.disconnect();
    clients[4]?.disconnect();
    await redisCtl('restart', '4');
    await redisCtl('restart', '5');
  }
}

async function trial(resources: Resources, victimIndex: number, fault: (name: string, victim: Redis, first: RedisLock) => Promise<Missing>): Promise<FaultTrial> {
  const name = uniqueLockName('cmp_redlock');
  const { first, clients } = await grantOnThree(name);
  let second: Redis[] = [];
  try {
    await resources.writeFenced(name, first.token, 'first');
    const missing = await fault(name, clients[victimIndex] as Redis, first);
    second = await connected();
    const rest = await secondHolder(first, redisSource(second, { ttlMs: TTL_MS, nodeTimeoutMs: NODE_TIMEOUT_MS }), name, resources);
    return { missing, ...rest };
  } finally {
    for (const c of [...clients, ...second]) c.disconnect();
  }
}

/** Nodes 1-3 take turns at being the one that loses the key. */
const victimOf = (i: number): number => i % 3;

export function redlockRestartTrial(resources: Resources, i: number): Promise<FaultTrial> {
  const index = victimOf(i);
  const node = String(index + 1);
  return trial(resources, index, async (name, victim) => {
    // Killed first, and restarted once its port is closed: restart-empty checks the
    // port right after its own kill and can find the dying process's listener there.
    await redisCtl('kill', node);
    await until(() => portClosed(victim), `node ${node}'s port to close`, 10_000);
    await redisCtl('restart-empty', node);
    // The evidence: the node serves again and has neither the key nor the counter.
    const [lockKey, counterKey] = lockKeys(name);
    await until(async () => (await victim.ping().catch(() => '')) === 'PONG', `node ${node} to answer`, 30_000);
    const [key, counter] = (await victim.call('MGET', [lockKey, counterKey])) as [string | null, string | null];
    return redlockRestartMissing({ key, counter });
  });
}

export function redlockClockTrial(resources: Resources, i: number): Promise<FaultTrial> {
  const index = victimOf(i);
  return trial(resources, index, async (name, victim, first) => {
    const [lockKey, counterKey] = lockKeys(name);
    const cut = Number(await victim.call('PEXPIRE', [lockKey, '5']));
    // The evidence: the key was there and carried a TTL we cut, it is gone now, and the counter stayed at the first token.
    await until(async () => Number(await victim.call('EXISTS', [lockKey])) === 0, `the key to expire on node ${index + 1}`, 5_000);
    const [exists, counter] = (await Promise.all([victim.call('EXISTS', [lockKey]), victim.call('GET', [counterKey])])) as [number, string | null];
    return redlockClockMissing({ pexpireReply: cut, keyExistsAfter: Number(exists), counter, firstToken: first.token });
  });
}
