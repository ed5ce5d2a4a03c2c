// The PostgreSQL column's withLease rows: a holder process
// (test/fixtures/postgres-source-holder.mjs) SIGSTOPped past its session
// lease, then a successor granted, then the holder resumed.
//   outside  paused between its work; on resume it reads lock.held and tries
//            withLease (an INSERT): committed = a stale write accepted
//   inside   paused inside withLease after its first INSERT; the successor
//            must be granted within lease + 2 s (the paused transaction is
//            bounded by the lease); on resume it INSERTs again and commits:
//            any of its rows in the table = a stale write accepted
// On the shared test database (a paused process is no fault of the server's).
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { postgresSource } from '../../adapters/postgres/index.js';
import { jsonLines } from '../helpers/json-lines.js';
import { uniqueLockName, uniqueTable } from '../helpers/unique.js';
import { quietPool } from './postgres-cluster.js';

const HOLDER = fileURLToPath(new URL('../fixtures/postgres-source-holder.mjs', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LEASE_MS = 2000;
/** The bound the issue sets for a takeover from a holder paused inside withLease. */
const INSIDE_BOUND_MS = LEASE_MS + 2000;

export interface LeaseScenario {
  readonly fault: string;
  readonly trials: number;
  /** outside: lock.held true at the first check after SIGCONT. */
  readonly heldAfterResume: number;
  /** outside: withLease committed after the resume. */
  readonly outsideCommitted: number;
  /** inside: the successor was granted within lease + 2 s of asking. */
  readonly grantedWithinBound: number;
  /** inside: any write of the paused transaction committed. */
  readonly insideCommitted: number;
  readonly errors: readonly string[];
}

interface Holder {
  readonly child: ChildProcess;
  next(): Promise<Record<string, unknown>>;
  send(line: string): void;
}

function startHolder(databaseUrl: string, lock: string, table: string): Holder {
  const child = spawn(process.execPath, [HOLDER], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL: databaseUrl, FK_SCHEMA: 'public', FK_LOCK: lock, FK_LEASE_MS: String(LEASE_MS), FK_TABLE: table },
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  const next = jsonLines(child.stdout!, 30_000, 'a line from the holder');
  return { child, next, send: (line) => child.stdin!.write(`${line}\n`) };
}

interface LeaseTrial {
  readonly heldAfterResume: boolean;
  readonly outsideCommitted: boolean;
  readonly grantedWithinBound: boolean;
  readonly insideCommitted: boolean;
}

async function leaseTrial(databaseUrl: string, admin: pg.Pool, table: string): Promise<LeaseTrial> {
  const pool = quietPool(databaseUrl);
  const successor = postgresSource(pool, { leaseMs: LEASE_MS });
  const holders: Holder[] = [];
  try {
    // outside withLease
    const outsideLock = uniqueLockName('cmp_pg_lease_out');
    const a = startHolder(databaseUrl, outsideLock, table);
    holders.push(a);
    await a.next();
    a.child.kill('SIGSTOP');
    const nextA = await successor.acquireLock(outsideLock, { timeoutMs: 30_000 });
    a.child.kill('SIGCONT');
    a.send('check');
    const checked = await a.next();
    await nextA.release();

    // inside withLease
    const insideLock = uniqueLockName('cmp_pg_lease_in');
    const b = startHolder(databaseUrl, insideLock, table);
    holders.push(b);
    await b.next();
    b.send('work');
    await b.next(); // {inside: true}: its first INSERT is done, the transaction open
    b.child.kill('SIGSTOP');
    const asked = performance.now();
    const nextB = await successor.acquireLock(insideLock, { timeoutMs: 30_000 });
    const waitedMs = performance.now() - asked;
    b.child.kill('SIGCONT');
    b.send('resume');
    await b.next(); // {work: ...}
    await nextB.release();
    const rows = await admin.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${table} WHERE note IN ('inside-1', 'inside-2')`);
    return {
      heldAfterResume: checked['held'] === true,
      outsideCommitted: checked['withLease'] === 'committed',
      grantedWithinBound: waitedMs <= INSIDE_BOUND_MS,
      insideCommitted: Number(rows.rows[0]?.n) > 0,
    };
  } finally {
    for (const h of holders) {
      h.child.kill('SIGCONT');
      h.child.kill('SIGKILL');
    }
    await successor.close().catch(() => {});
    await pool.end().catch(() => {});
  }
}

/** `trials` withLease trials, one after the other (each has its own table: the inside count is per trial). */
export async function runLease(databaseUrl: string, trials: number, log: (line: string) => void): Promise<LeaseScenario> {
  const admin = quietPool(databaseUrl, 2);
  const done: LeaseTrial[] = [];
  const errors: string[] = [];
  try {
    for (let i = 0; done.length < trials && errors.length <= trials; i++) {
      const table = uniqueTable('compare_lease');
      await admin.query(`CREATE TABLE ${table} (note text)`);
      try {
        done.push(await leaseTrial(databaseUrl, admin, table));
      } catch (error) {
        errors.push((error as Error).message.split('\n')[0] ?? String(error));
        log(`  postgres withLease: a trial failed (run again): ${errors.at(-1)}`);
      } finally {
        await admin.query(`DROP TABLE IF EXISTS ${table}`);
      }
    }
  } finally {
    await admin.end();
  }
  const count = (f: (t: LeaseTrial) => boolean): number => done.filter(f).length;
  return {
    fault: `holder SIGSTOPped past its ${LEASE_MS} ms lease between its writes (then withLease), and inside withLease (then its next INSERT and COMMIT); successor granted; holder SIGCONTed`,
    trials: done.length,
    heldAfterResume: count((t) => t.heldAfterResume),
    outsideCommitted: count((t) => t.outsideCommitted),
    grantedWithinBound: count((t) => t.grantedWithinBound),
    insideCommitted: count((t) => t.insideCommitted),
    errors,
  };
}
