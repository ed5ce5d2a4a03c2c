// Opening and closing a fenced transaction on one connection (withFence,
// MySqlFenceStore). The fence of a resource is its row in fencekeeper_fences.
//
//   START TRANSACTION
//   SELECT ... FOR UPDATE        the mark and the binding, locked (a current read)
//   [UPDATE]                     the advance (an equal token writes nothing)
//   SAVEPOINT fencekeeper_fenced
//   ... the work ...
//   RELEASE SAVEPOINT fencekeeper_fenced; COMMIT
//
// Every read of the mark is a locking read: InnoDB's default isolation is
// REPEATABLE READ, where a plain SELECT reads the transaction's snapshot, and
// a snapshot older than a newer holder's commit would show an older mark. A
// locking read reads the latest committed row (or fails with 1020 under
// innodb_snapshot_isolation=ON, translated in database.ts), and holds the row
// for the transaction, so holders of one resource are serialized.
//
// A resource's first admission inserts its row, on its own (autocommitted,
// before the transaction that locks it: see advance()); racing first
// admissions then see a duplicate key, never a deadlock on the gap.
//
// The advance outlives the work: the savepoint is set right after it, so a
// failed work is rolled back to it and the advance commits alone. When the
// transaction is gone before that (a deadlock or a lock wait timeout rolled it
// back whole, taking the advance with it; the work sent COMMIT or ROLLBACK),
// RELEASE / ROLLBACK TO SAVEPOINT fails with 1305 and the advance is applied
// again at once in a transaction of its own (keepAdvance).
import { SequencerMismatchError, StaleTokenError, formatToken, matchesBinding, type FenceBinding, type FencingToken, type ResolvedFencing, type SequencerKind } from '../../src/index.js';
import { ER_DUP_ENTRY, ER_LOCK_DEADLOCK, ER_SP_DOES_NOT_EXIST, errnoOf, headerOf, isPool, query, readToken, rowsOf, type MySqlPool, type MySqlPoolConnection, type MySqlQueryable, type Row } from './database.js';

const LOCK_FENCE = `SELECT CAST(f.token AS CHAR) AS token, b.kind, b.lock_name, b.source_kind, b.source_id
FROM (SELECT 1 AS one) AS o
LEFT JOIN fencekeeper_fences AS f ON f.resource = ?
LEFT JOIN fencekeeper_fence_bindings AS b ON b.resource = ?
FOR UPDATE`;
// Check-only ({ advance: false }, readers of a read-write lock): the same read
// in share mode. Readers share the row and run side by side; an advancing
// holder's FOR UPDATE waits until they end, and they wait for it.
const SHARE_FENCE = LOCK_FENCE.replace(/FOR UPDATE$/, 'LOCK IN SHARE MODE');
// The first mark, unless a binding refuses the presented lock (then nothing is inserted, and the locking read refuses it).
const INSERT_FIRST_MARK = `INSERT INTO fencekeeper_fences (resource, token, previous_token, updated_at)
SELECT ?, CAST(? AS SIGNED), NULL, NOW(6) FROM DUAL
WHERE NOT EXISTS (SELECT 1 FROM fencekeeper_fence_bindings AS b WHERE b.resource = ?
  AND NOT (b.kind <=> ? AND b.lock_name <=> ? AND b.source_kind <=> ? AND b.source_id <=> ?))`;
// MySQL and MariaDB assign left to right (MariaDB's SIMULTANEOUS_ASSIGNMENT mode reads the old row for
// every assignment): either way previous_token takes the mark before token changes.
const ADVANCE_FENCE = 'UPDATE fencekeeper_fences SET previous_token = token, token = CAST(? AS SIGNED), updated_at = NOW(6) WHERE resource = ?';
const SAVEPOINT = 'SAVEPOINT fencekeeper_fenced';
/** How many times an open that deadlocked (before any work ran) starts over. */
const OPEN_ATTEMPTS = 5;

/** Text from a VARBINARY column (mysql2 hands back a Buffer). */
export function text(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

export function bindingFrom(row: Row | undefined): FenceBinding | null {
  const kind = text(row?.['kind']);
  if (row === undefined || kind === null) return null;
  return { kind: kind as SequencerKind, lock: text(row['lock_name']) ?? '', source: { kind: text(row['source_kind']) ?? '', id: text(row['source_id']) ?? '' } };
}

/** A fencing request with its mode: `advance: false` is check-only. */
export type FenceRequest = ResolvedFencing & { readonly advance?: boolean };

/** Is this request check-only ({ advance: false })? */
export function checksOnly(fencing: ResolvedFencing): boolean {
  return (fencing as FenceRequest).advance === false;
}

/** A bound fence (or table) refuses another lock's sequencer and a bare token; null when it admits the presented one. */
export function mismatch(resource: string, fencing: ResolvedFencing, bound: FenceBinding | null): SequencerMismatchError | null {
  if (bound === null) return null;
  const presented = fencing.sequencer;
  if (presented !== null && matchesBinding(presented, bound)) return null;
  return new SequencerMismatchError(resource, bound, presented === null ? null : { kind: presented.kind, lock: presented.name, source: presented.source, token: presented.token });
}

/**
 * Start a transaction on `connection` (idle, outside one) that holds the
 * fence row of `resource` locked, and compare (equal passes, larger
 * advances, smaller throws StaleTokenError with the mark, a binding that
 * refuses the presented lock throws SequencerMismatchError; after a throw
 * the caller rolls back). Answers the mark before (null: this call made the
 * first mark).
 */
export async function advance(connection: MySqlQueryable, resource: string, fencing: ResolvedFencing): Promise<FencingToken | null> {
  const token = formatToken(fencing.token);
  const checking = checksOnly(fencing);
  const s = fencing.sequencer;
  const presented = [s?.kind ?? null, s?.name ?? null, s?.source.kind ?? null, s?.source.id ?? null];
  let inserted = false;
  for (;;) {
    await query(connection, 'START TRANSACTION');
    const [row] = await rowsOf(connection, checking ? SHARE_FENCE : LOCK_FENCE, [resource, resource]);
    const refused = mismatch(resource, fencing, bindingFrom(row));
    if (refused !== null) throw refused;
    const current = readToken(row?.['token']);
    if (current === null) {
      // No row yet. Inserting it here, after the locking read, deadlocks under REPEATABLE
      // READ when several first admissions race (each holds the gap the others insert
      // into). So the first mark is inserted on its own, outside the transaction: it is an
      // advance, and an advance is never undone anyway. Whoever loses the race gets a
      // duplicate key; either way the row is then read again, locked.
      await query(connection, 'ROLLBACK');
      try {
        // Check-only places mark 1: it admits every token, as no mark does (the core's fence-mode.ts).
        const { affectedRows } = await headerOf(connection, INSERT_FIRST_MARK, [resource, checking ? '1' : token, resource, ...presented]);
        inserted ||= affectedRows === 1;
      } catch (error) {
        if (errnoOf(error) !== ER_DUP_ENTRY) throw error;
      }
      continue;
    }
    if (current > fencing.token) throw new StaleTokenError(resource, fencing.token, current);
    if (checking) return inserted ? null : current;
    if (current < fencing.token) await headerOf(connection, ADVANCE_FENCE, [token, resource]);
    return inserted && current === fencing.token ? null : current;
  }
}

/**
 * START TRANSACTION, the advance and the savepoint on `connection`. A
 * deadlock while opening (nothing of the caller's has run) starts over; any
 * other failure, a refusal included, is rolled back and thrown (after any
 * failure but a refusal the caller destroys the connection rather than
 * trust its state).
 */
export async function openFenced(connection: MySqlPoolConnection, resource: string, fencing: ResolvedFencing): Promise<FencingToken | null> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const previous = await advance(connection, resource, fencing);
      await query(connection, SAVEPOINT);
      return previous;
    } catch (error) {
      // A connection that cannot roll back is given up by the caller (it destroys it on any non-refusal).
      await rollback(connection).catch(() => undefined);
      if (errnoOf(error) === ER_LOCK_DEADLOCK && attempt < OPEN_ATTEMPTS) continue;
      throw error;
    }
  }
}

/** ROLLBACK; a connection that cannot even do that is destroyed by the caller (rollback throws then). */
export async function rollback(connection: MySqlQueryable): Promise<void> {
  await query(connection, 'ROLLBACK');
}

/** How closing went: committed, or not (then the advance still has to be made good). */
export type Closed = { readonly committed: true } | { readonly committed: false; readonly error: unknown; readonly ended: boolean };

/**
 * Commit the work with the advance. RELEASE SAVEPOINT first: it fails (1305)
 * when the transaction already ended under the work, whose later statements
 * then ran outside it (autocommitted, unfenced): that is reported, not
 * committed over.
 */
export async function closeFenced(connection: MySqlQueryable): Promise<Closed> {
  try {
    await query(connection, 'RELEASE SAVEPOINT fencekeeper_fenced');
  } catch (error) {
    if (errnoOf(error) !== ER_SP_DOES_NOT_EXIST) return { committed: false, error, ended: false };
    return { committed: false, error: new Error('the fenced transaction ended inside the work (a deadlock or a lock wait timeout rolled it back, or the work sent COMMIT or ROLLBACK)', { cause: error }), ended: true };
  }
  try {
    await query(connection, 'COMMIT');
    return { committed: true };
  } catch (error) {
    return { committed: false, error, ended: false };
  }
}

/**
 * Undo the work and commit the advance alone: ROLLBACK TO SAVEPOINT, COMMIT.
 * Answers false when the transaction (and the advance with it) was already
 * gone, or the commit failed: the caller then applies the advance again.
 */
export async function abandonWork(connection: MySqlQueryable): Promise<boolean> {
  try {
    await query(connection, 'ROLLBACK TO SAVEPOINT fencekeeper_fenced');
    await query(connection, 'COMMIT');
    return true;
  } catch {
    await rollback(connection).catch(() => undefined);
    return false;
  }
}

/**
 * Apply the advance again in a transaction of its own, after the transaction
 * that carried it was rolled back. A mark already at or past the token (a
 * newer holder got there first) is fine: the mark never goes back. Answers
 * whether the mark now stands at least at the token.
 */
export async function keepAdvance(db: MySqlPool | MySqlPoolConnection, resource: string, fencing: ResolvedFencing): Promise<boolean> {
  // Check-only moved no mark: nothing to apply again, the mark stands as it was.
  if (checksOnly(fencing)) return true;
  const connection = isPool(db) ? await db.getConnection().catch(() => undefined) : db;
  if (connection === undefined) return false;
  let broken = false;
  try {
    await advance(connection, resource, fencing);
    await query(connection, 'COMMIT');
    return true;
  } catch (error) {
    await rollback(connection).catch(() => { broken = true; });
    return error instanceof StaleTokenError;
  } finally {
    if (isPool(db)) {
      if (broken) connection.destroy();
      else connection.release();
    }
  }
}

/** The mark of `resource`, or null (a plain read: on a pool each statement reads the latest commit). */
export async function currentFence(db: MySqlQueryable, resource: string): Promise<FencingToken | null> {
  const [row] = await rowsOf(db, 'SELECT CAST(token AS CHAR) AS token FROM fencekeeper_fences WHERE resource = ?', [resource]);
  return readToken(row?.['token']);
}
