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
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { InvalidArgumentError, NoCurrentLockError } from './errors.js';
import type { AcquireOptions, Lock } from './lock.js';
import type { LockSource } from './lock-source.js';
import { isSequencer, sequencer, type Sequencer } from './sequencer.js';
import { assertToken, type FencingToken } from './token.js';

/** Where a token goes: "the lock of the enclosing withLock". Registry-wide, so two copies of the package agree. */
export const CURRENT_LOCK: unique symbol = Symbol.for('fencekeeper.current-lock') as never;

/** What the fenced adapters take: a bare token, a sequencer (token bound to its lock), or CURRENT_LOCK. */
export type Fencing = FencingToken | Sequencer | typeof CURRENT_LOCK;

/**
 * A fencing input (a token, a sequencer or CURRENT_LOCK) resolved to the
 * token to compare and the sequencer to check a binding with.
 */
export interface ResolvedFencing {
  readonly token: FencingToken;
  /** null: a bare token (the lock that granted it is not known). */
  readonly sequencer: Sequencer | null;
}

const scope = new AsyncLocalStorage<Lock>();

/** The lock of the innermost enclosing withLock, or undefined outside every scope. */
export function currentLock(): Lock | undefined {
  return scope.getStore();
}

export interface WithLockOptions extends AcquireOptions {}

/**
 * Acquire `name` from `source`, run `fn` with the lock in scope and release it
 * when fn settles. `signal` (the second argument) aborts when the lock can no
 * longer be assumed held or when `options.signal` aborts: fn should stop
 * there; the lock is released once fn has settled, never while it still runs.
 * Resolves with fn's value, or rejects with fn's error (when fn threw and the
 * release failed too, fn's error is the one reported: the grant then ends
 * with its session, lease or TTL).
 */
export async function withLock<T>(source: LockSource, name: string, fn: (lock: Lock, signal: AbortSignal) => Promise<T> | T, options: WithLockOptions = {}): Promise<T> {
  if (typeof source !== 'object' || source === null || typeof source.acquireLock !== 'function') {
    throw new InvalidArgumentError('withLock needs a LockSource');
  }
  if (typeof fn !== 'function') throw new InvalidArgumentError('withLock needs a function to run');
  const lock = await source.acquireLock(name, options);
  const signal = options.signal === undefined ? lock.signal : AbortSignal.any([lock.signal, options.signal]);
  let value: T;
  try {
    value = await scope.run(lock, () => fn(lock, signal));
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
 * NoCurrentLockError for CURRENT_LOCK outside every withLock.
 */
export function resolveFencing(value: unknown): ResolvedFencing {
  if (value === CURRENT_LOCK) {
    const lock = currentLock();
    if (lock === undefined) throw new NoCurrentLockError();
    // Every source's locks carry their sequencer; a Lock made by hand (a user's own source) may not: then only its number is known.
    const bound = (lock as Omit<Lock, 'sequencer'> & { readonly sequencer?: Sequencer }).sequencer;
    return bound === undefined ? { token: assertToken(lock.token), sequencer: null } : { token: bound.token, sequencer: sequencer(bound) };
  }
  if (typeof value === 'bigint') return { token: assertToken(value), sequencer: null };
  if (isSequencer(value)) {
    const checked = sequencer(value);
    return { token: checked.token, sequencer: checked };
  }
  return { token: assertToken(value), sequencer: null };
}
