import { InvalidArgumentError, SequencerMismatchError, StaleTokenError, resolveFencing, type Fencing, type ResolvedFencing } from '../../../src/index.js';
import { publishRefused, traceWithFence } from '../../../src/extend.js';
import { guardClient, isKysely, type Database, type KyselyDatabase, type KyselyExecutor, type PgPool, type PgPoolClient, type PoolClientOf } from '../database.js';
import { StaleRefusal, openFenced, openFencedKysely } from './open.js';
import { ROLL_BACK, closeFenced, failedClose, keepAdvanceOnly, keepAfterFailure, rollback, sender, type Ending, type Send } from './transaction.js';
import { checkResource } from '../identifiers.js';

/**
 * Run `work` in one transaction that first advances the fence of `resource` to
 * `token` and holds that row's lock until commit:
 * - a token equal to the mark passes (the same holder writes many times),
 *   a larger one advances it, a smaller one throws StaleTokenError (carrying
 *   the current mark) before `work` runs;
 * - concurrent calls for one resource are serialized by the row lock, so a
 *   stale holder's writes in `work` can never commit after a newer holder's:
 *   either it advanced first (and the newer one waits for it), or it finds the
 *   larger mark and is refused;
 * - the advance is never undone once `work` has run: if `work` throws, its
 *   writes roll back (to a savepoint set right after the advance), the
 *   advance commits alone, and the error is rethrown. If `work` returns but
 *   its writes did not commit (a statement failed and `work` caught the
 *   error, so PostgreSQL would answer COMMIT with ROLLBACK; or a deferred
 *   constraint broke), the advance commits alone and withFence rejects with
 *   WorkNotCommittedError. If COMMIT itself fails (a serialization failure,
 *   the connection lost), the advance is applied again on its own and
 *   withFence rejects with CommitFailedError.
 *
 * On a pg.Pool this costs the round trips of a plain transaction: BEGIN, the
 * advance and a savepoint go as one message, and one message closes it.
 *
 * `work` receives the transaction: a pg client inside BEGIN for a pg.Pool, or
 * the Kysely Transaction for a Kysely instance. Write through it, not through
 * the pool: a write on another connection is outside the fence. Do not end
 * the transaction yourself (COMMIT, ROLLBACK).
 *
 * `token` is a bare token, a Sequencer (the token bound to its lock), the
 * Lock or Leadership itself (its sequencer is used; one whose `held` is
 * false is refused with LockLostError before any SQL), or CURRENT_LOCK: the lock of the enclosing withLock (NoCurrentLockError,
 * before any SQL, outside every withLock).
 */
export function withFence<P extends PgPool, T>(db: P, resource: string, token: Fencing, work: (client: PoolClientOf<P>) => Promise<T>): Promise<T>;
export function withFence<Trx extends KyselyExecutor, T>(db: KyselyDatabase<Trx>, resource: string, token: Fencing, work: (trx: Trx) => Promise<T>): Promise<T>;
/** For code generic over both flavors: `work` gets whichever the database hands out. */
export function withFence<T>(db: Database, resource: string, token: Fencing, work: (trx: PgPoolClient | KyselyExecutor) => Promise<T>): Promise<T>;
export async function withFence<T>(db: Database, resource: string, fencing: Fencing, work: (trx: never) => Promise<T>): Promise<T> {
  checkResource(resource);
  const resolved = resolveFencing(fencing);
  if (typeof work !== 'function') throw new InvalidArgumentError('work must be a function');
  const run = work as (trx: unknown) => Promise<T>;
  return traceWithFence('postgres', resource, resolved.token, () => fenced(db, resource, resolved, run));
}

async function fenced<T>(db: Database, resource: string, fencing: ResolvedFencing, run: (trx: unknown) => Promise<T>): Promise<T> {
  const token = fencing.token;
  const ended = isKysely(db)
    ? await fenceKysely(db as KyselyDatabase, resource, fencing, run)
    : await fencePg(db as PgPool, resource, fencing, run);
  if (ended.threw) {
    await keepAfterFailure(db, ORIGIN, resource, token, ended.advanceKept, ended.error);
    throw ended.error;
  }
  if (!ended.ending.committed) throw await failedClose(db, ORIGIN, resource, token, ended.ending);
  return ended.value;
}

const ORIGIN = 'withFence';

/** How the work and the close went; the advance is made good afterwards, on a fresh connection. */
type WorkEnded<T> =
  | { readonly threw: true; readonly error: unknown; readonly advanceKept: boolean }
  | { readonly threw: false; readonly value: T; readonly ending: Ending };

async function runWork<T>(send: Send, trx: unknown, work: (trx: unknown) => Promise<T>): Promise<WorkEnded<T>> {
  let value: T;
  try {
    value = await work(trx);
  } catch (error) {
    return { threw: true, error, advanceKept: await keepAdvanceOnly(send) };
  }
  return { threw: false, value, ending: await closeFenced(send) };
}

/** A refusal on fencekeeper:fence:refused: a stale token, or a sequencer (or bare token) a bound fence does not take. */
function published(error: unknown, fencing: ResolvedFencing): void {
  if (error instanceof StaleTokenError) publishRefused('postgres', error);
  else if (error instanceof SequencerMismatchError) publishRefused('postgres', error, fencing.token);
}

/** Did our last message end the transaction (committed, or the advance alone)? Otherwise it must still be rolled back. */
function transactionEnded(ended: WorkEnded<unknown>): boolean {
  return ended.threw ? ended.advanceKept : ended.ending.committed || ended.ending.advanceKept;
}

async function fencePg<T>(pool: PgPool, resource: string, token: ResolvedFencing, work: (trx: unknown) => Promise<T>): Promise<WorkEnded<T>> {
  const client = await pool.connect();
  const release = guardClient(client);
  let broken: Error | undefined;
  try {
    // BEGIN, the advance and the savepoint in one message (a stale token: rolled back already).
    const opened = await openFenced(client, resource, token);
    if (!opened.ok) {
      broken = opened.broken;
      // Counted here, not in openFenced: PostgresFenceStore opens the same way, and fencing() counts its refusals.
      published(opened.error, token);
      throw opened.error;
    }
    const ended = await runWork(sender(client), client, work);
    if (!transactionEnded(ended)) broken = await rollback(client);
    return ended;
  } finally {
    release(broken);
  }
}

async function fenceKysely<T>(db: KyselyDatabase, resource: string, token: ResolvedFencing, work: (trx: unknown) => Promise<T>): Promise<WorkEnded<T>> {
  let ended = undefined as WorkEnded<T> | undefined;
  try {
    await db.transaction().execute(async (trx) => {
      // The advance and the savepoint in one message (Kysely sent BEGIN on its own).
      await openFencedKysely(trx, resource, token);
      ended = await runWork(sender(trx), trx, work);
      // Left open: have Kysely roll it back. Ended: Kysely's COMMIT finds no transaction and does nothing.
      if (!transactionEnded(ended)) throw ROLL_BACK;
    });
  } catch (error) {
    // Before the work ran (a stale token, a lost connection): nothing to keep.
    if (error instanceof StaleRefusal) {
      const stale = await error.error(db);
      published(stale, token);
      throw stale;
    }
    if (ended === undefined) throw error;
    // Otherwise this is Kysely's own COMMIT or ROLLBACK after our message: the outcome stands.
  }
  if (ended === undefined) throw new Error('unreachable: the Kysely transaction returned without running the work');
  return ended;
}

