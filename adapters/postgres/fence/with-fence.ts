import { InvalidArgumentError, SequencerMismatchError, StaleTokenError, WorkNotCommittedError, resolveFencing, type FenceMode, type Fencing, type ResolvedFencing } from '../../../src/index.js';
import { fenceAdvances, publishRefused, traceWithFence } from '../../../src/extend.js';
import { checksOnly, type FenceRequest } from './check.js';
import { guardClient, isKysely, type Database, type KyselyDatabase, type KyselyExecutor, type PgPool, type PgPoolClient, type PoolClientOf } from '../database.js';
import { StaleRefusal, openFenced, openFencedKysely, openFencedKyselyConnection } from './open.js';
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
 * This costs the round trips of a plain transaction: BEGIN, the advance and
 * a savepoint go as one message, and one message closes it (on a Kysely
 * instance too: withFence then holds one connection, `db.connection()`,
 * rather than sending Kysely's own BEGIN and COMMIT, two round trips more).
 *
 * `work` receives the transaction: a pg client inside BEGIN for a pg.Pool, or
 * for a Kysely instance that connection's Kysely instance (the query API of a
 * Transaction), which refuses queries once withFence has returned; in the
 * check-only mode, a Kysely Transaction. Write through it, not through
 * the pool: a write on another connection is outside the fence. Do not end
 * the transaction yourself (COMMIT, ROLLBACK).
 *
 * `token` is a bare token, a Sequencer (the token bound to its lock), the
 * Lock or Leadership itself (its sequencer is used; one whose `held` is
 * false is refused with LockLostError before any SQL), or CURRENT_LOCK: the lock of the enclosing withLock (NoCurrentLockError,
 * before any SQL, outside every withLock).
 *
 * `options.advance: false` is the check-only mode (a reader of a read-write
 * lock): admitted on the same condition (the token at least the mark, the
 * sequencer of a bound fence's lock), but the mark stays where it is (a
 * fence without one gets 1, which admits every token as none does). The
 * transaction holds the fence row FOR SHARE instead: check-only transactions
 * run side by side, and an advancing one waits until they have ended.
 */
export function withFence<P extends PgPool, T>(db: P, resource: string, token: Fencing, work: (client: PoolClientOf<P>) => Promise<T>, options?: FenceMode): Promise<T>;
export function withFence<Trx extends KyselyExecutor, T>(db: KyselyDatabase<Trx>, resource: string, token: Fencing, work: (trx: Trx) => Promise<T>, options?: FenceMode): Promise<T>;
/** For code generic over both flavors: `work` gets whichever the database hands out. */
export function withFence<T>(db: Database, resource: string, token: Fencing, work: (trx: PgPoolClient | KyselyExecutor) => Promise<T>, options?: FenceMode): Promise<T>;
export async function withFence<T>(db: Database, resource: string, fencing: Fencing, work: (trx: never) => Promise<T>, options?: FenceMode): Promise<T> {
  checkResource(resource);
  const resolved = resolveFencing(fencing);
  if (typeof work !== 'function') throw new InvalidArgumentError('work must be a function');
  if (options !== undefined && (typeof options !== 'object' || options === null)) throw new InvalidArgumentError('withFence: options must be an object');
  const request: FenceRequest = { ...resolved, advance: fenceAdvances(options, 'withFence') };
  const run = work as (trx: unknown) => Promise<T>;
  return traceWithFence('postgres', resource, resolved.token, () => fenced(db, resource, request, run));
}

async function fenced<T>(db: Database, resource: string, fencing: ResolvedFencing, run: (trx: unknown) => Promise<T>): Promise<T> {
  const token = fencing.token;
  // Check-only: there is no advance to keep or apply again when the work fails; the mark stays as it was.
  const checking = checksOnly(fencing);
  const ended = isKysely(db)
    ? await fenceKysely(db as KyselyDatabase, resource, fencing, run)
    : await fencePg(db as PgPool, resource, fencing, run);
  if (ended.threw) {
    if (!checking) await keepAfterFailure(db, ORIGIN, resource, token, ended.advanceKept, ended.error);
    throw ended.error;
  }
  if (!ended.ending.committed) {
    if (checking) throw new WorkNotCommittedError(resource, token, { cause: ended.ending.cause });
    throw await failedClose(db, ORIGIN, resource, token, ended.ending);
  }
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

/**
 * Kysely's own transaction API sends BEGIN and COMMIT as messages of their
 * own, two round trips beyond a plain Kysely transaction (counted through a
 * proxy: five against three). So where the instance offers `connection()`
 * (Kysely 0.27 and 0.28 do), withFence holds one connection and writes the
 * transaction itself, as on a pg.Pool: `BEGIN; <advance>; SAVEPOINT` in one
 * message, the work, the close in one message. The work gets the
 * connection's Kysely instance behind a plugin that refuses every query once
 * the fenced transaction has ended (Kysely's Transaction refuses them too):
 * the connection is back in the pool by then, another caller's. The
 * check-only mode keeps Kysely's transaction (its check is a statement of
 * its own, ./check.ts).
 */
interface KyselyConnections {
  connection(): { execute<T>(callback: (db: KyselyOnConnection) => Promise<T>): Promise<T> };
}

/** Kysely<DB> bound to one connection: the part used here. */
interface KyselyOnConnection extends KyselyExecutor {
  withPlugin(plugin: {
    transformQuery(args: { readonly node: unknown }): unknown;
    transformResult(args: { readonly result: unknown }): Promise<unknown>;
  }): unknown;
}

function hasConnections(db: KyselyDatabase): db is KyselyDatabase & KyselyConnections {
  return typeof (db as Partial<KyselyConnections>).connection === 'function';
}

async function fenceKysely<T>(db: KyselyDatabase, resource: string, token: ResolvedFencing, work: (trx: unknown) => Promise<T>): Promise<WorkEnded<T>> {
  if (!checksOnly(token) && hasConnections(db)) return fenceKyselyConnection(db, resource, token, work);
  return fenceKyselyTransaction(db, resource, token, work);
}

async function fenceKyselyConnection<T>(db: KyselyDatabase & KyselyConnections, resource: string, token: ResolvedFencing, work: (trx: unknown) => Promise<T>): Promise<WorkEnded<T>> {
  let refused: StaleRefusal | undefined;
  const ended = await db.connection().execute(async (connection): Promise<WorkEnded<T> | undefined> => {
    const send = sender(connection);
    try {
      await openFencedKyselyConnection(connection, resource, token);
    } catch (error) {
      // Refused or failed: the transaction is aborted (or the connection gone); leave it clean for the pool.
      await send('ROLLBACK').catch(() => undefined);
      if (error instanceof StaleRefusal) {
        refused = error;
        return undefined;
      }
      throw error;
    }
    let open = true;
    const guarded = connection.withPlugin({
      transformQuery: (args) => {
        if (!open) throw new Error('fencekeeper: withFence\'s transaction has ended; this Kysely instance takes no more queries');
        return args.node;
      },
      transformResult: async (args) => args.result,
    });
    try {
      const result = await runWork(send, guarded, work);
      // Left open (the work threw and the advance could not be kept alone): roll back before the pool gets it.
      if (!transactionEnded(result)) await send('ROLLBACK').catch(() => undefined);
      return result;
    } finally {
      open = false;
    }
  });
  if (refused !== undefined) {
    const stale = await refused.error(db);
    published(stale, token);
    throw stale;
  }
  if (ended === undefined) throw new Error('unreachable: the Kysely connection returned without running the work');
  return ended;
}

async function fenceKyselyTransaction<T>(db: KyselyDatabase, resource: string, token: ResolvedFencing, work: (trx: unknown) => Promise<T>): Promise<WorkEnded<T>> {
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

