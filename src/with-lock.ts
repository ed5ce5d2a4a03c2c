/**
 * Scoped locks: `withLock(source, name, fn)` acquires, runs `fn(lock, signal)`
 * and releases however fn ends (it returns, throws, or stops on the signal).
 * Inside fn, and in everything it awaits or starts, `currentLock()` returns
 * that lock (AsyncLocalStorage), so code deep in a call chain can fence its
 * writes with `CURRENT_LOCK` instead of having the token threaded down by hand:
 *
 *   await withLock(source, 'jobs/reindex', async () => {
 *     await reindexAll();   // ... deep inside: withFence(db, 'index', CURRENT_LOCK, write)
 *   });
 *
 * `CURRENT_LOCK` is a marker passed where a token goes, not an overload that
 * leaves the token out: a call that forgot its token must not silently mean
 * "whatever lock is current", and the call site says which it means. Outside
 * every scope the marker fails with NoCurrentLockError before any I/O, so a
 * write never goes out unfenced because nobody held a lock.
 *
 * Scopes re-enter (./lock-scope.ts): a nested withLock of the same source
 * object and name runs with the enclosing scope's Lock, no second grant; the
 * inner scope's end releases nothing, the outer's does. Outside a scope, a
 * second acquireLock of a name the same client holds is a separate holder
 * and queues behind the first. withReadLock / withWriteLock are the scoped
 * forms of a source's read-write lock, under the same rule.
 */
import { InvalidArgumentError, LockLostError, NoCurrentLockError, type LossReason } from './errors.js';
import type { AcquireOptions, Lock } from './lock.js';
import type { LockSource } from './lock-source.js';
import { checkOrder, reentered, runScoped, scopedLock, type ScopeKind } from './lock-scope.js';
import { isSequencer, sequencer, type Sequencer } from './sequencer.js';
import { assertToken, type FencingToken } from './token.js';

/** Where a token goes: "the lock of the enclosing withLock". Registry-wide, so two copies of the package agree. */
export const CURRENT_LOCK: unique symbol = Symbol.for('fencekeeper.current-lock') as never;

/**
 * A grant passed where a token goes: a `Lock` or a `Leadership` as a source
 * returned it (anything with a `sequencer` and a `held` flag). A fence takes
 * its sequencer, so a fence bound to that lock checks it exactly as if the
 * sequencer had been passed; and a grant whose `held` is false (released,
 * lost, or past its step-down deadline) is refused with LockLostError before
 * any I/O, so a holder that resumed after a long pause writes nothing even
 * where the fence itself would still admit its token.
 */
export interface FencingGrant {
  /** False once the grant can no longer be assumed held (read when the write starts). */
  readonly held: boolean;
  /** The grant's kind, lock name, source and token. */
  readonly sequencer: Sequencer;
  /** Aborted with LockLostError (carrying the loss reason) once the grant is gone; optional for grants made by hand. */
  readonly signal?: AbortSignal;
}

/**
 * What every fenced write takes where a token goes: a bare token (bigint),
 * a Sequencer (the token with the lock it belongs to), a FencingGrant (a
 * `Lock` or `Leadership` itself: its sequencer is used, and a grant no
 * longer held is refused with LockLostError before any I/O), or
 * CURRENT_LOCK (the lock of the enclosing withLock).
 */
export type Fencing = FencingToken | Sequencer | FencingGrant | typeof CURRENT_LOCK;

/**
 * A fencing input (a token, a sequencer or CURRENT_LOCK) resolved to the
 * token to compare and the sequencer to check a binding with.
 */
export interface ResolvedFencing {
  readonly token: FencingToken;
  /** null: a bare token (the lock that granted it is not known). */
  readonly sequencer: Sequencer | null;
}

/**
 * The lock of the innermost enclosing withLock (withReadLock,
 * withWriteLock), or undefined outside every scope. With `name`: the lock of
 * that name held by the innermost enclosing scope that holds it (how code
 * inside withLocks picks one). Without a name inside withLocks, which holds
 * several, it throws AmbiguousLockError (AMBIGUOUS_LOCK).
 */
export function currentLock(name?: string): Lock | undefined {
  return scopedLock(name);
}

/**
 * withLock's options: what every acquire takes. A nested withLock that
 * re-enters an enclosing scope's lock ignores them (the lock is already held).
 */
export interface WithLockOptions extends AcquireOptions {}

/**
 * The work withLock, withReadLock and withWriteLock run while the lock is held:
 * it receives the Lock (its token, sequencer, held and deadline) and the lock's
 * `signal`, which aborts when the lock is lost, so the work can stop early.
 * Its result (or the promise's) is what the with-call returns.
 */
export type ScopedFn<T> = (lock: Lock, signal: AbortSignal) => Promise<T> | T;

/**
 * Acquire `name` from `source`, run `fn` with the lock in scope and release it
 * when fn settles. `signal` (the second argument) aborts when the lock can no
 * longer be assumed held or when `options.signal` aborts: fn should stop
 * there; the lock is released once fn has settled, never while it still runs.
 * Resolves with fn's value, or rejects with fn's error (when fn threw and the
 * release failed too, fn's error is the one reported: the grant then ends
 * with its session, lease or TTL).
 *
 * Re-entrant: inside a withLock of the same source object and name, fn runs
 * with that scope's Lock and signal, with no second grant and no wait; this
 * call's options are ignored and its end releases nothing. Concurrent nested
 * calls run concurrently. Re-entering a lock that is no longer held throws
 * LockLostError. Inside a scope, a new name of the same source that sorts
 * before one the scope holds is refused (LockOrderError), before any request.
 */
export async function withLock<T>(source: LockSource, name: string, fn: ScopedFn<T>, options: WithLockOptions = {}): Promise<T> {
  checkScopeArguments('withLock', source, fn);
  return scoped(source, name, 'lock', fn, options, () => source.acquireLock(name, options));
}

/**
 * withLock for a source's read lock (LockSource.acquireReadLock): held
 * together with other readers of the name, never with its writer. Readers
 * together may carry tokens in any order: check a fence with the token
 * without advancing it. Re-entrant as withLock; inside withWriteLock of the
 * same name it runs with the write lock (a writer may read). A source without
 * read-write locks (Redis) is refused with InvalidArgumentError, before any request.
 */
export async function withReadLock<T>(source: LockSource, name: string, fn: ScopedFn<T>, options: WithLockOptions = {}): Promise<T> {
  checkScopeArguments('withReadLock', source, fn);
  const acquire = source.acquireReadLock;
  if (typeof acquire !== 'function') throw new InvalidArgumentError(`withReadLock: this ${describeSource(source)} source has no read-write locks (acquireReadLock); ZooKeeper, etcd, PostgreSQL and memorySource() have them`);
  return scoped(source, name, 'read', fn, options, () => acquire.call(source, name, options));
}

/**
 * withLock for a source's write lock (LockSource.acquireWriteLock): held
 * alone, with no reader and no other writer; its token is larger than every
 * grant of the name before it. Re-entrant as withLock; inside withReadLock of
 * the same name it is refused with LockUpgradeError (it would wait for its
 * own read lock). A source without read-write locks is refused with
 * InvalidArgumentError, before any request.
 */
export async function withWriteLock<T>(source: LockSource, name: string, fn: ScopedFn<T>, options: WithLockOptions = {}): Promise<T> {
  checkScopeArguments('withWriteLock', source, fn);
  const acquire = source.acquireWriteLock;
  if (typeof acquire !== 'function') throw new InvalidArgumentError(`withWriteLock: this ${describeSource(source)} source has no read-write locks (acquireWriteLock); ZooKeeper, etcd, PostgreSQL and memorySource() have them`);
  return scoped(source, name, 'write', fn, options, () => acquire.call(source, name, options));
}

function checkScopeArguments(what: string, source: LockSource, fn: unknown): void {
  if (typeof source !== 'object' || source === null || typeof source.acquireLock !== 'function') {
    throw new InvalidArgumentError(`${what} needs a LockSource`);
  }
  if (typeof fn !== 'function') throw new InvalidArgumentError(`${what} needs a function to run`);
}

function describeSource(source: LockSource): string {
  return typeof source.kind === 'string' ? source.kind : 'lock';
}

/** The scoped run: re-enter an enclosing scope's lock, or take a new one (in name order) and release it when fn settles. */
async function scoped<T>(source: LockSource, name: string, kind: ScopeKind, fn: ScopedFn<T>, options: WithLockOptions, acquire: () => Promise<Lock>): Promise<T> {
  const again = reentered(source, name, kind);
  if (again !== undefined) return runScoped([again], () => fn(again.lock, again.signal));
  checkOrder(source, [name]);
  const lock = await acquire();
  const signal = options.signal === undefined ? lock.signal : AbortSignal.any([lock.signal, options.signal]);
  let value: T;
  try {
    value = await runScoped([{ source, name, kind, lock, signal }], () => fn(lock, signal));
  } catch (error) {
    // fn's error is what the caller needs; a release that fails too leaves the grant to expire on its own.
    await lock.release().catch(() => undefined);
    throw error;
  }
  await lock.release();
  return value;
}

/**
 * What an adapter does with the value passed where a token goes: check it and
 * say which token and which lock (if known) it stands for. Throws before any
 * I/O: InvalidTokenError / InvalidArgumentError for a bad value,
 * NoCurrentLockError for CURRENT_LOCK outside every withLock,
 * AmbiguousLockError for CURRENT_LOCK inside withLocks (several locks held),
 * LockLostError for a Lock or Leadership (or the current lock) whose `held`
 * is false.
 */
export function resolveFencing(value: unknown): ResolvedFencing {
  if (value === CURRENT_LOCK) {
    // Inside withLocks (several held) this throws AmbiguousLockError: the caller must name one.
    const lock = currentLock();
    if (lock === undefined) throw new NoCurrentLockError();
    // Every source's locks carry their sequencer; a Lock made by hand (a user's own source) may not: then only its number is known.
    const bound = (lock as Omit<Lock, 'sequencer'> & { readonly sequencer?: Sequencer }).sequencer;
    if (lock.held === false) throw lost(lock.name, lock.signal);
    return bound === undefined ? { token: assertToken(lock.token), sequencer: null } : { token: bound.token, sequencer: sequencer(bound) };
  }
  if (typeof value === 'bigint') return { token: assertToken(value), sequencer: null };
  if (isGrant(value)) {
    const checked = sequencer(value.sequencer);
    if (value.held !== true) throw lost(checked.name, value.signal);
    return { token: checked.token, sequencer: checked };
  }
  if (isSequencer(value)) {
    const checked = sequencer(value);
    return { token: checked.token, sequencer: checked };
  }
  return { token: assertToken(value), sequencer: null };
}

/** A Lock or Leadership (or a grant of one's own shape): a `held` flag and a `sequencer` object, but not itself a sequencer. */
function isGrant(value: unknown): value is FencingGrant {
  return typeof value === 'object' && value !== null && 'held' in value && 'sequencer' in value
    && typeof (value as { sequencer: unknown }).sequencer === 'object';
}

/** The loss the grant's signal carries (released, session expired, ...), or 'deadline': held turns false there before any timer runs. */
function lost(name: string, signal: unknown): LockLostError {
  // Read structurally: a LockLostError from another copy of the package is not an instance of this one's.
  const carried = signal instanceof AbortSignal && signal.aborted ? (signal.reason as { code?: unknown; reason?: unknown } | null) : null;
  const reason: LossReason = carried?.code === 'LOCK_LOST' && typeof carried.reason === 'string' ? carried.reason as LossReason : 'deadline';
  return new LockLostError(name, reason, `lock ${name} is no longer held (${reason}): a fenced write with it is refused before any I/O`);
}
