// The fault-injection run of issue #7, short: 5 worker processes, ~70 lock
// cycles, a nemesis that is guaranteed to SIGSTOP a fresh lock holder past its
// session timeout, cut a worker's ZooKeeper connections (RST), SIGKILL the
// ensemble's leader (then restart it) and hold-then-reset one PostgreSQL and
// one S3 write in flight, and random faults after that until the budget is
// spent. The checker (checker.ts) must find no violation in any resource's
// apply order, the run must have refused at least one stale write, and no
// worker may crash. Nothing here asserts on time.
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
    const { result, history, report, crashes } = await runFaultCheck({
      servers: testServers(),
      ensembleControl: { killLeader: killEnsembleLeader, startNode: startEnsembleNode },
      workers: 5,
      ops: 70,
      maxDurationMs: 150_000,
      sessionTimeoutMs: 2000,
      randomFaults: true,
      log: (line) => lines.push(line),
    });
    console.log(['fault-injection run:', ...lines, '', ...report].join('\n'));

    expect(result.violations).toEqual([]);
    expect(result.vacuous).toEqual([]);
    const kinds = new Set(history.faults.map((f) => f.kind));
    expect(kinds).toContain('pause');
    expect(kinds).toContain('cut');
    expect(kinds).toContain('kill-leader');
    expect(result.valid).toBe(true);
    expect(crashes).toEqual([]);
  }, 240_000);
});
