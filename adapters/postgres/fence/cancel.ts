// Giving up on a wait: a pooled connection that has not come yet, the fence
// row's lock, or a statement a store admission's work still has in flight.
// A statement is cancelled on the server with pg_cancel_backend(pid) from a
// second connection; pg.Pool and Kysely both hand out only pooled ones.
import type { FencingToken, ResolvedFencing } from '../../../src/index.js';
import { guardClient, isKysely, run, type Database, type KyselyDatabase, type PgPool, type PgPoolClient, type Queryable, type Statement } from '../database.js';
import { advanceInTransaction } from './advance.js';
import type { Advanced } from './row.js';
import { ABANDON } from './transaction.js';

const ABORTED: unique symbol = Symbol('aborted');

/** `pending`'s value, or ABORTED if `signal` aborts first. The listener is removed either way. */
async function unlessAborted<T>(pending: Promise<T>, signal: AbortSignal): Promise<T | typeof ABORTED> {
  if (signal.aborted) return ABORTED;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<typeof ABORTED>((resolve) => {
    onAbort = () => resolve(ABORTED);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([pending, aborted]);
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}

/** pool.connect(), giving up (and returning the client when it comes) if `signal` aborts first. */
export async function connectCancellably(pool: PgPool, signal: AbortSignal | undefined): Promise<PgPoolClient> {
  const connecting = pool.connect();
  if (signal === undefined) return connecting;
  const first = await unlessAborted(connecting, signal);
  if (first !== ABORTED) return first;
  connecting.then((client) => client.release(), () => undefined);
  throw signal.reason;
}

/** The fence wait was aborted and its statement has ended; the caller throws the transaction away. */
export class CancelledWait {
  constructor(readonly reason: unknown) {}
}

/**
 * Advance the fence; if `signal` aborts while the statement waits for the row
 * lock, cancel it on the server and reject with CancelledWait once it has
 * ended (whatever it answered: the caller then throws the work away).
 *
 * The cancel needs a connection of its own from the pool, and the pool may
 * have none to give: every connection can be taken by admissions waiting on
 * the same row. So the wait for the statement to end does not wait for the
 * cancel. Once the statement has ended (it got the row lock after all) the
 * caller rolls back at once, which frees the row and a connection; a cancel
 * still queued for a connection then finds `needed()` false and sends
 * nothing. Waiting for the cancel first would deadlock: our transaction
 * holds the row, the other admissions wait on it with the pool's last
 * connections, and the cancel waits for one of those.
 */
export function advanceCancellably(db: Database, tx: Queryable, resource: string, fencing: ResolvedFencing, signal: AbortSignal | undefined): Promise<Advanced> {
  return whileCancellable(db, tx, signal, () => advanceInTransaction(tx, resource, fencing));
}

/**
 * Run what `start` sends on `tx` (a statement that may wait for the fence
 * row's lock); if `signal` aborts first, cancel it on the server and reject
 * with CancelledWait once it has ended, as advanceCancellably does.
 */
export async function whileCancellable<T>(db: Database, tx: Queryable, signal: AbortSignal | undefined, start: () => Promise<T>): Promise<T> {
  if (signal === undefined) return start();
  // Every admission on a pg.Pool comes through here: a listener, not a
  // Promise.race, and no await for a pid the client already knows, so an
  // uncontended admission pays for no more than one listener.
  const pid = knownPid(tx) ?? await queryPid(tx);
  signal.throwIfAborted();
  // Once aborted, the wait still lasts until the statement has ended (see advanceCancellably).
  let ended = false;
  let aborted = false;
  const onAbort = (): void => {
    aborted = true;
    cancelStatement(db, pid, () => !ended);
  };
  signal.addEventListener('abort', onAbort, { once: true });
  let value: T;
  try {
    value = await start();
  } catch (error) {
    if (!aborted) throw error;
  } finally {
    ended = true;
    signal.removeEventListener('abort', onAbort);
  }
  if (aborted) throw new CancelledWait(signal.reason);
  return value!;
}

function knownPid(tx: Queryable): number | undefined {
  const known = (tx as { processID?: unknown }).processID;
  return typeof known === 'number' && known > 0 ? known : undefined;
}

async function queryPid(tx: Queryable): Promise<number> {
  const { rows } = await run(tx, { text: 'SELECT pg_backend_pid() AS pid', values: [], prepared: false });
  return Number(rows[0]?.['pid']);
}

// Cancel what `pid` runs, unless it is idle (a cancel reaching an idle
// backend is dropped, but one arriving late would hit its next statement) or
// already running ABANDON, the statement that settles an abandoned admission.
// With track_activities off every state reads as disabled: the cancel is then
// sent anyway, and a cancelled ABANDON is handled by its caller.
const CANCEL: Statement = Object.freeze({
  text: `SELECT pg_cancel_backend($1::int) WHERE NOT EXISTS (
  SELECT 1 FROM pg_stat_activity a
   WHERE a.pid = $1::int AND (a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)') OR a.query = $2))`,
  values: [],
  prepared: false,
});

/**
 * Cancel the statement `pid` has in flight, from a connection of the pool (or
 * of the Kysely instance), unless `needed()` has turned false by the time one
 * is free. Never waited for by the holder of `pid` (see advanceCancellably);
 * its failure is of no consequence, so it is swallowed.
 */
export function cancelStatement(db: Database, pid: number, needed: () => boolean): void {
  const cancelling = isKysely(db) ? cancelKysely(db as KyselyDatabase, pid, needed) : cancelPg(db as PgPool, pid, needed);
  cancelling.catch(() => undefined);
}

async function cancelPg(pool: PgPool, pid: number, needed: () => boolean): Promise<void> {
  const client = await pool.connect();
  const release = guardClient(client);
  let broken: Error | undefined;
  try {
    if (needed()) await run(client, { ...CANCEL, values: [pid, ABANDON] });
  } catch (error) {
    broken = error instanceof Error ? error : new Error(String(error));
    throw error;
  } finally {
    release(broken);
  }
}

/** The same on a Kysely instance: a transaction is the structural way to hold one of its connections. */
async function cancelKysely(db: KyselyDatabase, pid: number, needed: () => boolean): Promise<void> {
  await db.transaction().execute(async (trx) => {
    if (needed()) await run(trx, { ...CANCEL, values: [pid, ABANDON] });
  });
}
