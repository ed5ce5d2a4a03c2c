// The verdict the seeds draw from the table, drawn here from the counts:
//   a fault that hands the lock out again with a token that does not rise:
//     an efficiency lock (a fence cannot tell the stale holder from the new one)
//   double grants, but tokens that always rose: a correctness lock only
//     behind a fence (the resource refuses what the lock let through)
//   neither: a correctness lock, and an election (the token is the epoch)
// A paused holder's stale writes are the same for every source: accepted
// without fencing, refused with it wherever the tokens rose.
import type { PausedScenario } from './paused.js';
import type { FaultScenario } from './trial.js';

export interface Verdict {
  readonly kind: 'efficiency lock' | 'correctness lock, behind a fence' | 'correctness lock and election';
  readonly line: string;
}

export function verdictOf(report: { readonly failover: FaultScenario; readonly clock?: FaultScenario; readonly paused: PausedScenario }): Verdict {
  const faults = [report.failover, ...(report.clock === undefined ? [] : [report.clock])];
  const trials = faults.reduce((n, f) => n + f.trials, 0);
  const doubles = faults.reduce((n, f) => n + f.doubleGrants, 0);
  const regressions = faults.reduce((n, f) => n + f.tokenRegressions, 0);
  const p = report.paused;
  const pausedOff = Math.min(p.fencingOff.postgres, p.fencingOff.s3, p.fencingOff.http);
  const pausedOn = Math.max(p.fencingOn.postgres, p.fencingOn.s3, p.fencingOn.http);
  const counts = `${doubles}/${trials} double grants, ${regressions}/${trials} token regressions under faults; paused holder: stale writes accepted ${pausedOff}/${p.trials} without fencing, ${pausedOn}/${p.trials} with it`;
  if (regressions > 0) {
    return { kind: 'efficiency lock', line: `efficiency lock: ${counts}. A fault hands the lock out again with a token that does not rise, so no fence can refuse the stale holder: use it where a rare double grant costs work, not data.` };
  }
  if (doubles > 0) {
    return { kind: 'correctness lock, behind a fence', line: `correctness lock only behind a fence: ${counts}. The lock itself failed, its tokens still rose, so the resource refuses the stale holder.` };
  }
  return { kind: 'correctness lock and election', line: `correctness lock and election: ${counts}. Consensus kept the grant through the fault; fencing stops the paused holder, the token doubles as the leader's epoch.` };
}
