// The suite's short fault-injection run, once per token source (one file
// each, fault-checker*.test.ts, so that vitest can run two at once): 5 worker
// processes, ~70 lock cycles, and a nemesis that is guaranteed to
//   - SIGSTOP a fresh lock holder past its session or TTL (it wakes up as a
//     stale holder with writes to do),
//   - cut (RST) a worker's connections to the source's servers,
//   - inject the source's own faults (source-faults.ts): the ZooKeeper or
//     etcd leader killed, the Redis primary failed over to its replica in
//     sync and held back, a Redlock node restarted and one paused, the
//     PostgreSQL primary of the checker's own cluster crashed and restarted,
//   - hold one PostgreSQL, one S3 and one HTTP write in flight, then reset
//     its connection,
// and random faults after that until the budget is spent. Each of these is
// asserted to have happened, counted per kind, each with its evidence (the
// connections a cut reset, the victim noticing it: checker.ts); a promised
// fault the harness could not inject fails the test. The resources must show
// no violation, the run must have refused at least one stale write, no
// worker may crash, and the source's tokens are judged apart: the consensus
// sources and Redlock (nodes restarted from an fsynced AOF) must never hand
// out a token that does not rise, while the single Redis failover that lost
// INCRs must show up as token regressions in the report. Nothing here asserts
// on time. The long run is test/faults/run-checker.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testServers } from '../helpers/servers.js';
import { runFaultCheck } from './harness.js';
import { sourceControl, type SourceKind } from './source-faults.js';

/** What the source's own faults must have been, at least once each. */
const SOURCE_FAULTS: Readonly<Record<SourceKind, readonly { kind: string; variant?: string }[]>> = {
  zookeeper: [{ kind: 'kill-leader' }],
  etcd: [{ kind: 'kill-leader' }],
  redis: [{ kind: 'failover' }, { kind: 'failover', variant: 'replica held back' }],
  redlock: [{ kind: 'node-restart' }, { kind: 'node-pause' }],
  postgres: [{ kind: 'node-restart' }],
};

export function describeFaultRun(kind: SourceKind): void {
  const control = sourceControl(kind);
  // Other files and runs break the same nodes: one at a time (the source's
  // fault turn). The nemesis restores what it breaks, the harness cleans up
  // its tables, bucket and proxies; the release heals the nodes after a run
  // that failed midway.
  let release: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    release = await control.hold();
  }, 16 * 60_000);
  afterAll(async () => {
    await release?.();
  }, 180_000);

  describe(`fault-injection run on ${kind} (holder SIGSTOP, the source's own faults, TCP cuts) against PostgreSQL, S3 and HTTP`, () => {
    it('no resource ever accepts a stale token, loses an acknowledged write or keeps a refused one; token regressions are reported', async () => {
      const lines: string[] = [];
      const run = runFaultCheck({
        servers: testServers(),
        source: control,
        workers: 5,
        ops: 70,
        maxDurationMs: 150_000,
        sessionTimeoutMs: 2000,
        randomFaults: true,
        httpCuts: true,
        log: (line) => lines.push(line),
      });
      // What the run logged, also when it fails before its report.
      const { result, history, report, crashes, missed } = await run.catch((error: unknown) => {
        console.log([`fault-injection run (${kind}), failed:`, ...lines].join('\n'));
        throw error;
      });
      console.log([`fault-injection run (${kind}):`, ...lines, '', ...report].join('\n'));

      // Every promised fault happened: none missed, each kind counted.
      expect(missed).toEqual([]);
      const count = (match: (f: (typeof history.faults)[number]) => boolean): number => history.faults.filter(match).length;
      expect(count((f) => f.kind === 'pause' && f.token !== undefined), 'pauses of a fresh holder').toBeGreaterThanOrEqual(1);
      expect(count((f) => f.kind === 'cut'), `cuts of ${kind} connections`).toBeGreaterThanOrEqual(1);
      for (const { kind: faultKind, variant } of SOURCE_FAULTS[kind]) {
        expect(count((f) => f.kind === faultKind && (variant === undefined || f.variant === variant)), `${faultKind} ${variant ?? ''}`).toBeGreaterThanOrEqual(1);
      }
      for (const resource of ['postgres', 's3', 'http'] as const) {
        expect(count((f) => f.kind === 'resource-cut' && f.resource === resource), `held-then-reset ${resource} writes`).toBeGreaterThanOrEqual(1);
      }
      // ... and left its mark: a cut reset open connections, its victim noticed.
      for (const f of history.faults) {
        if (f.kind === 'cut' || f.kind === 'resource-cut') expect(f.connections, `${f.kind} of ${f.target}`).toBeGreaterThanOrEqual(1);
        if (f.kind === 'pause' || f.kind === 'cut' || f.kind === 'resource-cut') expect(f.noticed, `${f.kind} of ${f.target}: ${f.detail ?? ''}`).toBe(true);
      }

      // The source's tokens, judged apart from the resources.
      expect(history.grants?.length ?? 0, 'grants recorded').toBeGreaterThan(0);
      if (kind === 'redis') {
        // The failover with the replica held back lost INCRs: the report says so.
        expect(result.tokenRegressions.length, 'token regressions after the lossy failover').toBeGreaterThan(0);
        expect(report.join('\n')).toMatch(/TOKENS: NOT monotonic/);
      } else {
        expect(result.tokenRegressions).toEqual([]);
      }
      // The resources: no violation (fencing holds even where the source's tokens did not).
      expect(result.violations).toEqual([]);
      expect(result.vacuous).toEqual([]);
      expect(result.valid).toBe(true);
      expect(crashes).toEqual([]);
    }, 300_000);
  });
}
