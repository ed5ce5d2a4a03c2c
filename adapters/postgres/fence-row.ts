// The fence row: advancing a resource's high-water mark in fencekeeper_fences.
// Shared by withFence() and PostgresFenceStore.
import { SequencerMismatchError, StaleTokenError, formatToken, matchesBinding, type FenceBinding, type FencingToken, type ResolvedFencing, type Sequencer, type SequencerKind } from '../../src/index.js';
import { readBigint, run, type Queryable, type Statement } from './database.js';

// One statement: insert the first mark, or advance it when ours is not
// smaller. ON CONFLICT DO UPDATE takes the row lock even when its WHERE fails,
// and under READ COMMITTED it re-reads the latest committed version after
// waiting, so the comparison is against the mark the previous holder
// committed, never a snapshot from before it. The lock is held until our
// transaction ends: that is what serializes holders of one resource.
// No row back means the WHERE failed: the presented token is stale. The
// backend's pid comes back too: cancelling a statement the work still has in
// flight when the admission is abandoned needs it, and asking here costs nothing.
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

// The advance that opens a fenced transaction, checked against the fence's
// binding (fencekeeper_fence_bindings, migration 006) in the same statement.
// $3..$6 are the presented sequencer's kind, lock, source kind and source id,
// all NULL for a bare token. The row to insert is produced only when the
// fence is unbound, or bound to exactly that lock: otherwise nothing is
// inserted or updated, no row lock is taken, and no row comes back, as for a
// stale token (the refusal then reads which it was). A fence that was never
// bound has no binding row, so bare tokens pass there as before.
const MISMATCHED = (resource: string, kind: string, lock: string, sourceKind: string, sourceId: string): string => `EXISTS (
  SELECT 1 FROM fencekeeper_fence_bindings b
  WHERE b.resource = ${resource}
    AND (${kind} IS NULL OR (b.kind, b.lock, b.source_kind, b.source_id) IS DISTINCT FROM (${kind}, ${lock}, ${sourceKind}, ${sourceId})))`;

export const ADVANCE_CHECKED = `INSERT INTO fencekeeper_fences AS f (resource, token, previous_token, updated_at)
SELECT $1::text, $2::int8, NULL, now()
WHERE NOT ${MISMATCHED('$1::text', '$3::text', '$4::text', '$5::text', '$6::text')}
ON CONFLICT (resource) DO UPDATE
  SET token = EXCLUDED.token, previous_token = f.token, updated_at = now()
  WHERE f.token <= EXCLUDED.token
RETURNING f.previous_token::text AS previous, pg_backend_pid() AS pid`;

/**
 * The variant for a message of several statements, whose rows cannot be
 * read (Kysely): a refusal must raise an error instead. A stale token or a
 * mismatched sequencer sets the mark to NULL, which the NOT NULL column
 * refuses (SQLSTATE 23502 on fencekeeper_fences.token); the refusal then
 * reads which it was once the transaction is rolled back.
 */
export function advanceOrFail(resource: string, token: string, kind: string, lock: string, sourceKind: string, sourceId: string): string {
  return `INSERT INTO fencekeeper_fences AS f (resource, token, previous_token, updated_at)
SELECT ${resource}, CASE WHEN NOT ${MISMATCHED(resource, kind, lock, sourceKind, sourceId)} THEN ${token} END, NULL, now()
ON CONFLICT (resource) DO UPDATE
  SET token = CASE WHEN f.token <= EXCLUDED.token THEN EXCLUDED.token END, previous_token = f.token, updated_at = now()`;
}

/** The presented lock as the four binding parameters ($3..$6 of ADVANCE_CHECKED), NULL for a bare token. */
export function bindingValues(presented: Sequencer | null): [string | null, string | null, string | null, string | null] {
  return presented === null ? [null, null, null, null] : [presented.kind, presented.name, presented.source.kind, presented.source.id];
}

/** Advance the fence, checked against its binding, inside the caller's transaction (as advanceFence). */
export async function advanceCheckedFence(tx: Queryable, resource: string, fencing: ResolvedFencing): Promise<Advanced> {
  const { rows } = await run(tx, { text: ADVANCE_CHECKED, values: [resource, formatToken(fencing.token), ...bindingValues(fencing.sequencer)], prepared: true });
  const row = rows[0];
  if (row === undefined) throw await refusal(tx, resource, fencing);
  return { previous: readBigint(row['previous']), pid: Number(row['pid']) };
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
