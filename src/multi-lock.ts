/**
 * Several locks of one source taken as one: `acquireLocks(source, names)`
 * and its scoped form `withLocks(source, names, fn)`.
 *
 * Deadlock between two callers that name the same locks in different orders
 * is avoided the classic way: every caller takes them in one global order,
 * JavaScript string order (UTF-16 code units, as `<` compares), whatever
 * order it named them in. All or nothing: a timeout (`timeoutMs` is the total
 * for all of them), an abort or a failure releases what was already taken
 * before the call rejects, so nothing is left behind.
 *
 *   await withLocks(source, ['accounts/7', 'accounts/3'], async (multi) => {
 *     const from = multi.locks[0];   // accounts/3: locks are in name order
 *     // ... fence each write with its own lock's sequencer: currentLock('accounts/7')
 *   });
 */
import { InvalidArgumentError, LockTimeoutError, LockOrderError } from './errors.js';
import type { AcquireOptions, Lock } from './lock.js';
import type { LockSource } from './lock-source.js';
import { checkOrder, holdsPlain, reentered, runScoped, type ScopedLock } from './lock-scope.js';

/** Several locks of one source held together (acquireLocks, withLocks). */
export interface MultiLock extends AsyncDisposable {
  /** The locks in name order (JavaScript string order), each with its own token and sequencer. */
  readonly locks: readonly Lock[];
  /** True while every one of them is held. */
  readonly held: boolean;
  /** Aborts (with that lock's reason) as soon as any one of them can no longer be assumed held. */
  readonly signal: AbortSignal;
  /** The earliest of their step-down deadlines (performance.now() clock). */
  readonly deadline: number;
  /** The lock of `name`, or undefined if it is not one of them. */
  lock(name: string): Lock | undefined;
  /** Release every one of them (those this MultiLock took). Idempotent. */
  release(): Promise<void>;
  /** `await using multi = await acquireLocks(...)`: releases (as release()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** acquireLocks' options: what every acquire takes, `timeoutMs` being the total for all the locks. */
export interface AcquireLocksOptions extends AcquireOptions {}

class HeldLocks implements MultiLock {
  readonly locks: readonly Lock[];
  /** The ones this MultiLock took (withLocks re-enters the ones an enclosing scope holds, and leaves them to it). */
  readonly #owned: readonly Lock[];
  #signal: AbortSignal | null = null;
  #released: Promise<void> | null = null;

  constructor(locks: readonly Lock[], owned: readonly Lock[]) {
    this.locks = Object.freeze([...locks]);
    this.#owned = owned;
  }

  get held(): boolean {
    return this.locks.every((lock) => lock.held);
  }

  get signal(): AbortSignal {
    return (this.#signal ??= AbortSignal.any(this.locks.map((lock) => lock.signal)));
  }

  get deadline(): number {
    return Math.min(...this.locks.map((lock) => lock.deadline));
  }

  lock(name: string): Lock | undefined {
    return this.locks.find((lock) => lock.name === name);
  }

  release(): Promise<void> {
    return (this.#released ??= releaseAll(this.#owned));
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/** Release every lock; the first failure is reported once all have been tried. */
async function releaseAll(locks: readonly Lock[]): Promise<void> {
  const results = await Promise.allSettled(locks.map((lock) => lock.release()));
  const failed = results.find((result): result is PromiseRejectedResult => result.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
}

function checkSource(what: string, source: LockSource): void {
  if (typeof source !== 'object' || source === null || typeof source.acquireLock !== 'function') {
    throw new InvalidArgumentError(`${what} needs a LockSource`);
  }
}

/** The names, checked and sorted: a non-empty array of distinct strings. */
function sortedNames(what: string, names: unknown): string[] {
  if (!Array.isArray(names)) throw new InvalidArgumentError(`${what} needs an array of lock names`);
  if (names.length === 0) throw new InvalidArgumentError(`${what} needs at least one lock name`);
  for (const name of names) {
    if (typeof name !== 'string') throw new InvalidArgumentError(`${what}: every lock name must be a string, got ${typeof name}`);
  }
  const sorted = [...(names as string[])].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i] === sorted[i - 1]) throw new InvalidArgumentError(`${what}: lock name ${JSON.stringify(sorted[i])} is named twice`);
  }
  return sorted;
}

function checkTimeout(what: string, timeoutMs: unknown): void {
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < 0)) {
    throw new InvalidArgumentError(`${what}: timeoutMs must be a non-negative number, got ${String(timeoutMs)}`);
  }
}

/**
 * Take `names` one after the other in string order, within `timeoutMs` in
 * all; on any way out but success, release what was taken, then reject.
 */
async function takeAll(source: LockSource, names: readonly string[], options: AcquireOptions): Promise<Lock[]> {
  const { timeoutMs } = options;
  const until = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs;
  const taken: Lock[] = [];
  try {
    for (const name of names) {
      let each: AcquireOptions = options;
      if (timeoutMs !== undefined) {
        const left = Math.max(0, Math.ceil(until - performance.now()));
        each = { ...options, timeoutMs: left };
      }
      try {
        taken.push(await source.acquireLock(name, each));
      } catch (error) {
        // The timeout is the caller's total, not what was left for this name.
        if (timeoutMs !== undefined && error instanceof LockTimeoutError) {
          throw new LockTimeoutError(`${name} (of ${names.join(', ')})`, timeoutMs, { cause: error });
        }
        throw error;
      }
    }
    return taken;
  } catch (error) {
    await releaseAll(taken).catch(() => undefined);
    throw error;
  }
}

/**
 * Acquire every lock of `names` from `source` and return them as one
 * MultiLock. Taken in JavaScript string order whatever order they are named
 * in, so two callers naming them in different orders never wait for each
 * other. `timeoutMs` is the total for all; on a timeout (LockTimeoutError),
 * an abort or a failure, the ones already taken are released before it
 * rejects. Refused before any request: an empty list, a name named twice, a
 * bad timeout; inside a lock scope (withLock, withLocks), a name sorting
 * before one the scope holds, or one it holds itself (LockOrderError: it
 * would wait for itself; withLocks re-enters it instead).
 */
export async function acquireLocks(source: LockSource, names: readonly string[], options: AcquireLocksOptions = {}): Promise<MultiLock> {
  checkSource('acquireLocks', source);
  const sorted = sortedNames('acquireLocks', names);
  checkTimeout('acquireLocks', options.timeoutMs);
  for (const name of sorted) {
    if (holdsPlain(source, name)) {
      throw new LockOrderError(name, name, `lock ${name} is held by the enclosing scope: acquireLocks would wait for itself (withLocks re-enters it)`);
    }
  }
  checkOrder(source, sorted);
  const taken = await takeAll(source, sorted, options);
  return new HeldLocks(taken, taken);
}

/**
 * withLock for several locks of one source: acquire them as acquireLocks
 * does (string order, `timeoutMs` the total, all or nothing), run
 * `fn(multi, signal)`, release them when fn settles. `signal` aborts as soon
 * as any one is lost, or when `options.signal` aborts.
 *
 * Inside fn, CURRENT_LOCK is ambiguous (AmbiguousLockError, before any I/O):
 * fence each write with `currentLock(name)` (or `multi.lock(name)`). Names an
 * enclosing scope holds are re-entered, not taken again (and not released at
 * the end); the new ones must not sort before a name the scopes hold
 * (LockOrderError).
 */
export async function withLocks<T>(source: LockSource, names: readonly string[], fn: (multi: MultiLock, signal: AbortSignal) => Promise<T> | T, options: AcquireLocksOptions = {}): Promise<T> {
  checkSource('withLocks', source);
  if (typeof fn !== 'function') throw new InvalidArgumentError('withLocks needs a function to run');
  const sorted = sortedNames('withLocks', names);
  checkTimeout('withLocks', options.timeoutMs);
  const again = new Map<string, ScopedLock>();
  for (const name of sorted) {
    const scoped = reentered(source, name, 'lock');
    if (scoped !== undefined) again.set(name, scoped);
  }
  const fresh = sorted.filter((name) => !again.has(name));
  checkOrder(source, fresh);
  const taken = await takeAll(source, fresh, options);
  const byName = new Map(fresh.map((name, i) => [name, taken[i] as Lock]));
  const locks = sorted.map((name) => byName.get(name) ?? (again.get(name) as ScopedLock).lock);
  const multi = new HeldLocks(locks, taken);
  const signal = options.signal === undefined ? multi.signal : AbortSignal.any([multi.signal, options.signal]);
  const held: ScopedLock[] = sorted.map((name, i) => again.get(name) ?? { source, name, kind: 'lock', lock: locks[i] as Lock, signal });
  let value: T;
  try {
    value = await runScoped(held, () => fn(multi, signal));
  } catch (error) {
    await multi.release().catch(() => undefined);
    throw error;
  }
  await multi.release();
  return value;
}
