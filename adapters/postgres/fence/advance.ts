// The statement that opens a fenced transaction (withFence, PostgresFenceStore):
// checks the fence's binding, then inserts the first mark, advances it, or,
// for a token equal to the mark, only locks the row.
//
// The equal token is the common case: one holder doing many transactions with
// one token. Rewriting the row then would cost a new tuple version and its
// WAL on every transaction for nothing, so the upsert's conflict branch is
// guarded by `WHERE f.token <> EXCLUDED.token`. ON CONFLICT DO UPDATE locks
// the conflicting row even when that WHERE is false (PostgreSQL docs, INSERT:
// "only rows for which this expression returns true will be updated, although
// all rows will be locked when the ON CONFLICT DO UPDATE action is taken"),
// and under READ COMMITTED it evaluates the WHERE against the latest
// committed version after waiting for the row. So an equal token comes back
// with no row, holding the row lock, and the row is left as it was:
// `updated_at` and `previous_token` tell when the mark last rose and what it
// was before, not when it was last admitted.
//
// Only at READ COMMITTED, where every statement of the work takes a fresh
// snapshot, after the fence row's lock was granted. Under REPEATABLE READ and
// SERIALIZABLE the transaction's snapshot is taken by the fence statement
// itself, before it waits for the row: a holder that waited must fail (40001)
// rather than run its work on a snapshot without the previous holder's
// commit, and PostgreSQL fails it only if the previous holder wrote the row.
// So there an equal token rewrites the row as before (previous_token: the
// token itself, updated_at: now).
//
// The three outcomes, told apart by the statement's own answer:
// - no row: the mark equals the token; the row is locked, not rewritten;
// - a row whose token is ours: inserted (previous NULL), advanced (previous:
//   the mark before) or, under REPEATABLE READ or SERIALIZABLE, equal
//   (previous: the token);
// - a row whose token is larger: stale. Its SET leaves every column as it was
//   (a row version that the caller's ROLLBACK discards) so that RETURNING can
//   hand back the mark that refused us, read under our lock, with no second
//   statement. Only on this rare path is anything written.
//
// The binding check (fencekeeper_fence_bindings, migration 006) stays in the
// row to insert: on a mismatched sequencer (or a bare token on a bound fence)
// that row's token is NULL, which the NOT NULL column refuses before the
// conflict is looked for (SQLSTATE 23502 on fencekeeper_fences.token): no row
// is inserted, updated or locked, and the transaction is aborted. A bare
// token passes a fence that was never bound. The refusal then reads which
// binding refused it (./row.ts, FENCE_STATE) after rolling back.
import { StaleTokenError, formatToken, type FencingToken, type ResolvedFencing } from '../../../src/index.js';
import { readBigint, run, sqlState, type Queryable } from '../database.js';
import { bindingRefuses, bindingValues, type Advanced } from './row.js';
import { checkInTransaction, checksOnly } from './check.js';

const MISMATCHED = (resource: string, kind: string, lock: string, sourceKind: string, sourceId: string): string => `EXISTS (
  SELECT 1 FROM fencekeeper_fence_bindings b
  WHERE b.resource = ${resource}
    AND ${bindingRefuses(kind, lock, sourceKind, sourceId)})`;

/**
 * The fence statement over the given SQL expressions (parameters or
 * literals). `stale`: 'row' answers a stale token with the unchanged row (its
 * larger token), 'error' raises 23502 instead, for a driver that hands back no
 * rows of a message of several statements (Kysely).
 */
function advanceText(resource: string, token: string, kind: string, lock: string, sourceKind: string, sourceId: string, stale: 'row' | 'error'): string {
  // Admitted (advanced, or an equal token rewritten under REPEATABLE READ or SERIALIZABLE).
  const admitted = 'f.token <= EXCLUDED.token';
  const set = stale === 'row'
    ? `token = GREATEST(f.token, EXCLUDED.token),
      previous_token = CASE WHEN ${admitted} THEN f.token ELSE f.previous_token END,
      updated_at = CASE WHEN ${admitted} THEN now() ELSE f.updated_at END`
    : `token = CASE WHEN ${admitted} THEN EXCLUDED.token END, previous_token = f.token, updated_at = now()`;
  return `INSERT INTO fencekeeper_fences AS f (resource, token, previous_token, updated_at)
SELECT ${resource}, CASE WHEN NOT ${MISMATCHED(resource, kind, lock, sourceKind, sourceId)} THEN ${token} END, NULL, now()
ON CONFLICT (resource) DO UPDATE
  SET ${set}
  WHERE f.token <> EXCLUDED.token OR current_setting('transaction_isolation') <> 'read committed'
RETURNING f.token::text AS token, f.previous_token::text AS previous`;
}

/** With parameters $1 resource, $2 token, $3..$6 the presented lock (bindingValues); prepared once per connection. */
export const OPEN_ADVANCE = advanceText('$1::text', '$2::int8', '$3::text', '$4::text', '$5::text', '$6::text', 'row');

/** The statement over literals, refusing with 23502 (a stale token included): for a message whose rows cannot be read. */
export function advanceOrRaise(resource: string, token: string, kind: string, lock: string, sourceKind: string, sourceId: string): string {
  return advanceText(resource, token, kind, lock, sourceKind, sourceId, 'error');
}

/**
 * The probe for the common case, a token equal to the mark at READ
 * COMMITTED: lock the row when it carries our token and a binding that takes
 * the presented lock, and do nothing else. One row back: admitted, exactly as
 * the upsert's equal path (the row locked, not rewritten). No row: anything
 * else (no row yet, another mark, a binding that refuses us, another
 * isolation level), which the caller answers by rolling back and opening
 * with OPEN_ADVANCE, so every such case takes the upsert's path unchanged.
 *
 * Why a second statement: the upsert runs PostgreSQL's INSERT machinery
 * (the row to insert built, the conflict looked up in the unique index,
 * ON CONFLICT's projection and RETURNING) even when all it does is lock the
 * row. The probe is a plain index lookup with the row lock: measured with
 * the bench's transaction (test/bench/postgres-bench.mjs, 8 connections,
 * FK_POSTGRES_BASELINE the build before), about 20 µs less server CPU per
 * transaction.
 *
 * The lock: FOR NO KEY UPDATE conflicts with itself and with the upsert's
 * FOR UPDATE, so holders still serialize on the row. Under READ COMMITTED a
 * probe that waited re-checks its conditions against the row's latest
 * committed version before it answers (PostgreSQL docs, SELECT, "The Locking
 * Clause"): a mark another holder moved meanwhile answers no row. The
 * isolation test stands first: under REPEATABLE READ and SERIALIZABLE an
 * equal token must rewrite the row (see above), so there the probe answers
 * no row without looking at it.
 *
 * Parameters as OPEN_ADVANCE's; prepared once per connection beside it.
 */
export const OPEN_EQUAL = `SELECT 1 AS locked FROM fencekeeper_fences AS f
WHERE current_setting('transaction_isolation') = 'read committed'
  AND f.resource = $1::text AND f.token = $2::int8
  AND NOT ${MISMATCHED('$1::text', '$3::text', '$4::text', '$5::text', '$6::text')}
FOR NO KEY UPDATE OF f`;

/**
 * The two statements above for a driver that hands back no rows of a message
 * of several statements (withFence on Kysely, ./open.ts), where only an
 * error can say "not admitted as hoped", both prepared once per connection:
 * - the upsert refusing a stale token with 23502 (advanceOrRaise), over
 *   parameters as OPEN_ADVANCE's;
 * - the probe answering a miss with 22012 (division by zero: no row locked,
 *   count 0). Nothing else in it divides, so 22012 from it means a miss and
 *   nothing else; its row lock and conditions are OPEN_EQUAL's, unchanged.
 */
export const OPEN_ADVANCE_OR_RAISE = advanceOrRaise('$1::text', '$2::int8', '$3::text', '$4::text', '$5::text', '$6::text');
export const OPEN_EQUAL_OR_RAISE = `SELECT 1 / count(*) AS locked FROM (${OPEN_EQUAL}) AS probe`;

/** The probe's miss from OPEN_EQUAL_OR_RAISE (division_by_zero). */
export function isProbeMiss(error: unknown): boolean {
  return sqlState(error) === '22012';
}

/** One row always, with the backend's pid: for a driver that runs one statement with parameters (Kysely). */
const ADVANCE_WITH_PID = `WITH advanced AS (${OPEN_ADVANCE})
SELECT a.token, a.previous, pg_backend_pid() AS pid FROM (SELECT 1) AS one LEFT JOIN advanced a ON true`;

/** The refusal that aborts the transaction: a mismatched binding (or, from advanceOrRaise, a stale token). */
export function isRefusalError(error: unknown): boolean {
  const fields = error as { table?: unknown; column?: unknown } | null;
  return sqlState(error) === '23502' && fields?.table === 'fencekeeper_fences' && fields.column === 'token';
}

export type Outcome =
  | { readonly ok: true; readonly previous: FencingToken | null }
  | { readonly ok: false; readonly stale: StaleTokenError };

/** What the statement's row (or its absence) says, for `fencing` presented on `resource`. */
export function outcomeOf(resource: string, fencing: ResolvedFencing, row: Record<string, unknown> | undefined): Outcome {
  const mark = readBigint(row?.['token']);
  // No row: the mark equals the token (locked, not rewritten); "the mark before" is the token itself.
  if (mark === null) return { ok: true, previous: fencing.token };
  if (mark === fencing.token) return { ok: true, previous: readBigint(row?.['previous']) };
  return { ok: false, stale: new StaleTokenError(resource, fencing.token, mark) };
}

/**
 * The advance inside the caller's transaction (Kysely's, or a pg client's),
 * one statement with parameters. Throws StaleTokenError (the caller rolls
 * back); a mismatched binding throws the 23502 error (isRefusalError), with
 * the transaction aborted.
 */
export async function advanceInTransaction(tx: Queryable, resource: string, fencing: ResolvedFencing): Promise<Advanced> {
  // Check-only ({ advance: false }): the refusal is thrown as it is (StaleTokenError, SequencerMismatchError).
  if (checksOnly(fencing)) return checkInTransaction(tx, resource, fencing);
  const { rows } = await run(tx, { text: ADVANCE_WITH_PID, values: [resource, formatToken(fencing.token), ...bindingValues(fencing.sequencer)], prepared: true });
  const outcome = outcomeOf(resource, fencing, rows[0]);
  if (!outcome.ok) throw outcome.stale;
  return { previous: outcome.previous, pid: Number(rows[0]?.['pid']) };
}
