// PostgresFenceStore: the core's FenceStore on fencekeeper_fences, for the
// Express middleware (or anything else that admits requests by token).
import { CommitFailedError, InvalidArgumentError, resolveFencing, type FenceAdmission, type FenceMode, type FenceStore, type Fencing, type FencingToken, type ResolvedFencing } from '../../../src/index.js';
import { fenceAdvances } from '../../../src/extend.js';
import { checksOnly, type FenceRequest } from './check.js';
import { CancelledWait, advanceCancellably, cancelStatement, connectCancellably, whileCancellable } from './cancel.js';
import { openFenced, sendOn, type Opened } from './open.js';
import { guardClient, isKysely, run, type Database, type KyselyDatabase, type PgPool, type TransactionOf } from '../database.js';
import { isRefusalError } from './advance.js';
import { currentFence, refusal } from './row.js';
import { OPEN_SAVEPOINT, ROLL_BACK, abandon, closeFenced, failedClose, keepAfterFailure, rollback, sender, type Ending } from './transaction.js';
import { checkResource } from '../identifiers.js';
import { WaitLine } from './wait-line.js';

/**
 * A FenceStore whose admissions are PostgreSQL transactions.
 *
 * `admit()` takes a dedicated connection (a pooled client, or a Kysely
 * transaction), BEGINs, and advances the resource's fence row (on a pg.Pool,
 * BEGIN, the advance and the savepoint travel as one message). The row lock is
 * held until the admission is settled, so admissions for one resource
 * serialize across every process sharing the database. Right after the
 * advance the store sets a savepoint. The advance is never undone:
 * - `commit()` commits the handler's writes (made through
 *   `admission.transaction`) with the advance, in one message that fails
 *   before COMMIT when the transaction was aborted under the handler (a
 *   statement failed and the handler went on) or a deferred constraint
 *   broke. Then the handler's writes are rolled back to the savepoint, the
 *   advance is committed alone, the failure is reported on the diagnostics
 *   channel `fencekeeper:postgres:commit-failed` and NODE_DEBUG=fencekeeper,
 *   and commit() rejects with WorkNotCommittedError. If COMMIT itself fails,
 *   the advance is applied again on its own and commit() rejects with
 *   CommitFailedError.
 * - `abort()` is for a handler that failed or was given up on, and may still
 *   be running: it cancels the statement the handler has in flight (from
 *   another connection), rolls back to the savepoint and commits the advance,
 *   and leaves the connection refusing statements in the same message. A
 *   pg client is then destroyed instead of returned to the pool, so the
 *   handler's late queries fail instead of landing in another request's
 *   transaction; a Kysely transaction is rolled back (Kysely 0.28 then
 *   refuses further queries on it).
 * A stale token rolls back, frees the connection and rejects with
 * StaleTokenError.
 *
 * Admissions of one store for one resource line up in the process first
 * (wait-line.ts): one at a time is sent to wait on the row lock, so a hot
 * resource takes two pooled connections (the holder and the next), not one
 * per waiting request, and PostgreSQL does not wake every waiter at each
 * commit. Aborting a wait in that line just leaves it.
 *
 * Aborting while waiting for the row lock: the wait is a statement blocked on
 * a row lock, so the store cancels it from a second connection with
 * `pg_cancel_backend(pid)` (taken from the pool: with every connection busy the
 * cancel waits for one), waits for the statement to end, and then, for a
 * pg.Pool, destroys the client rather than returning it (a cancel arriving
 * late can then hit nothing of anyone else's); a Kysely transaction is rolled
 * back. The admission rejects with the signal's reason and leaves nothing held.
 * Chosen over `lock_timeout` polling, which would lose the lock queue's order
 * and add latency to every contended admission.
 *
 * Every admission must be settled (`commit()` or `abort()`): an abandoned one
 * keeps its connection and its row lock.
 */
export class PostgresFenceStore<Db extends Database = PgPool, Tx = TransactionOf<Db>> implements FenceStore<Tx> {
  readonly #db: PgPool | KyselyDatabase;
  readonly #line = new WaitLine();

  constructor(db: Db) {
    if (!isKysely(db) && (typeof db !== 'object' || db === null || typeof (db as { connect?: unknown }).connect !== 'function')) {
      throw new InvalidArgumentError('PostgresFenceStore needs a pg.Pool or a Kysely instance');
    }
    this.#db = db as PgPool | KyselyDatabase;
  }

  async current(resource: string): Promise<FencingToken | null> {
    checkResource(resource);
    return currentFence(this.#db, resource);
  }

  /**
   * As FenceStore.admit. `advance: false` is the check-only mode (a reader
   * of a read-write lock): admitted on the same condition, the mark left
   * where it is (none yet: 1, which admits every token as none does); the
   * admission holds the fence row FOR SHARE, so an advancing admission waits
   * until it is settled. Admissions of one store still enter one at a time
   * per resource (its wait line), so its check-only admissions wait for each
   * other rather than refuse each other.
   */
  async admit(resource: string, presented: Fencing, options: { signal?: AbortSignal } & FenceMode = {}): Promise<FenceAdmission<Tx>> {
    checkResource(resource);
    const token: FenceRequest = { ...resolveFencing(presented), advance: fenceAdvances(options, 'PostgresFenceStore.admit') };
    const signal = options.signal;
    signal?.throwIfAborted();
    // One admission per resource on its way to the row lock; the others wait in line here (see wait-line.ts).
    const leave = await this.#line.enter(resource, signal);
    try {
      return await (isKysely(this.#db)
        ? this.#admitKysely(this.#db as KyselyDatabase, resource, token, signal)
        : this.#admitPg(this.#db as PgPool, resource, token, signal));
    } finally {
      leave();
    }
  }

  async #admitPg(pool: PgPool, resource: string, fencing: ResolvedFencing, signal: AbortSignal | undefined): Promise<FenceAdmission<Tx>> {
    const token = fencing.token;
    const client = await connectCancellably(pool, signal);
    const release = guardClient(client);
    let opened: Opened;
    try {
      if (signal?.aborted) throw signal.reason;
      // BEGIN, the advance and the savepoint in one message; cancellable while it waits for the row lock.
      const send = sendOn(client);
      opened = await openFenced(client, resource, fencing, signal === undefined ? send : (text) => whileCancellable(pool, client, signal, () => send(text)));
    } catch (error) {
      if (error instanceof CancelledWait) {
        release(new Error('fence wait aborted'));
        throw error.reason;
      }
      release(await rollback(client));
      throw error;
    }
    if (!opened.ok) {
      release(opened.broken);
      throw opened.error;
    }
    const { previous, pid } = opened.advanced;
    const send = sender(client);
    const settle = once(async (how: Settlement): Promise<void> => {
      if (how === 'commit') {
        const ending = await closeFenced(send);
        release(ending.committed || ending.advanceKept ? undefined : await rollback(client));
        if (!ending.committed) throw await failedClose(pool, ORIGIN, resource, token, nothingToRestore(fencing, ending));
        return;
      }
      const advanceKept = await abandonInFlight(pool, pid, () => abandon(send));
      // The handler may still hold this client and send more: never hand it to anyone else.
      release(new Error('fenced admission aborted'));
      await keepAfterAbort(pool, resource, token, advanceKept || checksOnly(fencing));
    });
    return admission(resource, token, previous, client as unknown as Tx, () => settle('commit'), () => settle('abort'));
  }

  #admitKysely(db: KyselyDatabase, resource: string, fencing: ResolvedFencing, signal: AbortSignal | undefined): Promise<FenceAdmission<Tx>> {
    const token = fencing.token;
    return new Promise<FenceAdmission<Tx>>((resolve, reject) => {
      let decide: (how: Settlement) => void = () => undefined;
      const decision = new Promise<Settlement>((r) => { decide = r; });
      // What our closing message came to; set once the admission was made.
      let ended = undefined as Ending | { readonly aborted: true; readonly advanceKept: boolean } | undefined;
      const done = db.transaction().execute(async (trx) => {
        if (signal?.aborted) throw signal.reason;
        const { previous, pid } = await advanceCancellably(db, trx, resource, fencing, signal);
        await run(trx, { text: OPEN_SAVEPOINT, values: [], prepared: false });
        const settle = once(async (how: Settlement): Promise<void> => {
          decide(how);
          // Kysely's own COMMIT or ROLLBACK after our message has nothing left to do: its failure changes nothing.
          await done.catch(() => undefined);
          if (ended === undefined) return;
          if ('aborted' in ended) return keepAfterAbort(db, resource, token, ended.advanceKept || checksOnly(fencing));
          if (!ended.committed) throw await failedClose(db, ORIGIN, resource, token, nothingToRestore(fencing, ended));
        });
        resolve(admission(resource, token, previous, trx as unknown as Tx, () => settle('commit'), () => settle('abort')));
        const send = sender(trx);
        if ((await decision) === 'commit') {
          ended = await closeFenced(send);
          // Committed, or the advance alone: Kysely's COMMIT then finds no transaction and does nothing.
          if (ended.committed || ended.advanceKept) return;
        } else {
          ended = { aborted: true, advanceKept: await abandonInFlight(db, pid, () => abandon(send)) };
        }
        // Have Kysely roll back what is left (ABANDON leaves a failed transaction).
        throw ROLL_BACK;
      });
      done.catch((error: unknown) => {
        if (ended !== undefined) return;
        // A mismatched binding aborted the transaction: which binding refused us is read now that it is rolled back.
        if (isRefusalError(error)) refusal(db, resource, fencing).then(reject, reject);
        else reject(error instanceof CancelledWait ? error.reason : error);
      });
    });
  }
}

type Settlement = 'commit' | 'abort';

/** A check-only admission moved no mark: a failed close has no advance to apply again (reported as kept: the mark stands as it was). */
function nothingToRestore<E extends { readonly advanceKept: boolean }>(fencing: ResolvedFencing, ending: E): E {
  return checksOnly(fencing) ? { ...ending, advanceKept: true } : ending;
}

const ORIGIN = 'PostgresFenceStore';


/**
 * Abandon an admission whose handler may still have a statement in flight:
 * the statement is cancelled from another connection (without waiting for
 * one: see advanceCancellably) while ABANDON queues behind it on the
 * admission's connection.
 */
async function abandonInFlight(db: Database, pid: number, abandoning: () => Promise<boolean>): Promise<boolean> {
  let finished = false;
  cancelStatement(db, pid, () => !finished);
  try {
    return await abandoning();
  } finally {
    finished = true;
  }
}

/** abort() resolves once the handler's writes are undone and the advance stands. */
async function keepAfterAbort(db: Database, resource: string, token: FencingToken, advanceKept: boolean): Promise<void> {
  const cause = new Error('the aborted admission\'s fence advance went with its transaction');
  if (!(await keepAfterFailure(db, ORIGIN, resource, token, advanceKept, cause))) throw new CommitFailedError(resource, token, false, { cause });
}

/** The first call runs `settle`; every later call gets the same promise. */
function once(settle: (how: Settlement) => Promise<void>): (how: Settlement) => Promise<void> {
  let settled: Promise<void> | undefined;
  return (how) => (settled ??= settle(how));
}

function admission<Tx>(resource: string, token: FencingToken, previous: FencingToken | null, transaction: Tx, commit: () => Promise<void>, abort: () => Promise<void>): FenceAdmission<Tx> {
  return Object.freeze({ resource, token, previous, transaction, commit, abort });
}
