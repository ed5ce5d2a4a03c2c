// npm run compare, the run itself (run-compare.ts parses the command line and
// prints; test/integration/package/compare.test.ts runs a short one): every source
// through the same scenarios, counted.
//
// Order: take the fault turns of the Redis set, the etcd cluster and the
// ZooKeeper ensemble (one at a time, always in this order); measure latency,
// source after source; then, all at once, chains that touch disjoint servers,
// each giving its turn back when it ends:
//   Redis pair  single-Redis failover (the primary/replica pair)
//   Redlock     paused holder (needs all five nodes), restart, clock jump
//               (the Redis turn is given back once both Redis chains end)
//   etcd        leader kill
//   ZooKeeper   leader kill
//   PostgreSQL  asynchronous and synchronous failover on a primary/replica
//               pair of its own (test/servers/pg-replica.sh, no turn: nobody
//               else breaks it) (./postgres.ts)
//   paused      the paused holders of single Redis, etcd, ZooKeeper (their
//               single nodes and the standalone server, which no fault
//               touches), PostgreSQL's withLease and paused holder (the
//               shared database), one scenario after the other
// Within a chain the fault trials run one after the other (each breaks and
// restores the chain's servers); a scenario's paused-holder trials run
// concurrently. Every part is timed (CompareReport.sections).
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
  /** Wall time of each part of the run, in the order they ended (several run at once: startS says when each began). */
  readonly sections?: readonly Section[];
}

/** One timed part of a run. */
export interface Section {
  readonly name: string;
  /** Seconds after runCompare began. */
  readonly startS: number;
  readonly seconds: number;
}

/** Every promise settled; then the first rejection's reasons together, if any. */
async function settledAll(work: readonly Promise<unknown>[]): Promise<void> {
  const settled = await Promise.allSettled(work);
  const failed = settled.flatMap((c) => (c.status === 'rejected' ? [c.reason as unknown] : []));
  if (failed.length > 0) throw new AggregateError(failed, failed.map((e) => (e instanceof Error ? e.message : String(e))).join('\n'));
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
  const sections: Section[] = [];
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

    const timed = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      try {
        return await work();
      } finally {
        const seconds = (performance.now() - t0) / 1000;
        sections.push({ name, startS: (t0 - started) / 1000, seconds });
        log(`${name}: done in ${seconds.toFixed(0)} s (load ${loadAverage()})`);
      }
    };
    const paused = (kind: SourceKind): Promise<PausedScenario> =>
      timed(`paused holder ${kind}`, () => {
        log(`paused holder ${kind}: ${trials} trials, ${options.pausedConcurrency} at a time`);
        return runPaused(PAUSED[kind], DEPLOYMENT[kind], trials, options.pausedConcurrency, resources, log);
      });
    const trialsOf = (label: string, fault: string, count: number, trial: (i: number) => Promise<FaultTrial>, recover: () => Promise<unknown>): Promise<FaultScenario> =>
      timed(label, () => {
        log(`${label}: ${count} trials`);
        return runTrials(fault, count, trial, recover, log);
      });
    // After a trial that failed half-way, put back only what its chain breaks
    // (the pair's and Redlock's trials run at once, on disjoint nodes).
    const healPair = (): Promise<string> => redisCtl('pair-reset');
    const healRedlock = async (): Promise<void> => {
      for (const node of ['1', '2', '3', '4', '5']) await redisCtl('restart', node);
    };
    const healEtcd = async (): Promise<void> => {
      await etcdCtl('heal');
      await etcdCtl('wait-healthy', '60');
    };

    const failovers = new Map<SourceKind, FaultScenario>();
    const clocks = new Map<SourceKind, FaultScenario>();
    const pauses = new Map<SourceKind, PausedScenario>();
    let syncFailover: FaultScenario | undefined;
    let lease: LeaseScenario | undefined;

    // The Redis set: the primary/replica pair and Redlock's five nodes are
    // disjoint, so the pair's failovers run beside Redlock's chain; the turn
    // is given back once both are done.
    const redisPairChain = async (): Promise<void> => {
      if (wanted.has('redis')) failovers.set('redis', await trialsOf('redis failover', REDIS_FAILOVER, trials, () => redisFailoverTrial(resources), healPair));
    };
    // Redlock's paused holder needs all five nodes, which its fault trials kill: before them.
    const redlockChain = async (): Promise<void> => {
      if (!wanted.has('redlock')) return;
      pauses.set('redlock', await paused('redlock'));
      failovers.set('redlock', await trialsOf('redlock restart', REDLOCK_RESTART, trials, (i) => redlockRestartTrial(resources, i), healRedlock));
      clocks.set('redlock', await trialsOf('redlock clock', REDLOCK_CLOCK, trials, (i) => redlockClockTrial(resources, i), healRedlock));
    };
    const redisChain = async (): Promise<void> => {
      try {
        await settledAll([redisPairChain(), redlockChain()]);
      } finally {
        await giveBack('redis');
      }
    };
    // A cluster's chain: its leader-kill trials on one pair of clients, closed
    // before the turn is given back.
    const leaderKillChain = async <P extends { close(): Promise<void> }>(
      kind: 'etcd' | 'zookeeper', open: () => Promise<P>, fault: string, trial: (pair: P) => Promise<FaultTrial>, recover: () => Promise<unknown>,
    ): Promise<void> => {
      if (!wanted.has(kind)) return;
      const pair = await open();
      try {
        failovers.set(kind, await trialsOf(`${kind} leader kill`, fault, trials, () => trial(pair), recover));
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
      // A failed trial leaves the pair as it was: the next trial rebuilds the replica first.
      const resetPg = (): Promise<string> => pgReplicaCtl('reset-primary');
      log(`postgres: ${pgTrials} trials per failover scenario (at most ${PG_MAX_TRIALS}: each rebuilds the replica), ${trials} paused-holder trials`);
      failovers.set('postgres', await trialsOf('postgres async failover', PG_ASYNC_FAILOVER, pgTrials, () => pgFailoverTrial(cluster, 'async', resources), resetPg));
      syncFailover = await trialsOf('postgres sync failover', PG_SYNC_FAILOVER, pgTrials, () => pgFailoverTrial(cluster, 'sync', resources), resetPg);
    };
    // The paused holders of the single Redis, etcd, ZooKeeper and PostgreSQL
    // run on servers no fault trial touches (the single Redis node, the single
    // etcd node, the standalone ZooKeeper, the shared database): one after the
    // other, beside the fault chains.
    const pausedLane = async (): Promise<void> => {
      for (const kind of ['redis', 'etcd', 'zookeeper'] as const) if (wanted.has(kind)) pauses.set(kind, await paused(kind));
      if (!wanted.has('postgres')) return;
      lease = await timed('postgres withLease', () => {
        log(`postgres withLease: ${pgTrials} trials`);
        return runLease(environmentServers().databaseUrl, pgTrials, log);
      });
      pauses.set('postgres', await paused('postgres'));
    };
    await timed('fault chains and paused holders', () => settledAll([redisChain(), etcdChain(), zookeeperChain(), postgresChain(), pausedLane()]));

    const reports = new Map<SourceKind, Omit<SourceReport, 'verdict' | 'latency' | 'deployment' | 'source' | 'trialsAsked'>>();
    for (const kind of options.sources) {
      const failover = failovers.get(kind);
      const pausedScenario = pauses.get(kind);
      if (failover === undefined || pausedScenario === undefined) continue;
      const clock = clocks.get(kind);
      reports.set(kind, {
        failover,
        paused: pausedScenario,
        ...(clock !== undefined && { clock }),
        ...(kind === 'postgres' && syncFailover !== undefined && { syncFailover }),
        ...(kind === 'postgres' && lease !== undefined && { lease }),
      });
    }

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
      sections,
    };
  } finally {
    for (const which of ['redis', 'etcd', 'zookeeper'] as const) await giveBack(which).catch((e: unknown) => log(`giving back the ${which} turn failed: ${String(e)}`));
    await pgCluster?.release().catch((e: unknown) => log(`releasing the PostgreSQL pair failed: ${String(e)}`));
    await resources.close();
  }
}
