// The fence row: advancing a resource's high-water mark in fencekeeper_fences.
// Shared by withFence() and PostgresFenceStore.
import { SequencerMismatchError, StaleTokenError, formatToken, matchesBinding, type FenceBinding, type FencingToken, type ResolvedFencing, type Sequencer, type SequencerKind } from '../../../src/index.js';
import { readBigint, run, type Queryable, type Statement } from '../database.js';

// One statement: insert the first mark, or advance it when ours is not
// smaller. ON CONFLICT DO UPDATE takes the row lock even when its WHERE fails,
// and under READ COMMITTED it re-reads the latest committed version after
// waiting, so the comparison is against the mark the previous holder
// committed, never a snapshot from before it. The lock is held until our
// transaction ends: that is what serializes holders of one resource.
// No row back means the WHERE failed: the presented token is stale. The
// backend's pid comes back too: cancelling a statement the work still has in
// flight when the admission is abandoned needs it, and asking here costs nothing.
//
// Why a second advance statement beside the one that opens a fenced
// transaction (./advance.ts), and why it checks no binding: it has one
// caller, restoreAdvance (./transaction.ts), which re-applies, in a
// transaction of its own, the advance of a fenced transaction whose commit
// failed. That advance was admitted already: the opening statement checked
// the binding in the very transaction that failed. Re-applying it runs no
// work and admits nothing; it only raises the high-water mark to a token the
// fence took, so the one thing a binding check could change here (a binding
// made in between, to another lock) would be answered by refusing to raise a
// mark, and a raised mark can only refuse more stale writes, never let one
// through. The opening statement's binding check and its equal-token row lock
// serve a transaction that is about to run work; this one does not.
export const ADVANCE = `INSERT INTO fencekeeper_fences AS f (resource, token, previous_token, updated_at)
VALUES ($1, $2, NULL, now())
ON CONFLICT (resource) DO UPDATE
  SET token = EXCLUDED.token, previous_token = f.token, updated_at = now()
  WHERE f.token <= EXCLUDED.token
RETURNING f.previous_token::text AS previous, pg_backend_pid() AS pid`;

export const CURRENT = 'SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1';

export interface Advanced {
  /** The mark before this advance (null: the resource's first token). */
  readonly previous: FencingToken | null;
  /** The pid of the backend whose transaction holds the advance. */
  readonly pid: number;
}

export function advanceStatement(resource: string, token: FencingToken): Statement {
  return { text: ADVANCE, values: [resource, formatToken(token)], prepared: true };
}

/**
 * Advance the fence inside the caller's transaction (the row stays locked until
 * it ends). Throws StaleTokenError carrying the current mark when `token` is
 * smaller; the caller must then roll back.
 */
export async function advanceFence(tx: Queryable, resource: string, token: FencingToken): Promise<Advanced> {
  const { rows } = await run(tx, advanceStatement(resource, token));
  const row = rows[0];
  if (row === undefined) throw await staleFence(tx, resource, token);
  return { previous: readBigint(row['previous']), pid: Number(row['pid']) };
}

/** The rare path: read the mark that refused us (the row is already locked by us). */
export async function staleFence(tx: Queryable, resource: string, token: FencingToken): Promise<StaleTokenError> {
  return new StaleTokenError(resource, token, await currentFence(tx, resource));
}

export async function currentFence(db: Queryable, resource: string): Promise<FencingToken | null> {
  const { rows } = await run(db, { text: CURRENT, values: [resource], prepared: true });
  return readBigint(rows[0]?.['token']);
}

/**
 * True when a binding row `b` does not admit the presented lock: a bare token
 * (`kind` NULL) is refused by any binding, a sequencer by one of another
 * kind, lock or source. Shared by the fence's check (./advance.ts) and
 * the table's (../rows/bind-table.ts); the arguments are SQL expressions.
 */
export function bindingRefuses(kind: string, lock: string, sourceKind: string, sourceId: string): string {
  return `(${kind} IS NULL OR (b.kind, b.lock, b.source_kind, b.source_id) IS DISTINCT FROM (${kind}, ${lock}, ${sourceKind}, ${sourceId}))`;
}

/** The presented lock as the four binding parameters of the checked advance (./advance.ts), NULL for a bare token. */
export function bindingValues(presented: Sequencer | null): [string | null, string | null, string | null, string | null] {
  return presented === null ? [null, null, null, null] : [presented.kind, presented.name, presented.source.kind, presented.source.id];
}

/** The mark and the binding of a fence, read in one statement. */
export const FENCE_STATE = (resource: string): string => `SELECT (SELECT token::text FROM fencekeeper_fences WHERE resource = ${resource}) AS token,
  b.kind, b.lock, b.source_kind, b.source_id
FROM (SELECT 1) AS one LEFT JOIN fencekeeper_fence_bindings b ON b.resource = ${resource}`;

/** Why an advance was refused, from the fence's state row: a mismatched lock, or a stale token. */
export function refusalFrom(resource: string, fencing: ResolvedFencing, row: Record<string, unknown> | undefined): StaleTokenError | SequencerMismatchError {
  const bound = bindingFrom(row);
  if (bound !== null && (fencing.sequencer === null || !matchesBinding(fencing.sequencer, bound))) {
    const presented = fencing.sequencer === null ? null : { kind: fencing.sequencer.kind, lock: fencing.sequencer.name, source: fencing.sequencer.source, token: fencing.sequencer.token };
    return new SequencerMismatchError(resource, bound, presented);
  }
  return new StaleTokenError(resource, fencing.token, readBigint(row?.['token']));
}

export async function refusal(tx: Queryable, resource: string, fencing: ResolvedFencing): Promise<StaleTokenError | SequencerMismatchError> {
  const { rows } = await run(tx, { text: FENCE_STATE('$1::text'), values: [resource], prepared: true });
  return refusalFrom(resource, fencing, rows[0]);
}

export function bindingFrom(row: Record<string, unknown> | undefined): FenceBinding | null {
  if (row === undefined || row['kind'] === null || row['kind'] === undefined) return null;
  return { kind: row['kind'] as SequencerKind, lock: String(row['lock']), source: { kind: String(row['source_kind']), id: String(row['source_id']) } };
}
