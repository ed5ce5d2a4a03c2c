import { CommitFailedError, InvalidArgumentError, SequencerMismatchError, StaleTokenError, WorkNotCommittedError, resolveFencing, type Fencing, type ResolvedFencing } from '../../src/index.js';
import { publishRefused, traceWithFence } from '../../src/extend.js';
import { assertPromisePool, type MySqlPool, type MySqlPoolConnection } from './database.js';
import { abandonWork, closeFenced, keepAdvance, openFenced, rollback } from './fence.js';
import { checkResource } from './identifiers.js';

/**
 * Run `work` in one transaction on a connection of `pool` that first
 * advances the fence of `resource` to the token and holds that row's lock
 * (SELECT ... FOR UPDATE) until commit:
 * - a token equal to the mark passes, a larger one advances it, a smaller
 *   one throws StaleTokenError (carrying the current mark) before `work`
 *   runs;
 * - concurrent calls for one resource are serialized by the row lock, so a
 *   stale holder's writes in `work` never commit after a newer holder's;
 * - the advance is never undone once `work` has run: if `work` throws, its
 *   writes roll back to a savepoint set right after the advance, the
 *   advance commits alone, and the error is rethrown. A deadlock (1213) or a
 *   lock wait timeout that rolled the whole transaction back takes the
 *   advance with it: it is applied again at once on its own, and the error
 *   rethrown. If `work` returns but the transaction had ended under it (it
 *   caught such an error and went on: its later statements ran outside the
 *   transaction), the advance is applied again and withFence rejects with
 *   WorkNotCommittedError; if COMMIT fails, CommitFailedError.
 *
 * `work` receives the PoolConnection inside the transaction: write through
 * it, not through the pool (a write on another connection is outside the
 * fence), and do not end the transaction yourself.
 *
 * `fencing` is whatever the core takes (resolveFencing): a bare token, a
 * Sequencer (checked against a binding made with bindFence), the Lock or
 * Leadership itself (its sequencer; LockLostError before any SQL once it is
 * not held), or CURRENT_LOCK inside withLock. The mark is read with a locking read, never from the
 * transaction's snapshot, whatever the session's isolation level.
 */
export async function withFence<T>(pool: MySqlPool, resource: string, fencing: Fencing, work: (connection: MySqlPoolConnection) => Promise<T>): Promise<T> {
  checkResource(resource);
  const resolved = resolveFencing(fencing);
  if (typeof work !== 'function') throw new InvalidArgumentError('work must be a function');
  assertPromisePool(pool, 'withFence');
  return traceWithFence('mysql', resource, resolved.token, () => fenced(pool, resource, resolved, work));
}

async function fenced<T>(pool: MySqlPool, resource: string, fencing: ResolvedFencing, work: (connection: MySqlPoolConnection) => Promise<T>): Promise<T> {
  const connection = await pool.getConnection();
  let broken = false;
  try {
    try {
      await openFenced(connection, resource, fencing);
    } catch (error) {
      if (errorIsRefusal(error)) published(error, fencing);
      else broken = true;
      throw error;
    }
    let value: T;
    try {
      value = await work(connection);
    } catch (error) {
      if (!(await abandonWork(connection))) await keepAdvance(pool, resource, fencing);
      throw error;
    }
    const closed = await closeFenced(connection);
    if (closed.committed) return value;
    await rollback(connection).catch(() => { broken = true; });
    const restored = await keepAdvance(pool, resource, fencing);
    if (closed.ended) throw new WorkNotCommittedError(resource, fencing.token, { cause: closed.error });
    throw new CommitFailedError(resource, fencing.token, restored, { cause: closed.error });
  } finally {
    if (broken) connection.destroy();
    else connection.release();
  }
}

function errorIsRefusal(error: unknown): error is StaleTokenError | SequencerMismatchError {
  return error instanceof StaleTokenError || error instanceof SequencerMismatchError;
}

/** A refusal on fencekeeper:fence:refused. */
export function published(error: StaleTokenError | SequencerMismatchError, fencing: ResolvedFencing): void {
  if (error instanceof StaleTokenError) publishRefused('mysql', error);
  else publishRefused('mysql', error, fencing.token);
}
