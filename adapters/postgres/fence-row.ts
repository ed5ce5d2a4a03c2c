// The fence row: advancing a resource's high-water mark in fencekeeper_fences.
// Shared by withFence() and PostgresFenceStore.
import { StaleTokenError, formatToken, type FencingToken } from '../../src/index.js';
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
