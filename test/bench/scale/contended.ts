// Contended grants/s vs processes on one lock: P child processes (./child.ts), each
// with its own source (session, connections), loop acquire + release on the same
// lock for `runMs`; the grants of all of them over the run. Started together once
// all are connected and warm. PostgreSQL: each child's pool is small (pgMax, the
// source keeps one connection for LISTEN and its heartbeat), and a point is skipped,
// saying why, where P pools would not fit in max_connections beside the
// connections already open.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { servers, type SourceFamily } from './sources.js';

export interface ContendedPoint {
  readonly processes: number;
  readonly grantsPerSecond: number;
  readonly perProcessMin: number;
  readonly perProcessMax: number;
}

const CHILD = fileURLToPath(new URL('./child.js', import.meta.url));
export const PG_CHILD_POOL = 2;

/** Free PostgreSQL connections now (max_connections minus those open, minus superuser_reserved_connections). */
export async function pgFreeConnections(): Promise<{ free: number; max: number; open: number }> {
  const c = new pg.Client({ connectionString: servers.pg });
  await c.connect();
  try {
    const { rows } = await c.query<{ max: string; open: string; reserved: string }>(
      `SELECT current_setting('max_connections') AS max, (SELECT count(*) FROM pg_stat_activity)::text AS open, current_setting('superuser_reserved_connections') AS reserved`,
    );
    const r = rows[0]!;
    return { free: Number(r.max) - Number(r.open) - Number(r.reserved), max: Number(r.max), open: Number(r.open) };
  } finally {
    await c.end();
  }
}

function once<T>(child: ChildProcess, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null): void => reject(new Error(`child ${child.pid} exited (${code}) before ${what}`));
    child.once('exit', onExit);
    child.once('message', (m) => {
      child.off('exit', onExit);
      resolve(m as T);
    });
  });
}

export async function contendedAt(family: SourceFamily, processes: number, runMs: number, o: { pgSchemaName?: string | undefined }): Promise<ContendedPoint> {
  const name = `scale/contended/${family}/${processes}/${Date.now().toString(36)}`;
  const children = Array.from({ length: processes }, () =>
    fork(CHILD, [family, name, o.pgSchemaName ?? '-', String(PG_CHILD_POOL)], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  try {
    await Promise.all(children.map((c) => once(c, 'ready')));
    const results = children.map((c) => once<{ grants: number }>(c, 'its count'));
    for (const c of children) c.send({ runMs });
    const grants = (await Promise.all(results)).map((r) => r.grants);
    const total = grants.reduce((a, b) => a + b, 0);
    return { processes, grantsPerSecond: (total * 1000) / runMs, perProcessMin: Math.min(...grants), perProcessMax: Math.max(...grants) };
  } finally {
    // Each child exits by itself after its report; one still alive (a failure) is ended by its PID.
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill();
  }
}
