// How a fenced transaction ends, for withFence() and PostgresFenceStore, on a
// pg client and a Kysely transaction alike. The rule: a fence advance never
// disappears, whatever happened to the work.
//
// The transaction is BEGIN, the fence advance, SAVEPOINT fencekeeper_fenced,
// then the work. When a statement of the work failed and the work caught the
// error, PostgreSQL answers COMMIT with the command tag ROLLBACK and no error,
// and by then the advance is gone with everything else. So the failure must
// show before COMMIT runs. Watching the work's statements cannot tell: the
// work may recover with a savepoint of its own, cursors and COPY report errors
// through events, and the work may send ROLLBACK itself. Instead the close is
// one simple-query message:
//
//   SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT
//
// PostgreSQL runs the statements of one Query message in order and skips the
// rest after the first that fails (protocol docs, "Multiple Statements in a
// Simple Query"). In an aborted transaction SET CONSTRAINTS fails (25P02);
// with a deferred constraint broken it fails on that constraint. Either way
// COMMIT never runs and our savepoint survives, so ROLLBACK TO it and COMMIT
// keep the advance alone. On success the message replaces the plain COMMIT:
// no extra round trip.
//
// What can still fail at COMMIT itself (a serialization failure, the
// connection lost during COMMIT), or work that ends the transaction on its
// own, takes the advance with it. Then the advance is applied again at once in
// a transaction of its own. Between the failure and that re-advance a holder
// with a smaller token can be admitted: that window is documented, not closed.
import { channel } from 'node:diagnostics_channel';
import { debuglog } from 'node:util';
import { CHANNELS, CommitFailedError, StaleTokenError, WorkNotCommittedError, type FencingToken } from '../../../src/index.js';
import { asError, isKysely, isSerializationFailure, rawQuery, sendKysely, sendPg, sqlState, type PgQueryable, type PgQueryResult, type Queryable } from '../database.js';
import { advanceFence } from './row.js';

const SAVEPOINT = 'fencekeeper_fenced';

/** Sent right after the advance: everything after it can be undone without undoing the advance. */
export const OPEN_SAVEPOINT = `SAVEPOINT ${SAVEPOINT}`;
const CLOSE = `SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT ${SAVEPOINT}; COMMIT`;
const KEEP_ADVANCE = `ROLLBACK TO SAVEPOINT ${SAVEPOINT}; COMMIT`;

/** Raised last by ABANDON: seeing it proves every statement before it ran. */
const ABANDONED = 'FKABT';

/**
 * For an admission given up while its work may still be sending statements:
 * undo the work, commit the advance, then leave the connection in a failed
 * transaction, in the same message, so that nothing the work sends after it
 * can run before the connection is thrown away (or rolled back by Kysely).
 */
export const ABANDON = `ROLLBACK TO SAVEPOINT ${SAVEPOINT}; COMMIT; BEGIN; DO $$BEGIN RAISE EXCEPTION USING ERRCODE = '${ABANDONED}', MESSAGE = 'fencekeeper: this fenced transaction was abandoned; the connection takes no more statements'; END$$`;

/** Thrown out of a Kysely transaction callback only to make Kysely roll back. */
export const ROLL_BACK = new Error('fencekeeper: roll back the fenced transaction');

/** ROLLBACK on a pg client; answers the error that makes the client unusable, if it failed. */
export async function rollback(client: PgQueryable): Promise<Error | undefined> {
  try {
    await client.query({ text: 'ROLLBACK' });
    return undefined;
  } catch (error) {
    return asError(error);
  }
}

/** Sends statements without parameters (several travel as one simple-query message); answers the last command tag where the driver shows it. */
export type Send = (text: string) => Promise<string | undefined>;

export function sender(tx: Queryable): Send {
  if (isKysely(tx)) {
    return async (text) => {
      // Kysely hides the tags of a multi-statement answer.
      await sendKysely(tx, rawQuery(text, []));
      return undefined;
    };
  }
  return async (text) => {
    const answer: PgQueryResult | PgQueryResult[] = await sendPg(tx, { text });
    return (Array.isArray(answer) ? answer[answer.length - 1] : answer)?.command;
  };
}

export type Ending =
  | { readonly committed: true }
  | {
      readonly committed: false;
      /** The advance was committed on its own (false: it went with the transaction). */
      readonly advanceKept: boolean;
      readonly cause: unknown;
    };

export type Failed = Extract<Ending, { committed: false }>;

const COMMITTED: Ending = Object.freeze({ committed: true });

/** Commit the work with the advance, or else the advance alone. */
export async function closeFenced(send: Send): Promise<Ending> {
  let tag: string | undefined;
  try {
    tag = await send(CLOSE);
  } catch (cause) {
    return { committed: false, advanceKept: await keepAdvanceOnly(send), cause };
  }
  // After RELEASE succeeded in the same message COMMIT cannot answer
  // ROLLBACK; checked anyway, so that such an answer is never taken for a commit.
  if (tag === 'ROLLBACK') return { committed: false, advanceKept: false, cause: new Error('COMMIT was answered with ROLLBACK') };
  return COMMITTED;
}

/** Undo everything after the savepoint and commit the advance. False: the transaction (and the advance) is already gone, or the connection is. */
export async function keepAdvanceOnly(send: Send): Promise<boolean> {
  try {
    return (await send(KEEP_ADVANCE)) !== 'ROLLBACK';
  } catch {
    return false;
  }
}

/** Send ABANDON; answers whether the advance was committed. */
export async function abandon(send: Send): Promise<boolean> {
  try {
    await send(ABANDON);
  } catch (error) {
    return sqlState(error) === ABANDONED;
  }
  return false; // the message always ends in an error; without one, trust nothing
}

const RESTORE_ATTEMPTS = 5;

/**
 * Apply the advance again in a transaction of its own (one autocommit
 * statement on the pool or Kysely instance). True when the mark now stands at
 * `token` or above. A serialization failure (REPEATABLE READ or SERIALIZABLE
 * as the default, with another holder on the row) is tried again.
 */
export async function restoreAdvance(db: Queryable, resource: string, token: FencingToken): Promise<boolean> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await advanceFence(db, resource, token);
      return true;
    } catch (error) {
      if (error instanceof StaleTokenError) return true; // a larger mark already stands
      if (!isSerializationFailure(error) || attempt === RESTORE_ATTEMPTS) return false;
    }
  }
}

/** What `fencekeeper:postgres:commit-failed` publishes. */
export interface CommitFailure {
  readonly origin: 'withFence' | 'PostgresFenceStore';
  readonly resource: string;
  readonly token: FencingToken;
  /** kept: committed on its own; restored: lost with the transaction, applied again; lost: could not be applied again. */
  readonly advance: 'kept' | 'restored' | 'lost';
  readonly error: unknown;
}

const debug = debuglog('fencekeeper');
const commitFailed = channel(CHANNELS.postgresCommitFailed);

export function reportCommitFailure(failure: CommitFailure): void {
  debug('%s: %s: the fenced work did not commit (fence advance %s): %o', failure.origin, failure.resource, failure.advance, failure.error);
  if (commitFailed.hasSubscribers) commitFailed.publish(failure);
}

/** After a close that did not commit: make sure the advance stands, report, and build the caller's error. */
export async function failedClose(db: Queryable, origin: CommitFailure['origin'], resource: string, token: FencingToken, ending: Failed): Promise<WorkNotCommittedError | CommitFailedError> {
  if (ending.advanceKept) {
    const error = new WorkNotCommittedError(resource, token, { cause: ending.cause });
    reportCommitFailure({ origin, resource, token, advance: 'kept', error });
    return error;
  }
  const restored = await restoreAdvance(db, resource, token);
  const error = new CommitFailedError(resource, token, restored, { cause: ending.cause, retryable: restored && isSerializationFailure(ending.cause) });
  reportCommitFailure({ origin, resource, token, advance: restored ? 'restored' : 'lost', error });
  return error;
}

/** After work that failed (withFence's work threw, a store admission was aborted): apply the advance again if it went with the transaction. */
export async function keepAfterFailure(db: Queryable, origin: CommitFailure['origin'], resource: string, token: FencingToken, advanceKept: boolean, cause: unknown): Promise<boolean> {
  if (advanceKept) return true;
  const restored = await restoreAdvance(db, resource, token);
  reportCommitFailure({ origin, resource, token, advance: restored ? 'restored' : 'lost', error: cause });
  return restored;
}
