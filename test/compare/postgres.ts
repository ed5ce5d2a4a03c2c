// npm run compare's PostgreSQL column: postgresSource on a primary and a
// real streaming replica of its own (./postgres-cluster.ts).
//
// Failover, twice: the replica streams from the primary through a proxy of
// this process; the lock is taken on the primary; the primary is SIGKILLed
// (its postmaster and every backend) and the replica promoted; a second
// client asks the promoted replica for the lock.
//   asynchronous  the proxy holds back the primary's WAL before the grant
//                 (the stream is stalled: the replica never receives the
//                 grant; pg_wal_replay_pause() would not do, promotion replays
//                 what was received), so the acknowledged grant is lost
//   synchronous   synchronous_standby_names = 'replica1': the grant is
//                 acknowledged only once the replica has it; the stream is
//                 stalled after it, then the same kill and promotion
// The paused holder: the suite's paused-holder steps (./paused.ts) with
// postgresSource through the CLI's postgres:// service, and two withLease
// rows (./postgres-lease.ts).
import pg from 'pg';
import { postgresSource, type PostgresLock } from '../../adapters/postgres/index.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import type { SourceUnderTest } from '../helpers/sources.js';
import { uniqueLockName } from '../helpers/unique.js';
import type { Missing } from './evidence.js';
import { pgReplicaCtl, queryOnce, quietPool, replicaCaughtUp, replicaState, type PgCluster } from './postgres-cluster.js';
import type { Resources } from './resources.js';
import { secondHolder, type FaultTrial } from './trial.js';

/**
 * The lease of the failover's sources: long enough that the first holder
 * still holds when the second asks (at 10 s, one trial in four at load 40
 * had its holder step down first).
 */
const FAILOVER_LEASE_MS = 15_000;

export const PG_ASYNC_FAILOVER =
  "asynchronous streaming replica (pg_basebackup): its WAL stream held back by a proxy on the replication connection, lock taken on the primary, primary's postmaster and backends SIGKILLed, replica promoted";
export const PG_SYNC_FAILOVER =
  "synchronous standby (synchronous_standby_names = 'replica1'): lock taken on the primary, then the replica's WAL stream held back, primary SIGKILLed, replica promoted";

/** What a PostgreSQL failover trial shows of its fault (pure: test it without a cluster). */
export interface PgFailoverEvidence {
  readonly mode: 'async' | 'sync';
  /** pg_stat_replication's sync_state of the replica just before the grant. */
  readonly replicaStateBefore: string | null;
  /** WAL bytes the proxy kept from the replica (async: after the grant, before the kill). */
  readonly heldBytes: number;
  /** The PID the kill reported (the primary's postmaster). */
  readonly killedPid: number;
  /** pg_is_in_recovery() on the replica after promote. */
  readonly promotedInRecovery: boolean;
  /** The first grant's entry row found on the promoted replica. */
  readonly grantOnReplica: boolean;
}

/** Empty when the trial's fault happened as described. */
export function pgFailoverMissing(e: PgFailoverEvidence): Missing {
  const missing: string[] = [];
  const expected = e.mode === 'sync' ? 'sync' : 'async';
  if (e.replicaStateBefore !== expected) missing.push(`the replica was ${e.replicaStateBefore ?? 'not streaming'} before the grant, not ${expected}`);
  if (!(e.killedPid > 0)) missing.push('no primary postmaster was killed');
  if (e.promotedInRecovery) missing.push('the replica is still in recovery after promote');
  if (e.mode === 'async') {
    if (e.heldBytes <= 0) missing.push('the proxy held back no WAL after the grant: the stream was not stalled');
    if (e.grantOnReplica) missing.push('the promoted replica has the first grant: it was not lost');
  }
  return missing;
}

export async function pgFailoverTrial(cluster: PgCluster, mode: 'async' | 'sync', resources: Resources): Promise<FaultTrial> {
  const name = uniqueLockName(`cmp_pg_${mode}`);
  const proxy = await TcpProxy.start({ host: '127.0.0.1', port: cluster.primaryPort });
  const firstPool = quietPool(cluster.primaryUrl);
  const secondPool = quietPool(cluster.replicaUrl);
  const firstSource = postgresSource(firstPool, { leaseMs: FAILOVER_LEASE_MS });
  const secondSource = postgresSource(secondPool, { leaseMs: FAILOVER_LEASE_MS });
  try {
    await pgReplicaCtl('rebuild-replica', String(proxy.port));
    if (mode === 'sync') await pgReplicaCtl('sync', 'on');
    // A few grants the replica did get: the sequence and the queue are where the primary's were.
    for (let i = 0; i < 3; i++) await (await firstSource.acquireLock(name, { owner: 'earlier' })).release();
    await replicaCaughtUp(cluster.primaryUrl, cluster.replicaUrl);
    const replicaStateBefore = await waitState(cluster.primaryUrl, mode);
    if (mode === 'async') proxy.holdReplies();
    const first: PostgresLock = await firstSource.acquireLock(name, { owner: 'first' });
    if (mode === 'sync') proxy.holdReplies();
    await resources.writeFenced(name, first.token, 'first');
    if (mode === 'async') await Promise.race([proxy.whenHeld(1), new Promise((r) => setTimeout(r, 5000).unref())]);
    const heldBytes = proxy.heldBytes;
    // Closed first: what it held is dropped, never delivered, and the replica cannot reconnect through it.
    await proxy.close();
    const killedPid = Number((await pgReplicaCtl('kill-primary')).split('\n').at(-1));
    await pgReplicaCtl('promote');
    const [state] = await queryOnce<{ r: boolean }>(cluster.replicaUrl, 'SELECT pg_is_in_recovery() AS r');
    const found = await queryOnce(cluster.replicaUrl, 'SELECT 1 FROM fencekeeper_lock_entries WHERE id = $1', [first.entry.toString()]);
    const missing = pgFailoverMissing({ mode, replicaStateBefore, heldBytes, killedPid, promotedInRecovery: state?.r !== false, grantOnReplica: found.length > 0 });
    const rest = await secondHolder(first, secondSource, name, resources);
    return { missing, ...rest };
  } finally {
    await proxy.close();
    await Promise.all([closeQuietly(firstSource, firstPool), closeQuietly(secondSource, secondPool)]);
    // The primary back, the promoted replica stopped; the next trial (and the
    // pair's release) starts from there: the next trial rebuilds the replica
    // first, so rebuilding it here too would be a pg_basebackup for nothing.
    await pgReplicaCtl('reset-primary');
  }
}

async function waitState(primaryUrl: string, mode: 'async' | 'sync'): Promise<string | null> {
  const started = performance.now();
  let state = await replicaState(primaryUrl);
  // After `sync on`, the reload reaches the walsender a moment later.
  while (state !== mode && performance.now() - started < 10_000) {
    await new Promise((r) => setTimeout(r, 100));
    state = await replicaState(primaryUrl);
  }
  return state;
}

/** End a source and its pool, bounded: its server may be dead (its session rows go with it). */
async function closeQuietly(source: { close(): Promise<void> }, pool: pg.Pool): Promise<void> {
  const bound = <T>(p: Promise<T>): Promise<unknown> => Promise.race([p.catch(() => undefined), new Promise((r) => setTimeout(r, 5000).unref())]);
  await bound(source.close());
  await bound(pool.end());
}

/**
 * postgresSource as the paused-holder steps run it: the holder process gets
 * it through the CLI's postgres:// service (on the shared test database, where
 * the resources' migrate() made its tables: a paused process is no fault of
 * the server's), with a 2 s session lease.
 */
export function postgresUnderTest(databaseUrl: string): SourceUnderTest {
  return {
    kind: 'postgres',
    lockService: databaseUrl,
    grantMs: 2000,
    async open() {
      const pool = quietPool(databaseUrl);
      const source = postgresSource(pool, { leaseMs: 2000 });
      return {
        source,
        close: async () => {
          await source.close();
          await pool.end();
        },
      };
    },
  };
}

/** The source the latency row measures: on the column's primary (asynchronous replica attached). */
export function openPgForLatency(cluster: PgCluster): { source: ReturnType<typeof postgresSource>; close(): Promise<void> } {
  const pool = quietPool(cluster.primaryUrl);
  const source = postgresSource(pool, { leaseMs: FAILOVER_LEASE_MS });
  return { source, close: () => closeQuietly(source, pool) };
}
