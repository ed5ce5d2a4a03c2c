// npm run compare's PostgreSQL failover evidence (test/compare/postgres.ts,
// pgFailoverMissing) on hand-made evidence: the fault shown when the
// evidence says so, and each way it did not happen reported.
import { describe, expect, it } from 'vitest';
import { pgFailoverMissing, type PgFailoverEvidence } from '../compare/postgres.js';

const asyncTook: PgFailoverEvidence = { mode: 'async', replicaStateBefore: 'async', heldBytes: 512, killedPid: 1234, promotedInRecovery: false, grantOnReplica: false };
const syncTook: PgFailoverEvidence = { mode: 'sync', replicaStateBefore: 'sync', heldBytes: 0, killedPid: 1234, promotedInRecovery: false, grantOnReplica: true };

describe('PostgreSQL failover evidence', () => {
  it('asynchronous: shown only when the stream was held back and the promoted replica lacks the grant', () => {
    expect(pgFailoverMissing(asyncTook)).toEqual([]);
    expect(pgFailoverMissing({ ...asyncTook, heldBytes: 0, grantOnReplica: true })).toEqual([
      'the proxy held back no WAL after the grant: the stream was not stalled',
      'the promoted replica has the first grant: it was not lost',
    ]);
  });

  it('synchronous: the replica was a synchronous standby; the grant on it is the outcome, not the fault', () => {
    expect(pgFailoverMissing(syncTook)).toEqual([]);
    expect(pgFailoverMissing({ ...syncTook, grantOnReplica: false })).toEqual([]);
    expect(pgFailoverMissing({ ...syncTook, replicaStateBefore: 'async' })).toEqual(['the replica was async before the grant, not sync']);
  });

  it('either: no kill, no promotion, no streaming replica', () => {
    expect(pgFailoverMissing({ ...asyncTook, killedPid: 0, promotedInRecovery: true, replicaStateBefore: null })).toEqual([
      'the replica was not streaming before the grant, not async',
      'no primary postmaster was killed',
      'the replica is still in recovery after promote',
    ]);
  });
});
