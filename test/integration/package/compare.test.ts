// npm run compare, short (1 trial per scenario and source, a few latency
// cycles; the full run stays the script): one real end-to-end run on the real
// servers with real faults, whose fault verification (its evidence,
// test/compare/evidence.ts) must show every fault; the verification's
// negative cases, a fault that did not happen, are in
// test/unit/compare-evidence.test.ts. The structural facts the seeds predict:
//   - every scenario's fault shown by its evidence
//   - the single Redis failover and the Redlock restart hand the lock out
//     twice: what the seeds say of them, and proof the scenario bites
//   - etcd and ZooKeeper: 0 double grants and 0 token regressions across a
//     leader kill
//   - fencing on: 0 stale writes accepted wherever the tokens rose
//   - fencing off: the paused holder's stale write accepted by every
//     resource, for every source
//   - PostgreSQL: the asynchronous failover double-grants, the synchronous
//     one does not; withLease commits nothing of a paused holder
// The run takes the Redis, etcd and ensemble fault turns itself (other files
// that break those servers wait, and it waits for them).
import { describe, expect, it } from 'vitest';
import { SOURCE_KINDS, runCompare, type CompareReport } from '../../compare/compare.js';
import { runFailures } from '../../compare/evidence.js';
import { renderReport } from '../../compare/table.js';
import type { FaultScenario } from '../../compare/trial.js';

const TRIALS = 1;
const LATENCY_CYCLES = 5;

describe('npm run compare, short', () => {
  it(`${TRIALS} trial per scenario and source: every fault shown by its evidence, the seeds' structural facts hold`, async () => {
    const lines: string[] = [];
    const report: CompareReport = await runCompare({
      trials: TRIALS,
      sources: SOURCE_KINDS,
      latencyCycles: LATENCY_CYCLES,
      pausedConcurrency: 1,
      log: (line) => lines.push(line),
    });
    const table = renderReport(report);
    console.log(table);
    expect(report.sources.map((s) => s.source)).toEqual([...SOURCE_KINDS]);
    // What a trial's evidence failed to show is in the run's log.
    expect(report.notVerified, lines.join('\n')).toEqual([]);
    expect(report.incomplete).toEqual([]);
    expect(runFailures(report)).toEqual([]);

    for (const s of report.sources) {
      const faults: Array<[string, FaultScenario]> = [['failover', s.failover], ...(s.clock === undefined ? [] : [['clock', s.clock] as [string, FaultScenario]])];
      for (const [scenario, f] of faults) {
        expect(f.trials, `${s.source} ${scenario} trials`).toBe(TRIALS);
        expect(f.injected, `${s.source} ${scenario}: a fault in every trial`).toBe(TRIALS);
        // Fencing on, tokens that rose: the stale holder's write refused everywhere.
        if (f.tokenRegressions === 0) expect(f.staleAccepted, `${s.source} ${scenario}: stale writes accepted by a fence`).toEqual({ postgres: 0, s3: 0, http: 0 });
      }
      const p = s.paused;
      expect(p.trials, `${s.source} paused trials`).toBe(TRIALS);
      expect(p.injected, `${s.source} paused: stopped in every trial`).toBe(TRIALS);
      expect(p.tokenRegressions, `${s.source} paused: the successor's token rose`).toBe(0);
      expect(p.heldAfterResume, `${s.source} paused: the holder saw it had lost the lock`).toBe(0);
      expect(p.fencingOff, `${s.source} paused, fencing off: every stale write accepted`).toEqual({ postgres: TRIALS, s3: TRIALS, http: TRIALS });
      expect(p.fencingOn, `${s.source} paused, fencing on: none accepted`).toEqual({ postgres: 0, s3: 0, http: 0 });
      expect(s.latency.cycles).toBe(LATENCY_CYCLES);
      expect(s.latency.p99Ms).toBeGreaterThanOrEqual(s.latency.p50Ms);
    }

    const by = Object.fromEntries(report.sources.map((s) => [s.source, s]));
    // Consensus: the grant survives the leader kill, and tokens keep rising.
    for (const kind of ['etcd', 'zookeeper'] as const) {
      // Not vacuous: the second client asked while the first still held the lock (its lease or session rode out the election).
      expect(by[kind]!.failover.firstHeld, `${kind}: the first holder held on`).toBeGreaterThan(0);
      expect(by[kind]!.failover.doubleGrants, `${kind} double grants`).toBe(0);
      expect(by[kind]!.failover.tokenRegressions, `${kind} token regressions`).toBe(0);
      expect(by[kind]!.verdict.kind).toBe('correctness lock and election');
    }
    // What the seeds say breaks, does: the lost lock state hands the lock out twice, with a token that did not rise.
    for (const kind of ['redis', 'redlock'] as const) {
      expect(by[kind]!.failover.doubleGrants, `${kind} double grants after the lost state`).toBeGreaterThan(0);
      expect(by[kind]!.verdict.kind).toBe('efficiency lock');
    }
    // A clock jump breaks Redlock's lock, not its quorum token: fencing refuses the stale holder.
    expect(by.redlock!.clock!.doubleGrants).toBeGreaterThan(0);
    expect(by.redlock!.clock!.tokenRegressions).toBe(0);
    expect(table).toMatch(/simulated/);
    // PostgreSQL: an asynchronous replica loses the acknowledged grant (a double grant); a synchronous standby keeps it.
    const pg = by.postgres!;
    // A double grant wherever the first holder still held when the second asked (and it did, at least once).
    expect(pg.failover.firstHeld, 'postgres asynchronous: the first holder held on').toBeGreaterThan(0);
    expect(pg.failover.doubleGrants, 'postgres asynchronous failover: double grants').toBe(pg.failover.firstHeld);
    expect(pg.syncFailover!.trials).toBe(TRIALS);
    expect(pg.syncFailover!.injected).toBe(TRIALS);
    expect(pg.syncFailover!.doubleGrants, 'postgres synchronous failover: double grants').toBe(0);
    expect(pg.syncFailover!.tokenRegressions, 'postgres synchronous failover: token regressions').toBe(0);
    expect(pg.syncVerdict!.kind).toBe('correctness lock and election');
    // withLease: nothing of a paused holder commits, and a holder paused inside it does not block the takeover.
    expect(pg.lease!.trials).toBe(TRIALS);
    expect(pg.lease!.outsideCommitted + pg.lease!.insideCommitted).toBe(0);
    expect(pg.lease!.grantedWithinBound).toBe(TRIALS);
    expect(table).toMatch(/PostgreSQL \(primary \+ replica\)/);
  }, 16 * 60_000);
});
