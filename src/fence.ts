import type { FencingToken } from './token.js';
import type { FenceMode } from './fence-mode.js';
import type { Fencing } from './with-lock.js';

/**
 * Where a resource keeps its fence: the largest token it has admitted.
 * Defined in the core so that a store (PostgreSQL's, a user's own) and a
 * consumer of stores (the Express middleware) never import each other.
 *
 * The guarantee a store gives is stronger than a compare: from `admit()` until
 * the admission is settled (`commit()` or `abort()`), no other admission for
 * the same resource proceeds. So a request carrying token n is never handled
 * concurrently with, or after, one carrying a larger token: the check and the
 * write it protects are one critical section, not two steps a paused holder
 * could slip between.
 */
export interface FenceStore<Transaction = undefined> {
  /**
   * Wait for the resource's fence, compare `token` with its high-water mark
   * and advance it (equal passes: the same holder writes many times); the
   * advance is never undone, by abort() either. A
   * smaller token rejects with StaleTokenError (carrying the current mark)
   * and changes nothing. The fence stays held until the admission is settled.
   * An aborted `signal` while waiting rejects with the signal's reason and
   * leaves nothing held.
   *
   * `token` is a bare token, a Sequencer, or a Lock / Leadership (its
   * sequencer is used; one whose `held` is false is refused with
   * LockLostError before any I/O). A store that supports binding (a
   * fence recorded as guarded by one lock) compares a bound fence's binding
   * with the sequencer and refuses another lock's, and a bare token, with
   * SequencerMismatchError, changing nothing; an unbound fence compares the
   * numbers only.
   *
   * `advance: false` (FenceMode) asks for a check-only admission (a reader of
   * a read-write lock): admitted on the same condition, the mark left where
   * it is. A store that cannot check without advancing must refuse it with
   * InvalidArgumentError before any I/O, never advance silently.
   */
  admit(resource: string, token: Fencing, options?: { signal?: AbortSignal } & FenceMode): Promise<FenceAdmission<Transaction>>;
  /** The resource's high-water mark, or null if it has never admitted a token. */
  current(resource: string): Promise<FencingToken | null>;
}

/**
 * One request's hold on a resource's fence, from FenceStore.admit: the token
 * was admitted and the mark advanced. Settle it exactly once, with commit()
 * (the work's writes through `transaction` commit) or abort() (they are undone;
 * the mark stays advanced); until then no other admission of the resource proceeds.
 */
export interface FenceAdmission<Transaction = undefined> {
  readonly resource: string;
  readonly token: FencingToken;
  /** The mark before this admission (null: the first token this resource saw). */
  readonly previous: FencingToken | null;
  /**
   * The store's transaction the handler may write through (PostgreSQL: the
   * transaction holding the fence row's lock), so those writes commit only
   * if the admission commits.
   */
  readonly transaction: Transaction;
  /** Keep the transaction's writes and free the fence. Idempotent. */
  commit(): Promise<void>;
  /**
   * Undo the transaction's writes and free the fence. The advance stays:
   * an admitted token may already have acted outside the store (a handler
   * that wrote elsewhere before it failed), so the mark never drops back
   * below it. Idempotent.
   */
  abort(): Promise<void>;
}
