// Scenario 1 for the single Redis, etcd and ZooKeeper: a failover while the
// lock is held. (Redlock's version, a node restarted without its data, is in
// redlock.ts.)
//   single Redis  the primary/replica pair (FK_REDIS_PAIR): replication held
//                 back by pausing the replica, the lock taken on the primary,
//                 the primary SIGKILLed, the replica resumed and promoted
//   etcd          the 3-node cluster: its leader SIGKILLed (restarted after)
//   ZooKeeper     the 3-node ensemble: its leader SIGKILLed (restarted after)
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import { etcdSession, etcdSource } from '../../src/sources/etcd/index.js';
import { redisSource } from '../../src/sources/redis/index.js';
import { lockKeys } from '../../src/sources/redis/scripts.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../src/sources/zookeeper/recipes/source.js';
import type { Lock } from '../../src/lock.js';
import type { LockSource } from '../../src/lock-source.js';
import { environmentServers } from '../helpers/server-env.js';
import { uniqueLockName } from '../helpers/unique.js';
import { etcdCtl, memberId, redisCtl, zkCtl } from './control.js';
import { leaderKillMissing, redisFailoverMissing } from './evidence.js';
import type { Resources } from './resources.js';
import { secondHolder, type FaultTrial } from './trial.js';

/** A Redis client that keeps reconnecting quietly while its node is down. */
export function redisClient(url: string): Redis {
  const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(url);
  if (m === null) throw new Error(`not a redis://host:port URL: ${url}`);
  const client = new Redis({ host: m[1] as string, port: Number(m[2]), retryStrategy: () => 50 });
  client.on('error', () => {});
  return client;
}

// Long enough that the first holder still holds when the second is granted
// (nothing here waits for a TTL to run out).
const REDIS_TTL_MS = 10_000;
// Not the default (a twentieth of the TTL, 500 ms): at load 50 on 2 cores a
// round trip to the healthy primary outlasted it in 13 trials of one run
// ("did not answer EVALSHA within 500 ms"), each failing the trial before
// its fault. A fifth of the TTL, as the CLI's single Redis takes; nothing
// the trial counts waits on it.
const REDIS_NODE_TIMEOUT_MS = 2_000;

export const REDIS_FAILOVER =
  'primary/replica pair: replica SIGSTOPped and its link dropped (CLIENT KILL TYPE replica: replication held back), lock taken on the primary, primary SIGKILLed, replica resumed and promoted';

/** One trial on the pair; the pair is re-created (pair-reset) after it. */
export async function redisFailoverTrial(resources: Resources): Promise<FaultTrial> {
  const [primaryUrl, replicaUrl] = environmentServers().redisPair;
  const primary = redisClient(primaryUrl);
  const replica = redisClient(replicaUrl);
  const name = uniqueLockName('cmp_redis');
  const [lockKey, counterKey] = lockKeys(name);
  let paused = false;
  try {
    const before = redisSource(primary, { ttlMs: REDIS_TTL_MS, nodeTimeoutMs: REDIS_NODE_TIMEOUT_MS });
    // A few grants that did reach the replica: its counter is where the primary's was.
    for (let i = 0; i < 3; i++) await (await before.acquireLock(name, { owner: 'earlier' })).release();
    const acked = Number(await primary.call('WAIT', ['1', '5000']));
    if (acked < 1) throw new Error('the replica did not acknowledge the earlier grants (is the pair in sync?)');
    await redisCtl('pause', 'replica');
    paused = true;
    // Pausing alone holds nothing back on one machine: the primary's stream
    // still lands in the stopped replica's socket buffer, and it applies it
    // when resumed. Dropping the link keeps the grant in the primary's backlog.
    const dropped = Number(await primary.call('CLIENT', ['KILL', 'TYPE', 'replica']));
    const first = await before.acquireLock(name, { owner: 'first' });
    await resources.writeFenced(name, first.token, 'first');
    await redisCtl('kill', 'primary');
    await redisCtl('resume', 'replica');
    paused = false;
    await redisCtl('promote');
    // The evidence: the new primary never saw the first grant (no key, an older counter).
    const [key, counter] = (await replica.call('MGET', [lockKey, counterKey])) as [string | null, string | null];
    const missing = redisFailoverMissing({ replicasDropped: dropped, promotedKey: key, promotedCounter: counter, firstToken: first.token });
    const rest = await secondHolder(first, redisSource(replica, { ttlMs: REDIS_TTL_MS, nodeTimeoutMs: REDIS_NODE_TIMEOUT_MS }), name, resources);
    return { missing, ...rest };
  } finally {
    if (paused) await redisCtl('resume', 'replica').catch(() => {});
    primary.disconnect();
    replica.disconnect();
    await redisCtl('pair-reset');
  }
}

/** The etcd cluster's clients for a scenario: the first holder's and the second's, each with its own lease. */
export class EtcdPair {
  readonly first = new Etcd3({ hosts: [...environmentServers().etcdCluster] });
  readonly second = new Etcd3({ hosts: [...environmentServers().etcdCluster] });
  // A 5 s lease rides out the election (0.6-1.6 s here) with room to spare.
  readonly firstSource = etcdSource(this.first, { ttlSeconds: 5 });
  readonly secondSource = etcdSource(this.second, { ttlSeconds: 5 });

  #closed = false;

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const etcd of [this.first, this.second]) {
      await etcdSession(etcd).close().catch(() => {});
      etcd.close();
    }
  }
}

export const ETCD_FAILOVER = '3-node cluster: leader SIGKILLed while the lock is held (restarted after the trial)';

export async function etcdFailoverTrial(pair: EtcdPair, resources: Resources): Promise<FaultTrial> {
  const name = uniqueLockName('cmp_etcd');
  await etcdCtl('wait-healthy', '60');
  const first = await pair.firstSource.acquireLock(name, { owner: 'first' });
  return leaderKilled({ ctl: etcdCtl, what: 'etcd', restart: 'restart' }, name, first, () => pair.secondSource, resources);
}

/** The ensemble's clients for a scenario: the first holder's session and the second's. */
export class ZooKeeperPair {
  private constructor(
    readonly first: ZooKeeperClient,
    readonly second: ZooKeeperClient,
  ) {}

  // 8 s sessions ride out an election and the reconnection after it.
  static async open(): Promise<ZooKeeperPair> {
    const connectString = environmentServers().zkEnsemble;
    const [first, second] = await Promise.all([0, 1].map(() => ZooKeeperClient.connect({ connectString, sessionTimeoutMs: 8000 })));
    return new ZooKeeperPair(first as ZooKeeperClient, second as ZooKeeperClient);
  }

  #closed = false;

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all([this.first.close().catch(() => {}), this.second.close().catch(() => {})]);
  }
}

export const ZOOKEEPER_FAILOVER = '3-node ensemble: leader SIGKILLed while the lock is held (restarted after the trial)';

export async function zookeeperFailoverTrial(pair: ZooKeeperPair, resources: Resources): Promise<FaultTrial> {
  const name = uniqueLockName('cmp_zk');
  const first = await zookeeperSource(pair.first).acquireLock(name, { owner: 'first' });
  return leaderKilled({ ctl: zkCtl, what: 'ZooKeeper', restart: 'start-node' }, name, first, () => zookeeperSource(pair.second), resources);
}

/** A 3-node cluster as its script drives it: `restart` brings a killed member back with its data. */
interface Cluster {
  readonly ctl: (...args: string[]) => Promise<string>;
  readonly what: string;
  readonly restart: 'restart' | 'start-node';
}

/**
 * The first holder writes, the cluster's leader is SIGKILLed, and the second
 * source tries for the lock; the killed member is restarted after the trial.
 * The evidence: the killed member was the leader, and another one leads now.
 */
async function leaderKilled(cluster: Cluster, name: string, first: Lock, second: () => LockSource, resources: Resources): Promise<FaultTrial> {
  const { ctl, what } = cluster;
  await resources.writeFenced(name, first.token, 'first');
  const leader = memberId(await ctl('leader'), `${what} leader`);
  const killed = memberId(await ctl('kill-leader'), `${what} kill-leader`);
  try {
    await ctl('wait-healthy', '60');
    const missing = leaderKillMissing({ leaderBefore: leader, killed, leaderAfter: memberId(await ctl('leader'), `${what} leader`) });
    const rest = await secondHolder(first, second(), name, resources);
    return { missing, ...rest };
  } finally {
    await ctl(cluster.restart, String(killed));
    await ctl('wait-healthy', '60');
  }
}
