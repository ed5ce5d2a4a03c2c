/**
 * The lock scopes of one async context: what withLock, withReadLock,
 * withWriteLock and withLocks hold while their fn runs (AsyncLocalStorage).
 *
 * Node has no thread to own a lock; the async context is the nearest thing
 * to an owner. So the scopes are where a lock is re-entered: a scoped acquire
 * of a (source object, name, kind) that an enclosing scope holds runs with
 * that scope's Lock (no second grant, no wait on itself), and leaving the
 * inner scope releases nothing. A write scope covers a nested read scope of
 * its name; a read scope never becomes a write scope (LockUpgradeError).
 * Plain, read and write locks of one name are separate namespaces, so they
 * never re-enter each other.
 *
 * Inside a scope, a new lock of the same source whose name sorts before one
 * the scope holds is refused (LockOrderError): two callers taking names in
 * different orders could wait for each other forever; in name order they
 * cannot.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { AmbiguousLockError, LockLostError, LockOrderError, LockUpgradeError } from './errors.js';
import type { Lock } from './lock.js';

/** Which namespace of a name a scope holds: a plain lock, a read lock or a write lock. */
export type ScopeKind = 'lock' | 'read' | 'write';

/** One lock an enclosing scope holds. */
export interface ScopedLock {
  readonly source: object;
  readonly name: string;
  readonly kind: ScopeKind;
  readonly lock: Lock;
  /** What the scope's fn was given: the lock's signal, with the scope's own signal if it had one. */
  readonly signal: AbortSignal;
}

interface Frame {
  readonly held: readonly ScopedLock[];
  readonly parent: Frame | undefined;
}

const frames = new AsyncLocalStorage<Frame>();

/** Run `fn` in a new innermost scope holding `held`. */
export function runScoped<T>(held: readonly ScopedLock[], fn: () => T): T {
  return frames.run({ held, parent: frames.getStore() }, fn);
}

/**
 * The enclosing scope's lock that a scoped acquire of (source, name, kind)
 * re-enters, or undefined when none does. Throws LockUpgradeError for a
 * write inside a read scope of the name, and LockLostError when the lock to
 * re-enter is no longer held.
 */
export function reentered(source: object, name: string, kind: ScopeKind): ScopedLock | undefined {
  for (let frame = frames.getStore(); frame !== undefined; frame = frame.parent) {
    for (const scoped of frame.held) {
      if (scoped.source !== source || scoped.name !== name) continue;
      const covers = scoped.kind === kind || (kind === 'read' && scoped.kind === 'write');
      if (kind === 'write' && scoped.kind === 'read') throw new LockUpgradeError(name);
      if (!covers) continue;
      if (!scoped.lock.held) {
        const reason: unknown = scoped.lock.signal.reason;
        throw new LockLostError(name, reason instanceof LockLostError ? reason.reason : 'deadline', `lock ${name}: the enclosing scope's grant is no longer held; not re-entered`);
      }
      return scoped;
    }
  }
  return undefined;
}

/**
 * Refuse to take `names` (new to the scope, sorted) from `source` when the
 * smallest sorts before a name an enclosing scope holds of that source.
 */
export function checkOrder(source: object, names: readonly string[]): void {
  const first = names[0];
  if (first === undefined) return;
  let largest: string | undefined;
  for (let frame = frames.getStore(); frame !== undefined; frame = frame.parent) {
    for (const scoped of frame.held) {
      if (scoped.source === source && (largest === undefined || scoped.name > largest)) largest = scoped.name;
    }
  }
  if (largest !== undefined && first < largest) throw new LockOrderError(first, largest);
}

/** Whether an enclosing scope holds (source, name) as a plain lock. */
export function holdsPlain(source: object, name: string): boolean {
  for (let frame = frames.getStore(); frame !== undefined; frame = frame.parent) {
    if (frame.held.some((scoped) => scoped.source === source && scoped.name === name && scoped.kind === 'lock')) return true;
  }
  return false;
}

/**
 * The lock of the innermost enclosing scope; with `name`, the innermost
 * lock of that name any enclosing scope holds. Undefined when there is
 * none; AmbiguousLockError without a name inside withLocks (several held).
 */
export function scopedLock(name?: string): Lock | undefined {
  const frame = frames.getStore();
  if (name === undefined) {
    if (frame === undefined) return undefined;
    if (frame.held.length > 1) throw new AmbiguousLockError(frame.held.map((scoped) => scoped.name));
    return frame.held[0]?.lock;
  }
  for (let f = frame; f !== undefined; f = f.parent) {
    const found = f.held.find((scoped) => scoped.name === name);
    if (found !== undefined) return found.lock;
  }
  return undefined;
}
