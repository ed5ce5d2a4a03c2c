// The PostgreSQL column's own servers: a primary and a streaming replica
// made with pg_basebackup (test/servers/pg-replica.sh), on their own ports,
// never the machine's shared server. This process acquires them (as
// FK_USER_PID) and drives their faults through the script.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate } from '../../adapters/postgres/index.js';

const SCRIPT = fileURLToPath(new URL('../servers/pg-replica.sh', import.meta.url));

/** Run pg-replica.sh with `args`; its stdout, trimmed. */
export function pgReplicaCtl(...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('bash', [SCRIPT, ...args], { timeout: 300_000, env: { ...process.env, FK_USER_PID: String(process.pid) } }, (error, stdout, stderr) => {
      if (error) reject(new Error(`pg-replica.sh ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

export interface PgCluster {
  readonly primaryUrl: string;
  readonly replicaUrl: string;
  readonly primaryPort: number;
  release(): Promise<void>;
}

/** Start (or reuse) the pair; release() stops it if this process started it and nobody else uses it. */
export async function acquirePgCluster(): Promise<PgCluster> {
  const out = await pgReplicaCtl('acquire');
  const env = Object.fromEntries(out.split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const need = (k: string): string => {
    const v = env[k];
    if (v === undefined || v === '') throw new Error(`pg-replica.sh acquire printed no ${k}: ${out}`);
    return v;
  };
  // The source's tables, on the primary (the replica gets them by streaming, and every rebuild copies them).
  const pool = quietPool(need('FK_PG_PRIMARY_URL'), 1);
  try {
    await migrate(pool);
  } finally {
    await pool.end();
  }
  return {
    primaryUrl: need('FK_PG_PRIMARY_URL'),
    replicaUrl: need('FK_PG_REPLICA_URL'),
    primaryPort: Number(need('FK_PG_REPLICA_PRIMARY_PORT')),
    release: async () => void (await pgReplicaCtl('release')),
  };
}

/** A pool that stays quiet while its server is down (the failover kills it on purpose). */
export function quietPool(url: string, max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis: 5000 });
  pool.on('error', () => {});
  return pool;
}

/** One statement on a fresh connection, closed after. */
export async function queryOnce<R extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/** Until the replica has replayed everything the primary has written so far (its WAL position now). */
export async function replicaCaughtUp(primaryUrl: string, replicaUrl: string, limitMs = 30_000): Promise<void> {
  const [{ lsn }] = (await queryOnce<{ lsn: string }>(primaryUrl, 'SELECT pg_current_wal_lsn()::text AS lsn')) as [{ lsn: string }];
  const started = performance.now();
  for (;;) {
    const [row] = await queryOnce<{ behind: boolean }>(replicaUrl, 'SELECT pg_last_wal_replay_lsn() < $1::pg_lsn AS behind', [lsn]);
    if (row?.behind === false) return;
    if (performance.now() - started > limitMs) throw new Error(`the replica has not replayed ${lsn} within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The replica as the primary sees it: pg_stat_replication's sync_state ('async', 'sync'), null when not streaming. */
export async function replicaState(primaryUrl: string): Promise<string | null> {
  const rows = await queryOnce<{ sync_state: string }>(primaryUrl, "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'replica1' AND state = 'streaming'");
  return rows[0]?.sync_state ?? null;
}
