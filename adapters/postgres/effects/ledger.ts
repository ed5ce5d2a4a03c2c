// The effect ledger's statements (fencekeeper_effects, migration 004) and
// how its rows read back. withEffect() runs the writes only inside a fenced
// transaction on the effect's resource; the listing is a plain read.
//
// Timestamps travel as epoch milliseconds in text (like tokens, ::text
// casts), so a user's global pg type parsers never see them.
import { CorruptFenceError, formatToken, type FencingToken } from '../../../src/index.js';
import { readBigint, run, type Queryable, type Statement } from '../database.js';

/** The state of an effect in the ledger: pending (its outcome not recorded), succeeded or failed. */
export type EffectState = 'pending' | 'succeeded' | 'failed';

/** A definite failure as recorded: the message, and the JSON details the effect gave. */
export interface RecordedFailure {
  readonly message: string;
  readonly details?: unknown;
}

/** One row of the ledger, as pendingEffects() and a reconcile see it. */
export interface RecordedEffect {
  readonly resource: string;
  readonly key: string;
  /** What the outside system saw (the same for every holder of this attempt). */
  readonly idempotencyKey: string;
  /** 1, then one more for each run of a failed effect asked for by retryFailed. */
  readonly attempt: number;
  readonly state: EffectState;
  /** The fencing token that recorded the current state. */
  readonly token: FencingToken;
  /** The wall-clock instant after which the recorded call can no longer land at the outside system; null: none was given. */
  readonly deadline: Date | null;
  /** Added to `deadline` before a "did not happen" is trusted: clock skew plus the outside system's processing time. */
  readonly graceMs: number;
  /** succeeded: false when the result could not be stored as JSON (`result` is then undefined). */
  readonly resultStored: boolean;
  /** succeeded: the recorded result (undefined when the effect returned nothing or it was not stored). */
  readonly result: unknown;
  /** The latest definite failure (failed; or an earlier attempt's, while a retry is pending). */
  readonly failure: RecordedFailure | null;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

const COLUMNS = `resource, effect_key, idempotency_key, attempt, state, token::text AS token,
  (extract(epoch FROM deadline) * 1000)::text AS deadline_ms, grace_ms, result_stored, result, failure,
  (extract(epoch FROM created_at) * 1000)::text AS created_ms, (extract(epoch FROM updated_at) * 1000)::text AS updated_ms`;

// An absent effect is recorded pending in the same statement that looks for
// it: the common case (a new effect) is one round trip. The fence row's lock,
// held by the caller's transaction, serializes every writer of this resource's
// effects, so DO NOTHING here means the row was there before we looked.
const CLAIM = `INSERT INTO fencekeeper_effects (resource, effect_key, idempotency_key, attempt, state, token, deadline, grace_ms)
VALUES ($1, $2, $3, 1, 'pending', $4, to_timestamp($5::float8 / 1000), $6)
ON CONFLICT (resource, effect_key) DO NOTHING
RETURNING attempt`;

const READ = `SELECT ${COLUMNS} FROM fencekeeper_effects WHERE resource = $1 AND effect_key = $2 FOR UPDATE`;

// Pending again, by us: a failed effect run again (a new attempt and key), or
// a pending one that reconcile settled as never having happened. Only the
// state that was read is replaced (same attempt, state and recording token).
const REPEND = `UPDATE fencekeeper_effects
   SET attempt = $6, idempotency_key = $7, state = 'pending', token = $8,
       deadline = to_timestamp($9::float8 / 1000), grace_ms = $10, result_stored = NULL, result = NULL, updated_at = now()
 WHERE resource = $1 AND effect_key = $2 AND attempt = $3 AND state = $4 AND token = $5`;

// The outcome of the pending attempt that was read.
const SETTLE = `UPDATE fencekeeper_effects
   SET state = $5, token = $6, result_stored = $7, result = $8, failure = coalesce($9, failure), updated_at = now()
 WHERE resource = $1 AND effect_key = $2 AND attempt = $3 AND state = 'pending' AND token = $4`;

/** The row's identity as read: a write applies only if the row still is what was read. */
export interface Observed {
  readonly attempt: number;
  readonly state: EffectState;
  readonly token: FencingToken;
}

/** Record a new effect pending; false when the ledger already has it. */
export async function claimEffect(tx: Queryable, resource: string, key: string, idempotencyKey: string, token: FencingToken, deadline: number | null, graceMs: number): Promise<boolean> {
  const { rows } = await run(tx, statement(CLAIM, [resource, key, idempotencyKey, formatToken(token), deadline === null ? null : String(deadline), graceMs]));
  return rows.length > 0;
}

/** The effect's row, locked until the transaction ends; null when there is none. */
export async function readEffect(tx: Queryable, resource: string, key: string): Promise<RecordedEffect | null> {
  const { rows } = await run(tx, statement(READ, [resource, key]));
  const row = rows[0];
  return row === undefined ? null : recordOf(row);
}

export async function recordPendingAgain(
  tx: Queryable,
  observed: RecordedEffect,
  next: { readonly attempt: number; readonly idempotencyKey: string; readonly token: FencingToken; readonly deadline: number | null; readonly graceMs: number },
): Promise<boolean> {
  const { rowCount } = await run(tx, statement(REPEND, [
    observed.resource, observed.key, observed.attempt, observed.state, formatToken(observed.token),
    next.attempt, next.idempotencyKey, formatToken(next.token), next.deadline === null ? null : String(next.deadline), next.graceMs,
  ]));
  return rowCount > 0;
}

export type Settlement =
  | { readonly state: 'succeeded'; readonly resultStored: boolean; readonly result: string | null }
  | { readonly state: 'failed'; readonly failure: string };

/** Record the outcome of the pending attempt `observed`, with `token`; false when the row is no longer that attempt. */
export async function settleEffect(tx: Queryable, observed: { readonly resource: string; readonly key: string } & Observed, token: FencingToken, settlement: Settlement): Promise<boolean> {
  const values = settlement.state === 'succeeded'
    ? ['succeeded', formatToken(token), settlement.resultStored, settlement.result, null]
    : ['failed', formatToken(token), null, null, settlement.failure];
  const { rowCount } = await run(tx, statement(SETTLE, [observed.resource, observed.key, observed.attempt, formatToken(observed.token), ...values]));
  return rowCount > 0;
}

export interface LedgerQuery {
  readonly resource: string | null;
  readonly state: EffectState | null;
  readonly olderThanMs: number | null;
  readonly limit: number | null;
}

/** Rows matching `query`, longest unchanged first. */
export async function queryEffects(db: Queryable, query: LedgerQuery): Promise<RecordedEffect[]> {
  const text = `SELECT ${COLUMNS} FROM fencekeeper_effects
 WHERE ($1::text IS NULL OR resource = $1) AND ($2::text IS NULL OR state = $2)
   AND ($3::float8 IS NULL OR updated_at <= now() - $3::float8 * interval '1 millisecond')
 ORDER BY updated_at, resource, effect_key
 LIMIT $4::bigint`;
  const { rows } = await run(db, statement(text, [query.resource, query.state, query.olderThanMs === null ? null : String(query.olderThanMs), query.limit]));
  return rows.map(recordOf);
}

function statement(text: string, values: unknown[]): Statement {
  return { text, values, prepared: true };
}

function recordOf(row: Record<string, unknown>): RecordedEffect {
  const resource = String(row['resource']);
  const key = String(row['effect_key']);
  const state = String(row['state']) as EffectState;
  const resultStored = row['result_stored'] === true;
  return Object.freeze({
    resource,
    key,
    idempotencyKey: String(row['idempotency_key']),
    attempt: Number(row['attempt']),
    state,
    token: readBigint(row['token']) as FencingToken,
    deadline: row['deadline_ms'] === null ? null : new Date(Number(row['deadline_ms'])),
    graceMs: Number(row['grace_ms']),
    resultStored: state === 'succeeded' && resultStored,
    result: state === 'succeeded' && resultStored ? parseJson(row['result'], resource, key, 'result') : undefined,
    failure: row['failure'] === null ? null : failureOf(parseJson(row['failure'], resource, key, 'failure'), resource, key),
    createdAt: new Date(Number(row['created_ms'])),
    updatedAt: new Date(Number(row['updated_ms'])),
  });
}

/** JSON text from the ledger; SQL NULL is a recorded undefined. */
function parseJson(text: unknown, resource: string, key: string, column: string): unknown {
  if (text === null || text === undefined) return undefined;
  try {
    return JSON.parse(String(text)) as unknown;
  } catch (error) {
    // Written by withEffect as JSON.stringify output: only a hand edit gets here.
    throw new CorruptFenceError(resource, `the ledger's ${column} of effect ${JSON.stringify(key)} on ${resource} is not JSON`, { cause: error });
  }
}

function failureOf(value: unknown, resource: string, key: string): RecordedFailure {
  const message = (value as { message?: unknown } | null)?.message;
  if (typeof message !== 'string') throw new CorruptFenceError(resource, `the ledger's failure of effect ${JSON.stringify(key)} on ${resource} has no message`);
  const details = (value as { details?: unknown }).details;
  return Object.freeze(details === undefined ? { message } : { message, details });
}
