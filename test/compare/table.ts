// The text output of npm run compare: a table per source (counts out of
// trials, the trials beside every count), its verdict, then the seeds' table
// with every source side by side.
import type { CompareReport, SourceKind, SourceReport } from './compare.js';
import { runFailures } from './evidence.js';
import type { FaultScenario } from './trial.js';

/** A source's column title, in the text table and the HTML page. */
export const TITLE: Record<SourceKind, string> = {
  redis: 'single Redis',
  redlock: 'Redlock over 5',
  etcd: 'etcd (3-node cluster)',
  zookeeper: 'ZooKeeper (3-node ensemble)',
  postgres: 'PostgreSQL (primary + replica)',
};

export type Row = readonly [scenario: string, row: string, count: string, trials: string];

const triple = (w: { postgres: number; s3: number; http: number }): string => `${w.postgres}/${w.s3}/${w.http}`;
const sum = (w: { postgres: number; s3: number; http: number }): number => w.postgres + w.s3 + w.http;
const ms = (x: number): string => (x < 10 ? x.toFixed(2) : x.toFixed(1));

function faultRows(label: string, f: FaultScenario, secondRow: string): Row[] {
  const n = String(f.trials);
  return [
    [label, 'fault injected (with its evidence)', String(f.injected), n],
    ['', 'first holder still held the lock (lock.held) when the second asked', String(f.firstHeld), n],
    ['', secondRow, String(f.doubleGrants), n],
    ['', "second grant's token <= the first holder's (token regression)", String(f.tokenRegressions), n],
    ['', "first holder's write after the second's, old token, accepted by fenced PG / S3 / HTTP", triple(f.staleAccepted), n],
  ];
}

/** One source's table: scenario, row, count, trials (the text table and the HTML page print the same rows). */
export function rowsOf(s: SourceReport): Row[] {
  const rows: Row[] = [...faultRows(s.syncFailover === undefined ? 'failover' : 'async failover', s.failover, 'second client granted the lock while the first held it (double grant)')];
  if (s.syncFailover !== undefined) rows.push(...faultRows('sync failover', s.syncFailover, 'second client granted the lock while the first held it (double grant)'));
  if (s.clock !== undefined) rows.push(...faultRows('clock', s.clock, 'double grant after the jump'));
  const p = s.paused;
  const n = String(p.trials);
  rows.push(
    ['paused', 'fault injected (holder stopped when the successor was granted)', String(p.injected), n],
    ['', 'held === true at its first check after SIGCONT', String(p.heldAfterResume), n],
    ['', "successor's token <= the paused holder's (token regression)", String(p.tokenRegressions), n],
    ['', 'stale write accepted, fencing off: PG / S3 / HTTP', triple(p.fencingOff), n],
    ['', 'stale write accepted, fencing on: PG / S3 / HTTP', triple(p.fencingOn), n],
  );
  const w = s.lease;
  if (w !== undefined) {
    const m = String(w.trials);
    rows.push(
      ['withLease', 'paused between writes: held === true at its first check after SIGCONT', String(w.heldAfterResume), m],
      ['', 'paused between writes: withLease committed after SIGCONT (stale write accepted)', String(w.outsideCommitted), m],
      ['', 'paused inside withLease: successor granted within lease + 2 s', String(w.grantedWithinBound), m],
      ['', 'paused inside withLease: a write of the paused transaction committed', String(w.insideCommitted), m],
    );
  }
  const l = s.latency;
  rows.push(
    ['latency', 'uncontended acquire p50 / p99 (ms)', `${ms(l.p50Ms)} / ${ms(l.p99Ms)}`, String(l.cycles)],
    ['', `acquire+release cycles/s (CPU ${l.cpuMsPerCycle.toFixed(2)} ms/cycle in this process, load ${l.loadAverage})`, l.cyclesPerSecond.toFixed(0), String(l.cycles)],
  );
  return rows;
}

function align(rows: readonly (readonly string[])[]): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join('  ').trimEnd());
}

/** The seeds' table: a header row (blank, then one title per source), then one row per claim, one cell per source. */
export function seedsTable(report: CompareReport): string[][] {
  const cell = (s: SourceReport, pick: (s: SourceReport) => string): string => pick(s);
  const line = (row: string, pick: (s: SourceReport) => string): string[] => [row, ...report.sources.map((s) => cell(s, pick))];
  const of = (count: number, trials: number): string => `${count}/${trials}`;
  return [
    ['', ...report.sources.map((s) => TITLE[s.source])],
    line('first holder still held when the second asked', (s) => of(s.failover.firstHeld, s.failover.trials)),
    line('double grants at failover/restart', (s) => of(s.failover.doubleGrants, s.failover.trials)),
    line('token regressions at failover/restart', (s) => of(s.failover.tokenRegressions, s.failover.trials)),
    line('stale writes accepted by a fence after failover/restart', (s) => of(sum(s.failover.staleAccepted), 3 * s.failover.trials)),
    line('synchronous failover: double grants', (s) => (s.syncFailover === undefined ? 'not run' : of(s.syncFailover.doubleGrants, s.syncFailover.trials))),
    line('synchronous failover: token regressions', (s) => (s.syncFailover === undefined ? 'not run' : of(s.syncFailover.tokenRegressions, s.syncFailover.trials))),
    line('clock jump: double grants', (s) => (s.clock === undefined ? 'not run' : of(s.clock.doubleGrants, s.clock.trials))),
    line('clock jump: token regressions', (s) => (s.clock === undefined ? 'not run' : of(s.clock.tokenRegressions, s.clock.trials))),
    line('clock jump: stale writes accepted by a fence', (s) => (s.clock === undefined ? 'not run' : of(sum(s.clock.staleAccepted), 3 * s.clock.trials))),
    line('paused holder, no fencing: stale writes accepted', (s) => of(sum(s.paused.fencingOff), 3 * s.paused.trials)),
    line('paused holder, fencing: stale writes accepted', (s) => of(sum(s.paused.fencingOn), 3 * s.paused.trials)),
    line('paused holder, withLease: stale commits', (s) => (s.lease === undefined ? 'not run' : of(s.lease.outsideCommitted + s.lease.insideCommitted, 2 * s.lease.trials))),
    line('acquire p50 / p99 (ms)', (s) => `${ms(s.latency.p50Ms)} / ${ms(s.latency.p99Ms)}`),
    line('cycles/s', (s) => s.latency.cyclesPerSecond.toFixed(0)),
    line('verdict', (s) => s.verdict.kind),
  ];
}

export function renderReport(report: CompareReport): string {
  const out: string[] = [];
  out.push(`npm run compare: ${report.trials} trials per fault scenario and source, ${report.machine.cores} cores, load ${report.machine.loadBefore} before, ${report.machine.loadAfter} after, ${report.seconds.toFixed(0)} s`);
  for (const s of report.sources) {
    out.push('', `${TITLE[s.source]}: ${s.deployment}`);
    out.push(...align([['scenario', 'row', 'count', 'trials'], ...rowsOf(s)]).map((l) => `  ${l}`));
    if (s.syncFailover !== undefined) {
      out.push(`  async failover: ${s.failover.fault}`, `  sync failover: ${s.syncFailover.fault}`);
      out.push(`  failover trials: ${s.failover.trials} asynchronous, ${s.syncFailover.trials} synchronous (at most ${s.trialsAsked} for this column: each rebuilds the replica with pg_basebackup)`);
    } else {
      out.push(`  failover: ${s.failover.fault}`);
    }
    if (s.clock !== undefined) out.push(`  clock: ${s.clock.fault}`);
    if (s.lease !== undefined) out.push(`  withLease: ${s.lease.fault}`);
    out.push(`  paused: ${s.paused.fault}`);
    out.push(`  verdict${s.syncVerdict === undefined ? '' : ' (asynchronous replica)'}: ${s.verdict.line}`);
    if (s.syncVerdict !== undefined) out.push(`  verdict (synchronous standby): ${s.syncVerdict.line}`);
  }
  if (report.sources.some((s) => s.clock !== undefined)) {
    out.push('', "The clock jump is simulated: the key's remaining TTL on one node cut to 5 ms (PEXPIRE), which is what a forward jump of that node's wall clock does to it; libfaketime recurses in clock_gettime with Debian's redis-server at start-up, and time namespaces do not shift the wall clock.");
  }
  if (report.sources.some((s) => s.syncFailover !== undefined)) {
    out.push('', "PostgreSQL's tokens come from a sequence, which WAL-logs 32 values ahead of the one handed out: a replica that lost the last grant usually holds values beyond its token, so the lost grant shows as a double grant with a larger token; its token repeats when that grant's nextval was the one that logged the next batch (about one grant in 32, and the first after each checkpoint).");
  }
  out.push('', "The seeds' table, measured (count/trials; writes: trials x 3 resources):");
  out.push(...align(seedsTable(report)).map((l) => `  ${l}`));
  if (report.sections !== undefined && report.sections.length > 0) {
    out.push('', 'Time per part (from the start of the comparison; the fault chains and the paused holders run at once):');
    const sorted = [...report.sections].sort((a, b) => a.startS - b.startS);
    out.push(...align(sorted.map((x) => [x.name, `from ${x.startS.toFixed(0)} s`, `${x.seconds.toFixed(0)} s`])).map((l) => `  ${l}`));
  }
  for (const failure of runFailures(report)) out.push('', failure);
  if (report.errors > 0) out.push('', `${report.errors} trials failed and were run again (their errors: --json)`);
  return out.join('\n');
}

/** What the bigint-free JSON of a report is: the same data as the table. */
export function reportJson(report: CompareReport): string {
  return JSON.stringify(report, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value), 2);
}
