// MySqlFenceStore: the core's FenceStore on fencekeeper_fences, for the
// Express middleware (fencing() in fencekeeper/express) or anything else
// that admits requests by token.
import { CommitFailedError, SequencerMismatchError, StaleTokenError, WorkNotCommittedError, resolveFencing, type FenceAdmission, type FenceMode, type FenceStore, type Fencing, type FencingToken, type ResolvedFencing } from '../../src/index.js';
import { fenceAdvances } from '../../src/extend.js';
import { assertPromisePool, type MySqlPool, type MySqlPoolConnection } from './database.js';
import { abandonWork, closeFenced, currentFence, keepAdvance, openFenced, rollback, type FenceRequest } from './fence.js';
import { checkResource } from './identifiers.js';

/**
 * A FenceStore whose admissions are MySQL/MariaDB transactions.
 *
 * `admit()` takes a connection of its own from the pool, starts a
 * transaction and advances the resource's fence row with a locking read
 * (SELECT ... FOR UPDATE): the row's lock is held until the admission is
 * settled, so admissions for one resource serialize across every process
 * sharing the database. The handler writes through `admission.transaction`
 * (that PoolConnection: `req.fencing.transaction` behind fencing()), so its
 * writes commit only with the admission. The advance is never undone:
 * - `commit()` commits the handler's writes with the advance. If the
 *   transaction had ended under the handler (a deadlock or a lock wait
 *   timeout rolled it back whole), the advance is applied again on its own
 *   and commit() rejects with WorkNotCommittedError; a failed COMMIT, with
 *   CommitFailedError.
 * - `abort()` rolls the handler's writes back to the savepoint set right
 *   after the advance, commits the advance alone, and destroys the
 *   connection instead of returning it to the pool: a handler still running
 *   gets errors for its late statements, which never land in another
 *   request's transaction. A statement the handler has in flight is waited
 *   for (mysql2 runs a connection's commands in order).
 * A stale token rolls back, frees the connection and rejects with
 * StaleTokenError (a bound fence and another lock's sequencer:
 * SequencerMismatchError).
 *
 * Aborting the `signal` while the admission waits for the row lock kills
 * that statement (KILL QUERY, sent on another connection of the pool), and
 * the connection is destroyed; the admission rejects with the signal's
 * reason and leaves nothing held.
 *
 * Every admission must be settled (`commit()` or `abort()`): an abandoned
 * one keeps its connection and its row lock (until innodb_lock_wait_timeout
 * fails the next admission's wait).
 */
export class MySqlFenceStore implements FenceStore<MySqlPoolConnection> {
  readonly #pool: MySqlPool;

  constructor(pool: MySqlPool) {
    assertPromisePool(pool, 'MySqlFenceStore');
    this.#pool = pool;
  }

  async current(resource: string): Promise<FencingToken | null> {
    checkResource(resource);
    return currentFence(this.#pool, resource);
  }

  /**
   * As FenceStore.admit. `advance: false` is the check-only mode (a reader
   * of a read-write lock): admitted on the same condition, the mark left
   * where it is (none yet: 1, which admits every token as none does); the
   * fence row is held in share mode, so check-only admissions run side by
   * side and an advancing one waits until they are settled.
   */
  async admit(resource: string, presented: Fencing, options: { signal?: AbortSignal } & FenceMode = {}): Promise<FenceAdmission<MySqlPoolConnection>> {
    checkResource(resource);
    const fencing: FenceRequest = { ...resolveFencing(presented), advance: fenceAdvances(options, 'MySqlFenceStore.admit') };
    const signal = options.signal;
    signal?.throwIfAborted();
    const pool = this.#pool;
    const connection = await pool.getConnection();
    let previous: FencingToken | null;
    const kill = (): void => {
      // The wait is a statement blocked on a row lock: end it from another connection.
      if (connection.threadId !== null) void pool.query(`KILL QUERY ${Number(connection.threadId)}`).catch(() => undefined);
    };
    try {
      signal?.throwIfAborted();
      signal?.addEventListener('abort', kill, { once: true });
      previous = await openFenced(connection, resource, fencing);
    } catch (error) {
      if (signal?.aborted) {
        connection.destroy();
        throw signal.reason;
      }
      if (error instanceof StaleTokenError || error instanceof SequencerMismatchError) connection.release();
      else connection.destroy();
      throw error;
    } finally {
      signal?.removeEventListener('abort', kill);
    }
    if (signal?.aborted) {
      // Admitted just as the signal fired: give it back, keeping the advance.
      if (!(await abandonWork(connection))) await keepAdvance(pool, resource, fencing);
      connection.destroy();
      throw signal.reason;
    }
    let settled: Promise<void> | undefined;
    const commit = (): Promise<void> => (settled ??= commitAdmission(pool, connection, resource, fencing));
    const abort = (): Promise<void> => (settled ??= abortAdmission(pool, connection, resource, fencing));
    return Object.freeze({ resource, token: fencing.token, previous, transaction: connection, commit, abort });
  }
}

async function commitAdmission(pool: MySqlPool, connection: MySqlPoolConnection, resource: string, fencing: ResolvedFencing): Promise<void> {
  const closed = await closeFenced(connection);
  if (closed.committed) {
    connection.release();
    return;
  }
  const rolledBack = await rollback(connection).then(() => true, () => false);
  if (rolledBack) connection.release();
  else connection.destroy();
  const restored = await keepAdvance(pool, resource, fencing);
  if (closed.ended) throw new WorkNotCommittedError(resource, fencing.token, { cause: closed.error });
  throw new CommitFailedError(resource, fencing.token, restored, { cause: closed.error });
}

async function abortAdmission(pool: MySqlPool, connection: MySqlPoolConnection, resource: string, fencing: ResolvedFencing): Promise<void> {
  const kept = await abandonWork(connection);
  // The handler may still hold this connection and send more: never hand it to anyone else.
  connection.destroy();
  if (kept) return;
  if (!(await keepAdvance(pool, resource, fencing))) {
    throw new CommitFailedError(resource, fencing.token, false, { cause: new Error('the aborted admission\'s fence advance went with its transaction') });
  }
}

