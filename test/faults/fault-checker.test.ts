// The fault-injection run, short: 5 worker processes, ~70 lock cycles, and a
// nemesis that is guaranteed to
//   - SIGSTOP a fresh lock holder past its session timeout (it wakes up as a
//     stale holder with writes to do),
//   - cut (RST) a worker's ZooKeeper connections,
//   - SIGKILL the ensemble's leader (then restart it),
//   - hold one PostgreSQL, one S3 and one HTTP write in flight, then reset
//     its connection,
// and random faults after that until the budget is spent. Each of these is
// asserted to have happened, counted per kind, each with its evidence (the
// connections a cut reset, the victim noticing it: checker.ts); a promised
// fault the harness could not inject fails the test. The checker must find
// no violation in any resource's apply order, the run must have refused at
// least one stale write, and no worker may crash. Nothing here asserts on time.
// The long run is test/faults/run-checker.ts.
import { describe, expect, it } from 'vitest';
import { killEnsembleLeader, startEnsembleNode, testServers, useEnsembleForFaults } from '../helpers/servers.js';
import { runFaultCheck } from './harness.js';

// Other files kill leaders too: one file at a time. The nemesis restarts
// what it kills and the harness cleans up its tables, bucket and proxies; the
// restore after the file is for a run that failed midway.
useEnsembleForFaults();

describe('fault-injection run (SIGSTOP, leader SIGKILL, TCP cuts) against PostgreSQL, S3 and HTTP', () => {
  it('no resource ever accepts a stale token, loses an acknowledged write or keeps a refused one', async () => {
    const lines: string[] = [];
    const { result, history, report, crashes, missed } = await runFaultCheck({
      servers: testServers(),
      ensembleControl: { killLeader: killEnsembleLeader, startNode: startEnsembleNode },
      workers: 5,
      ops: 70,
      maxDurationMs: 150_000,
      sessionTimeoutMs: 2000,
      randomFaults: true,
      httpCuts: true,
      log: (line) => lines.push(line),
    });
    console.log(['fault-injection run:', ...lines, '', ...report].join('\n'));

    // Every promised fault happened: none missed, each kind counted.
    expect(missed).toEqual([]);
    const count = (match: (f: (typeof history.faults)[number]) => boolean): number => history.faults.filter(match).length;
    expect(count((f) => f.kind === 'pause' && f.token !== undefined), 'pauses of a fresh holder').toBeGreaterThanOrEqual(1);
    expect(count((f) => f.kind === 'cut'), 'ZooKeeper cuts').toBeGreaterThanOrEqual(1);
    expect(count((f) => f.kind === 'kill-leader'), 'leader kills').toBeGreaterThanOrEqual(1);
    for (const resource of ['postgres', 's3', 'http'] as const) {
      expect(count((f) => f.kind === 'resource-cut' && f.resource === resource), `held-then-reset ${resource} writes`).toBeGreaterThanOrEqual(1);
    }
    // ... and left its mark: a cut reset open connections, its victim noticed.
    for (const f of history.faults) {
      if (f.kind === 'cut' || f.kind === 'resource-cut') expect(f.connections, `${f.kind} of ${f.target}`).toBeGreaterThanOrEqual(1);
      if (f.kind !== 'kill-leader' && f.kind !== 'partition') expect(f.noticed, `${f.kind} of ${f.target}: ${f.detail ?? ''}`).toBe(true);
    }

    expect(result.violations).toEqual([]);
    expect(result.vacuous).toEqual([]);
    expect(result.valid).toBe(true);
    expect(crashes).toEqual([]);
  }, 240_000);
});
