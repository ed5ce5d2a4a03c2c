// npm run compare's proof that each fault took, as pure functions: a trial
// collects what the servers answered after its fault (its evidence), and
// these say whether that shows the fault, and if not, what is missing. Then
// whether a run may pass: every trial of every scenario showed its fault and
// every scenario ran all its trials. Kept apart from the I/O so that a fault
// that did not happen can be fed in without breaking a server
// (test/unit/compare-evidence.test.ts).

/**
 * The checks a trial's evidence fails: empty when the fault took. Each entry
 * says what was seen instead, for the run's log.
 */
export type Missing = readonly string[];

/** Single Redis: the pair after the failover (the replica, promoted, answering for the lock's keys). */
export interface RedisFailoverEvidence {
  /** CLIENT KILL TYPE replica on the primary before the grant: replication links it dropped. */
  readonly replicasDropped: number;
  /** The lock key and the token counter as the promoted replica has them. */
  readonly promotedKey: string | null;
  readonly promotedCounter: string | null;
  /** The token the first holder was granted on the primary. */
  readonly firstToken: bigint;
}

/** The promoted replica never saw the first grant: no key, a counter behind its token, because the link was dropped first. */
export function redisFailoverMissing(e: RedisFailoverEvidence): Missing {
  const missing: string[] = [];
  if (e.replicasDropped < 1) missing.push('no replication link was dropped before the grant (CLIENT KILL TYPE replica killed 0)');
  if (e.promotedKey !== null) missing.push('the promoted replica has the lock key: the first grant reached it');
  if (!/^[0-9]+$/.test(e.promotedCounter ?? '0') || BigInt(e.promotedCounter ?? '0') >= e.firstToken) {
    missing.push(`the promoted replica's counter (${e.promotedCounter ?? 'none'}) is not behind the first grant's token ${e.firstToken}`);
  }
  return missing;
}

/** etcd and ZooKeeper: who led, whom the script killed, who leads once the cluster is healthy again (member ids 1..3). */
export interface LeaderKillEvidence {
  readonly leaderBefore: number;
  readonly killed: number;
  readonly leaderAfter: number;
}

/** The member killed was the leader, and another one leads now. */
export function leaderKillMissing(e: LeaderKillEvidence): Missing {
  const missing: string[] = [];
  if (e.killed !== e.leaderBefore) missing.push(`the member killed (${e.killed}) was not the leader (${e.leaderBefore})`);
  if (e.leaderAfter === e.killed) missing.push(`the member killed (${e.killed}) leads again: no other member took over`);
  return missing;
}

/** Redlock restart: the restarted node's lock key and counter once it answers again. */
export interface RedlockRestartEvidence {
  readonly key: string | null;
  readonly counter: string | null;
}

/** The node came back empty: neither the key nor the counter. */
export function redlockRestartMissing(e: RedlockRestartEvidence): Missing {
  const missing: string[] = [];
  if (e.key !== null) missing.push('the restarted node still has the lock key');
  if (e.counter !== null) missing.push(`the restarted node still has the counter (${e.counter})`);
  return missing;
}

/** Redlock clock jump: the PEXPIRE that stands for it, and the node's keys after. */
export interface RedlockClockEvidence {
  /** PEXPIRE's reply: 1 if the key was there and got the short TTL. */
  readonly pexpireReply: number;
  /** EXISTS of the key after the wait for it to expire. */
  readonly keyExistsAfter: number;
  readonly counter: string | null;
  readonly firstToken: bigint;
}

/** The key was there with a TTL that was cut, it is gone now, and the counter stayed at the first token. */
export function redlockClockMissing(e: RedlockClockEvidence): Missing {
  const missing: string[] = [];
  if (e.pexpireReply !== 1) missing.push('PEXPIRE found no key to cut on the node');
  if (e.keyExistsAfter !== 0) missing.push('the key is still on the node');
  if (e.counter !== String(e.firstToken)) missing.push(`the node's counter is ${e.counter ?? 'gone'}, not the first grant's token ${e.firstToken}`);
  return missing;
}

/** Paused holder: whether the kernel showed the holder stopped at the instant the successor was granted. */
export interface PausedEvidence {
  readonly stoppedAtGrant: boolean;
}

export function pausedMissing(e: PausedEvidence): Missing {
  return e.stoppedAtGrant ? [] : ['the holder was not stopped when the successor was granted'];
}

/** A scenario's counts, as a report has them. */
export interface ScenarioCounts {
  readonly trials: number;
  readonly injected: number;
}

export interface SourceCounts {
  readonly source: string;
  readonly failover: ScenarioCounts;
  readonly clock?: ScenarioCounts;
  readonly paused: ScenarioCounts;
}

const scenarios = (s: SourceCounts): Array<readonly [string, ScenarioCounts]> => [
  ['failover', s.failover],
  ...(s.clock === undefined ? [] : [['clock', s.clock] as const]),
  ['paused', s.paused],
];

/**
 * "source scenario: k of n trials" for every scenario where a trial's
 * evidence did not show its fault. Not only where none did: a trial without
 * its fault counts double grants and stale writes of a run where nothing
 * broke, so its scenario's figures are not the scenario's.
 */
export function faultsNotVerified(sources: readonly SourceCounts[]): string[] {
  return sources.flatMap((s) =>
    scenarios(s).flatMap(([scenario, c]) => (c.injected < c.trials ? [`${s.source} ${scenario}: fault shown in ${c.injected} of ${c.trials} trials`] : [])),
  );
}

/** "source scenario" for every scenario that ran fewer trials than asked (too many failed). */
export function scenariosIncomplete(sources: readonly SourceCounts[], trials: number): string[] {
  return sources.flatMap((s) => scenarios(s).flatMap(([scenario, c]) => (c.trials < trials ? [`${s.source} ${scenario}`] : [])));
}

/** Why a run fails, one line per reason; empty: it passes (npm run compare exits 0). */
export function runFailures(report: { readonly notVerified: readonly string[]; readonly incomplete: readonly string[] }): string[] {
  return [
    ...(report.notVerified.length > 0 ? [`FAILED: a fault not shown by its evidence in: ${report.notVerified.join(', ')}`] : []),
    ...(report.incomplete.length > 0 ? [`FAILED: fewer trials than asked in: ${report.incomplete.join(', ')}`] : []),
  ];
}
