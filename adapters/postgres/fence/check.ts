// The check-only opening of a fenced transaction ({ advance: false }, for
// readers of a read-write lock): withFence and PostgresFenceStore admit the
// token on the same condition as an advance (at least the mark, and the
// sequencer of a bound fence's lock) but leave the mark where it is.
//
// The row lock is what makes the check hold until the work commits: an
// advance of the mark takes the fence row's lock FOR UPDATE (the upsert) or
// FOR NO KEY UPDATE (the equal-token probe), both of which conflict with
// FOR SHARE. So a check-only transaction holds the row FOR SHARE: readers
// share it and run side by side, and a writer's advance waits until every
// reader admitted before it has committed or rolled back, exactly as it
// waits for an earlier holder's advance. Without that lock a reader could
// commit after a writer with a larger token had been admitted.
//
// A fence with no mark yet has no row to lock: the check then places one
// with mark 1 (the smallest token, which admits every token as no mark does,
// see the core's fence-mode.ts), `ON CONFLICT DO NOTHING` so that an existing
// row is left as it is (and a row another transaction is inserting is waited
// for). Only that first check holds the row exclusively, as an inserter; a
// rollback takes the placed row with it.
//
// Isolation: at READ COMMITTED each statement reads the latest committed
// row after its lock was granted. Under REPEATABLE READ or SERIALIZABLE the
// transaction's snapshot comes from the first statement, and a row another
// transaction advanced after it fails FOR SHARE with 40001 (retry the
// transaction), as the advance does.
import { StaleTokenError, matchesBinding, type FencingToken, type ResolvedFencing } from '../../../src/index.js';
import { readBigint, run, type Queryable } from '../database.js';
import { quoteLiteral } from '../identifiers.js';
import { FENCE_STATE, bindingFrom, refusalFrom, type Advanced } from './row.js';

const PLACE = (resource: string): string => `INSERT INTO fencekeeper_fences (resource, token, previous_token, updated_at)
VALUES (${resource}, 1, NULL, now()) ON CONFLICT (resource) DO NOTHING`;
const SHARE = (resource: string): string => `SELECT token::text AS token, pg_backend_pid() AS pid FROM fencekeeper_fences WHERE resource = ${resource} FOR SHARE`;

/** One statement's answer, from pg or from run(). */
interface Answer {
  readonly rows: readonly unknown[];
  readonly rowCount?: number | null;
}

/** A fencing request with its mode: `advance: false` is check-only. */
export type FenceRequest = ResolvedFencing & { readonly advance?: boolean };

/** Is this request check-only ({ advance: false })? */
export function checksOnly(fencing: ResolvedFencing): boolean {
  return (fencing as FenceRequest).advance === false;
}

/** The three statements of the check, over a literal resource, for one simple-query message. */
export function checkStatements(resource: string): string {
  const literal = quoteLiteral(resource);
  return `${PLACE(literal)}; ${SHARE(literal)}; ${FENCE_STATE(literal)}`;
}

/**
 * What the check's three answers say: admitted (the mark before, null when
 * this check placed it, and the backend's pid), or the refusal to throw
 * once the transaction is rolled back.
 */
export function checkOutcome(resource: string, fencing: ResolvedFencing, placed: Answer | undefined, shared: Answer | undefined, state: Answer | undefined): Advanced | Error {
  const stateRow = state?.rows[0] as Record<string, unknown> | undefined;
  const bound = bindingFrom(stateRow);
  if (bound !== null && (fencing.sequencer === null || !matchesBinding(fencing.sequencer, bound))) return refusalFrom(resource, fencing, stateRow);
  const row = shared?.rows[0] as Record<string, unknown> | undefined;
  const mark = readBigint(row?.['token']);
  if (mark !== null && fencing.token < mark) return new StaleTokenError(resource, fencing.token, mark);
  const previous: FencingToken | null = placed?.rowCount === 1 ? null : mark;
  return { previous, pid: Number(row?.['pid']) };
}

/**
 * The check inside the caller's transaction (a Kysely transaction, or a pg
 * client inside BEGIN), statement by statement. Throws StaleTokenError or
 * SequencerMismatchError; the caller rolls back.
 */
export async function checkInTransaction(tx: Queryable, resource: string, fencing: ResolvedFencing): Promise<Advanced> {
  const placed = await run(tx, { text: PLACE('$1::text'), values: [resource], prepared: false });
  const shared = await run(tx, { text: SHARE('$1::text'), values: [resource], prepared: false });
  const state = await run(tx, { text: FENCE_STATE('$1::text'), values: [resource], prepared: false });
  const outcome = checkOutcome(resource, fencing, placed, shared, state);
  if (outcome instanceof Error) throw outcome;
  return outcome;
}
