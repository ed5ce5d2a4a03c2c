// npm run compare's fault verification (test/compare/evidence.ts) on
// hand-made evidence: each scenario's fault shown when its evidence says so,
// and a fault that did not happen reported as not shown, down to the run
// failing. (The real faults on the real servers: test/integration/package/compare.test.ts.)
import { describe, expect, it } from 'vitest';
import {
  faultsNotVerified,
  leaderKillMissing,
  pausedMissing,
  redisFailoverMissing,
  redlockClockMissing,
  redlockRestartMissing,
  runFailures,
  scenariosIncomplete,
  type SourceCounts,
} from '../compare/evidence.js';
import { runTrials, type FaultTrial } from '../compare/trial.js';

const written = { postgres: false, s3: false, http: false };
const trial = (missing: readonly string[]): FaultTrial => ({ missing, firstHeld: true, doubleGrant: true, tokenRegression: true, staleAccepted: written });

describe('each scenario\'s evidence', () => {
  it('single Redis failover: shown only when the link was dropped and the promoted replica lacks the grant', () => {
    const took = { replicasDropped: 1, promotedKey: null, promotedCounter: '3', firstToken: 4n };
    expect(redisFailoverMissing(took)).toEqual([]);
    expect(redisFailoverMissing({ ...took, promotedCounter: null })).toEqual([]);
    // Replication was not held back: the promoted replica saw the first grant.
    expect(redisFailoverMissing({ ...took, promotedKey: 'first', promotedCounter: '4' })).toEqual([
      'the promoted replica has the lock key: the first grant reached it',
      "the promoted replica's counter (4) is not behind the first grant's token 4",
    ]);
    expect(redisFailoverMissing({ ...took, replicasDropped: 0 })).toEqual(['no replication link was dropped before the grant (CLIENT KILL TYPE replica killed 0)']);
    expect(redisFailoverMissing({ ...took, promotedCounter: '9' })).toHaveLength(1);
  });

  it('leader kill: shown only when the member killed led and another leads after', () => {
    expect(leaderKillMissing({ leaderBefore: 2, killed: 2, leaderAfter: 1 })).toEqual([]);
    expect(leaderKillMissing({ leaderBefore: 2, killed: 3, leaderAfter: 2 })).toEqual(['the member killed (3) was not the leader (2)']);
    expect(leaderKillMissing({ leaderBefore: 2, killed: 2, leaderAfter: 2 })).toEqual(['the member killed (2) leads again: no other member took over']);
  });

  it('Redlock restart: shown only when the node came back without the key and the counter', () => {
    expect(redlockRestartMissing({ key: null, counter: null })).toEqual([]);
    // Restarted from its AOF rather than empty: nothing was lost.
    expect(redlockRestartMissing({ key: 'first', counter: '7' })).toEqual(['the restarted node still has the lock key', 'the restarted node still has the counter (7)']);
    expect(redlockRestartMissing({ key: null, counter: '7' })).toHaveLength(1);
  });

  it('Redlock clock jump: shown only when the key was cut and is gone and the counter stayed', () => {
    const took = { pexpireReply: 1, keyExistsAfter: 0, counter: '5', firstToken: 5n };
    expect(redlockClockMissing(took)).toEqual([]);
    expect(redlockClockMissing({ ...took, pexpireReply: 0 })).toEqual(['PEXPIRE found no key to cut on the node']);
    expect(redlockClockMissing({ ...took, keyExistsAfter: 1 })).toEqual(['the key is still on the node']);
    expect(redlockClockMissing({ ...took, counter: null })).toEqual(["the node's counter is gone, not the first grant's token 5"]);
  });

  it('paused holder: shown only when the holder was stopped at the successor\'s grant', () => {
    expect(pausedMissing({ stoppedAtGrant: true })).toEqual([]);
    expect(pausedMissing({ stoppedAtGrant: false })).toEqual(['the holder was not stopped when the successor was granted']);
  });
});

describe('a scenario whose fault did not happen fails the run', () => {
  const counts = (failover: number, paused: number, clock?: number): SourceCounts => ({
    source: 'redlock',
    failover: { trials: 2, injected: failover },
    ...(clock === undefined ? {} : { clock: { trials: 2, injected: clock } }),
    paused: { trials: 2, injected: paused },
  });

  it('every trial shown: the run passes', () => {
    const sources = [counts(2, 2, 2)];
    expect(faultsNotVerified(sources)).toEqual([]);
    expect(runFailures({ notVerified: faultsNotVerified(sources), incomplete: scenariosIncomplete(sources, 2) })).toEqual([]);
  });

  it('one trial of two without its fault (not only none): not verified, and the run fails', () => {
    const sources = [counts(2, 2, 1)];
    expect(faultsNotVerified(sources)).toEqual(['redlock clock: fault shown in 1 of 2 trials']);
    expect(runFailures({ notVerified: faultsNotVerified(sources), incomplete: [] })).toEqual(['FAILED: a fault not shown by its evidence in: redlock clock: fault shown in 1 of 2 trials']);
    expect(faultsNotVerified([counts(0, 1)])).toEqual(['redlock failover: fault shown in 0 of 2 trials', 'redlock paused: fault shown in 1 of 2 trials']);
  });

  it('fewer trials than asked: incomplete, and the run fails', () => {
    const sources: SourceCounts[] = [{ source: 'etcd', failover: { trials: 1, injected: 1 }, paused: { trials: 2, injected: 2 } }];
    expect(faultsNotVerified(sources)).toEqual([]);
    expect(scenariosIncomplete(sources, 2)).toEqual(['etcd failover']);
    expect(runFailures({ notVerified: [], incomplete: scenariosIncomplete(sources, 2) })).toEqual(['FAILED: fewer trials than asked in: etcd failover']);
  });

  it('runTrials counts a trial whose evidence failed as not injected, and logs what was missing', async () => {
    const log: string[] = [];
    const evidence = [redisFailoverMissing({ replicasDropped: 1, promotedKey: null, promotedCounter: '3', firstToken: 4n }), redlockRestartMissing({ key: 'first', counter: '7' })];
    const scenario = await runTrials('fault', 2, async (i) => trial(evidence[i] as readonly string[]), async () => undefined, (line) => log.push(line));
    expect(scenario).toMatchObject({ trials: 2, injected: 1, doubleGrants: 2 });
    expect(log).toEqual(['  trial 2: its fault was not shown by its evidence: the restarted node still has the lock key; the restarted node still has the counter (7)']);
    expect(faultsNotVerified([{ source: 'redlock', failover: scenario, paused: { trials: 2, injected: 2 } }])).toEqual(['redlock failover: fault shown in 1 of 2 trials']);
  });
});
