// npm run compare, the run itself (run-compare.ts parses the command line and
// prints; test/integration/package/compare.test.ts runs a short one): every source
// through the same scenarios, counted.
//
// Order: take the fault turns of the Redis set, the etcd cluster and the
// ZooKeeper ensemble (one at a time, always in this order); measure latency,
// source after source; then three chains at once, one per server set, each
// giving its turn back when it ends:
//   Redis      single-Redis failover, Redlock restart, Redlock clock jump,
//              paused holder (single Redis, Redlock)
//   etcd       leader kill, paused holder
//   ZooKeeper  leader kill, paused holder
//   PostgreSQL asynchronous and synchronous failover on a primary/replica
//              pair of its own (test/servers/pg-replica.sh, no turn: nobody
//              else breaks it), withLease, paused holder (./postgres.ts)
// Within a chain the fault trials run one after the other (each breaks and
// restores the chain's servers); the paused-holder trials run concurrently.
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { Etcd3 } from 'etcd3';
import { etcdSession, etcdSource } from '../../src/sources/etcd/index.js';
import { redisSource } from '../../src/sources/redis/index.js';
import type { LockSource } from '../../src/lock-source.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../src/sources/zookeeper/recipes/source.js';
import { environmentServers } from '../helpers/server-env.js';
import { ETCD, REDIS, REDLOCK, ZOOKEEPER, type SourceUnderTest } from '../helpers/sources.js';
import { etcdCtl, holdEnsemble, holdEtcd, holdRedis, redisCtl, restoreEnsemble, type Turn } from './control.js';
import {
  ETCD_FAILOVER,
  EtcdPair,
  REDIS_FAILOVER,
  ZOOKEEPER_FAILOVER,
  ZooKeeperPair,
  etcdFailoverTrial,
  redisClient,
  redisFailoverTrial,
  zookeeperFailoverTrial,
} from './failover.js';
import { measureLatency, type Latency } from './latency.js';
import { runPaused, type PausedScenario } from './paused.js';
import { REDLOCK_CLOCK, REDLOCK_RESTART, redlockClockTrial, redlockRestartTrial } from './redlock.js';
import { faultsNotVerified, scenariosIncomplete } from './evidence.js';
import { Resources } from './resources.js';
import { runTrials, type FaultScenario, type FaultTrial } from './trial.js';
import { verdictOf, type Verdict } from './verdict.js';
import { PG_ASYNC_FAILOVER, PG_SYNC_FAILOVER, openPgForLatency, pgFailoverTrial, postgresUnderTest } from './postgres.js';
import { acquirePgCluster, pgReplicaCtl, type PgCluster } from './postgres-cluster.js';
import { runLease, type LeaseScenario } from './postgres-lease.js';

export const SOURCE_KINDS = ['redis', 'redlock', 'etcd', 'zookeeper', 'postgres'] as const;

/**
 * The PostgreSQL column's failover trials (each rebuilds the replica with
 * pg_basebackup and waits out a lease): at most this many, printed.
 */
export const PG_MAX_TRIALS = 4;
export type SourceKind = (typeof SOURCE_KINDS)[number];

export interface CompareOptions {
  /** Trials per failover, clock and pause scenario and source. */
  readonly trials: number;
  readonly sources: readonly SourceKind[];
  /** Acquire/release cycles of the latency measurement, per source. */
  readonly latencyCycles: number;
  /** Paused holders of one source at once. */
  readonly pausedConcurrency: number;
  readonly log: (line: string) => void;
}

export interface SourceReport {
  readonly source: SourceKind;
  /** Where its fault scenarios and latency ran. */
  readonly deployment: string;
  readonly failover: FaultScenario;
  /** Redlock only: its nodes' clocks matter to the lock. */
  readonly clock?: FaultScenario;
  readonly paused: PausedScenario;
  /** PostgreSQL only: the same failover with a synchronous standby. */
  readonly syncFailover?: FaultScenario;
  /** PostgreSQL only: the paused holder against withLease. */
  readonly lease?: LeaseScenario;
  /** PostgreSQL only: the verdict with the synchronous standby. */
  readonly syncVerdict?: Verdict;
  /** Trials asked of this source's scenarios (fewer than the run's for PostgreSQL). */
  readonly trialsAsked: number;
  readonly latency: Latency;
  readonly verdict: Verdict;
}

export interface CompareReport {
  readonly trials: number;
  readonly machine: { readonly cores: number; readonly loadBefore: string; readonly loadAfter: string };
  readonly seconds: number;
  readonly sources: readonly SourceReport[];
  /** Every scenario with a trial whose evidence did not show its fault (./evidence.ts: faultsNotVerified): the run then fails. */
  readonly notVerified: readonly string[];
  /** Trials that failed and were run again. */
  readonly errors: number;
  /** "source scenario" for every scenario that ran fewer trials than asked (too many failed): the run then fails. */
  readonly incomplete: readonly string[];
}

export const loadAverage = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const load1 = (): number => Number(loadAverage().split(' ')[0]);

const DEPLOYMENT: Record<SourceKind, string> = {
  redis: 'primary + asynchronous replica (FK_REDIS_PAIR); pause scenario: the single node (FK_REDIS)',
  redlock: '5 independent nodes (FK_REDLOCK), quorum counter token',
  etcd: '3-node cluster (FK_ETCD_CLUSTER); pause scenario: the single node (FK_ETCD)',
  zookeeper: '3-node ensemble (FK_ZK_ENSEMBLE); pause scenario: the standalone server (FK_ZK_STANDALONE)',
  postgres: 'primary + streaming replica of its own (test/servers/pg-replica.sh, PostgreSQL 15); pause and withLease scenarios: the shared test database (DATABASE_URL)',
};

const PAUSED: Record<SourceKind, SourceUnderTest> = {
  redis: REDIS,
  redlock: REDLOCK,
  etcd: ETCD,
  zookeeper: ZOOKEEPER,
  get postgres() {
    return postgresUnderTest(environmentServers().databaseUrl);
  },
};

/** The failover deployment of a source as a LockSource, for the latency figures. */
async function openForLatency(kind: SourceKind, pg: PgCluster | undefined): Promise<{ source: LockSource; close(): Promise<void> }> {
  const servers = environmentServers();
  switch (kind) {
    case 'postgres':
      return openPgForLatency(pg as PgCluster);
    case 'redis': {
      const client = redisClient(servers.redisPair[0]);
      return { source: redisSource(client, { ttlMs: 10_000 }), close: async () => client.disconnect() };
    }
    case 'redlock': {
      const clients = servers.redlock.map(redisClient);
      return { source: redisSource(clients, { ttlMs: 10_000 }), close: async () => clients.forEach((c) => c.disconnect()) };
    }
    case 'etcd': {
      const etcd = new Etcd3({ hosts: [...servers.etcdCluster] });
      return {
        source: etcdSource(etcd, { ttlSeconds: 5 }),
        close: async () => {
          await etcdSession(etcd).close();
          etcd.close();
        },
      };
    }
    case 'zookeeper': {
      const zk = await ZooKeeperClient.connect({ connectString: servers.zkEnsemble, sessionTimeoutMs: 8000 });
      return { source: zookeeperSource(zk), close: () => zk.close() };
    }
  }
}

export async function runCompare(options: CompareOptions): Promise<CompareReport> {
  const { trials, log } = options;
  const wanted = new Set(options.sources);
  const started = performance.now();
  const loadBefore = loadAverage();
  const resources = await Resources.open();
  const turns: { redis?: Turn; etcd?: Turn; zookeeper?: Turn } = {};
  let pgCluster: PgCluster | undefined;
  const giveBack = async (which: keyof typeof turns): Promise<void> => {
    const turn = turns[which];
    delete turns[which];
    await turn?.();
  };
  try {
    log('taking the fault turns (other runs that break these servers go one at a time)');
    if (wanted.has('redis') || wanted.has('redlock')) turns.redis = await holdRedis();
    if (wanted.has('etcd')) turns.etcd = await holdEtcd();
    if (wanted.has('zookeeper')) turns.zookeeper = await holdEnsemble();
    if (wanted.has('postgres')) {
      log('starting the PostgreSQL primary and its streaming replica (test/servers/pg-replica.sh)');
      pgCluster = await acquirePgCluster();
    }

    const latency = new Map<SourceKind, Latency>();
    for (const kind of options.sources) {
      const { source, close } = await openForLatency(kind, pgCluster);
      try {
        latency.set(kind, await measureLatency(source, options.latencyCycles, load1));
      } finally {
        await close();
      }
      const l = latency.get(kind) as Latency;
      log(`latency ${kind}: p50 ${l.p50Ms.toFixed(2)} ms, p99 ${l.p99Ms.toFixed(2)} ms, ${l.cyclesPerSecond.toFixed(0)} cycles/s`);
    }

    const paused = (kind: SourceKind): Promise<PausedScenario> => {
      log(`paused holder ${kind}: ${trials} trials, ${options.pausedConcurrency} at a time`);
      return runPaused(PAUSED[kind], DEPLOYMENT[kind], trials, options.pausedConcurrency, resources, log);
    };
    const trialsOf = (label: string, fault: string, trial: (i: number) => Promise<FaultTrial>, recover: () => Promise<unknown>): Promise<FaultScenario> => {
      log(`${label}: ${trials} trials`);
      return runTrials(fault, trials, trial, recover, log);
    };
    // After a trial that failed half-way: every node up again (the pair re-created if it is not in sync).
    const healRedis = (): Promise<string> => redisCtl('heal');
    const healEtcd = async (): Promise<void> => {
      await etcdCtl('heal');
      await etcdCtl('wait-healthy', '60');
    };

    const reports = new Map<SourceKind, Omit<SourceReport, 'verdict' | 'latency' | 'deployment' | 'source' | 'trialsAsked'>>();
    const redisChain = async (): Promise<void> => {
      try {
        if (wanted.has('redis')) {
          const failover = await trialsOf('redis failover', REDIS_FAILOVER, () => redisFailoverTrial(resources), healRedis);
          reports.set('redis', { failover, paused: await paused('redis') });
        }
        if (wanted.has('redlock')) {
          const failover = await trialsOf('redlock restart', REDLOCK_RESTART, (i) => redlockRestartTrial(resources, i), healRedis);
          const clock = await trialsOf('redlock clock', REDLOCK_CLOCK, (i) => redlockClockTrial(resources, i), healRedis);
          reports.set('redlock', { failover, clock, paused: await paused('redlock') });
        }
      } finally {
        await giveBack('redis');
      }
    };
    // A cluster's chain: its leader-kill trials on one pair of clients, closed
    // before the turn is given back, then the paused holder (which takes no turn).
    const leaderKillChain = async <P extends { close(): Promise<void> }>(
      kind: 'etcd' | 'zookeeper', open: () => Promise<P>, fault: string, trial: (pair: P) => Promise<FaultTrial>, recover: () => Promise<unknown>,
    ): Promise<void> => {
      if (!wanted.has(kind)) return;
      const pair = await open();
      try {
        const failover = await trialsOf(`${kind} leader kill`, fault, () => trial(pair), recover);
        await pair.close();
        await giveBack(kind);
        reports.set(kind, { failover, paused: await paused(kind) });
      } finally {
        await pair.close();
        await giveBack(kind);
      }
    };
    const etcdChain = (): Promise<void> =>
      leaderKillChain('etcd', async () => new EtcdPair(), ETCD_FAILOVER, (pair) => etcdFailoverTrial(pair, resources), healEtcd);
    const zookeeperChain = (): Promise<void> =>
      leaderKillChain('zookeeper', () => ZooKeeperPair.open(), ZOOKEEPER_FAILOVER, (pair) => zookeeperFailoverTrial(pair, resources), restoreEnsemble);
    const pgTrials = Math.min(trials, PG_MAX_TRIALS);
    const postgresChain = async (): Promise<void> => {
      if (!wanted.has('postgres')) return;
      const cluster = pgCluster as PgCluster;
      const resetPg = (): Promise<string> => pgReplicaCtl('reset');
      log(`postgres: ${pgTrials} trials per failover scenario (at most ${PG_MAX_TRIALS}: each rebuilds the replica), ${trials} paused-holder trials`);
      const failover = await runTrials(PG_ASYNC_FAILOVER, pgTrials, () => pgFailoverTrial(cluster, 'async', resources), resetPg, log);
      const syncFailover = await runTrials(PG_SYNC_FAILOVER, pgTrials, () => pgFailoverTrial(cluster, 'sync', resources), resetPg, log);
      log(`postgres withLease: ${pgTrials} trials`);
      const lease = await runLease(environmentServers().databaseUrl, pgTrials, log);
      reports.set('postgres', { failover, syncFailover, lease, paused: await paused('postgres') });
    };
    const chains = await Promise.allSettled([redisChain(), etcdChain(), zookeeperChain(), postgresChain()]);
    const failed = chains.flatMap((c) => (c.status === 'rejected' ? [c.reason as unknown] : []));
    if (failed.length > 0) throw new AggregateError(failed, failed.map((e) => (e instanceof Error ? e.message : String(e))).join('\n'));

    const sources: SourceReport[] = options.sources.map((kind) => {
      const r = reports.get(kind);
      if (r === undefined) throw new Error(`no report for ${kind}`);
      const l = latency.get(kind) as Latency;
      const syncVerdict = r.syncFailover === undefined ? undefined : verdictOf({ failover: r.syncFailover, paused: r.paused });
      return { source: kind, deployment: DEPLOYMENT[kind], ...r, ...(syncVerdict !== undefined && { syncVerdict }), trialsAsked: kind === 'postgres' ? pgTrials : trials, latency: l, verdict: verdictOf(r) };
    });
    // PostgreSQL's failovers and withLease ask fewer trials (pgTrials); its paused holder the run's.
    const syncCounts = sources.flatMap((s) => (s.syncFailover === undefined ? [] : [{ source: `${s.source} synchronous`, failover: s.syncFailover, paused: s.paused }]));
    const notVerified = [...new Set(faultsNotVerified([...sources, ...syncCounts]))];
    const incomplete = [
      ...scenariosIncomplete(sources.filter((s) => s.source !== 'postgres'), trials),
      ...sources.flatMap((s) =>
        s.source !== 'postgres'
          ? []
          : [
              ...(s.failover.trials < pgTrials ? ['postgres failover'] : []),
              ...((s.syncFailover?.trials ?? 0) < pgTrials ? ['postgres synchronous failover'] : []),
              ...((s.lease?.trials ?? 0) < pgTrials ? ['postgres withLease'] : []),
              ...(s.paused.trials < trials ? ['postgres paused'] : []),
            ],
      ),
    ];
    const errors = sources.reduce(
      (n, s) => n + s.failover.errors.length + (s.clock?.errors.length ?? 0) + s.paused.errors.length + (s.syncFailover?.errors.length ?? 0) + (s.lease?.errors.length ?? 0),
      0,
    );
    return {
      trials,
      machine: { cores: cpus().length, loadBefore, loadAfter: loadAverage() },
      seconds: (performance.now() - started) / 1000,
      sources,
      notVerified,
      errors,
      incomplete,
    };
  } finally {
    for (const which of ['redis', 'etcd', 'zookeeper'] as const) await giveBack(which).catch((e: unknown) => log(`giving back the ${which} turn failed: ${String(e)}`));
    await pgCluster?.release().catch((e: unknown) => log(`releasing the PostgreSQL pair failed: ${String(e)}`));
    await resources.close();
  }
}
