// Errors of fences and sequencers, where the resource lives: a write refused
// for its token or its lock, a fence in a state it cannot be used in, its
// schema missing.
import { FencekeeperError, type FencekeeperErrorOptions } from './base.js';

/** A write presented a token smaller than the one the resource has already seen. */
export class StaleTokenError extends FencekeeperError {
  static override readonly kind: string = 'StaleTokenError';
  readonly resource: string;
  /** The token the write presented (a FencingToken). */
  readonly presented: bigint;
  /** The resource's high-water mark when the write was refused (null if unknown). */
  readonly current: bigint | null;
  constructor(resource: string, presented: bigint, current: bigint | null, options?: FencekeeperErrorOptions) {
    super('STALE_TOKEN', `stale fencing token for ${resource}: presented ${presented}, current ${current ?? 'unknown'}`, options);
    this.resource = resource;
    this.presented = presented;
    this.current = current;
  }
}

/**
 * A stored fence that cannot be read (a malformed pointer, a pointer naming
 * a data object that does not exist). Fail closed: the resource is neither
 * overwritten nor trusted until an operator repairs it.
 */
export class CorruptFenceError extends FencekeeperError {
  static override readonly kind: string = 'CorruptFenceError';
  readonly resource: string;
  constructor(resource: string, message: string, options?: FencekeeperErrorOptions) {
    super('CORRUPT_FENCE', message, options);
    this.resource = resource;
  }
}

/**
 * Work admitted under a resource's fence no longer holds it: its admission
 * has been aborted and the fence handed on, so the next admission may run
 * while this work is still going. Stop writing to the resource. `reason`:
 * 'client_gone' (the HTTP connection closed before the response finished) or
 * 'hold_expired' (the fence was held longer than fencing()'s maxHoldMs).
 */
export class FenceReleasedError extends FencekeeperError {
  static override readonly kind: string = 'FenceReleasedError';
  readonly resource: string;
  readonly token: bigint;
  readonly reason: 'client_gone' | 'hold_expired';
  constructor(resource: string, token: bigint, reason: FenceReleasedError['reason'], message: string, options?: FencekeeperErrorOptions) {
    super('FENCE_RELEASED', message, options);
    this.resource = resource;
    this.token = token;
    this.reason = reason;
  }
}

/**
 * CURRENT_LOCK was passed where a token goes, outside every withLock: there
 * is no lock to fence with. Raised before any I/O, so nothing is written
 * unfenced.
 */
export class NoCurrentLockError extends FencekeeperError {
  static override readonly kind: string = 'NoCurrentLockError';
  constructor(message = 'CURRENT_LOCK used outside withLock: no lock is held in this async context', options?: FencekeeperErrorOptions) {
    super('NO_CURRENT_LOCK', message, options);
  }
}

/** The lock a fence is bound to, as in a FenceBinding: the kind of grant, its name and the source's identity (kind and id). */
export interface BoundLock {
  readonly kind: string;
  readonly lock: string;
  readonly source: { readonly kind: string; readonly id: string };
}

/**
 * A write to a bound fence presented a token of another lock (another kind,
 * name or source) than the one the fence was bound to, or a bare token,
 * which cannot show which lock it belongs to. Nothing was written and the
 * mark did not move: tokens of different locks are not comparable.
 * `presented` is null for a bare token.
 */
export class SequencerMismatchError extends FencekeeperError {
  static override readonly kind: string = 'SequencerMismatchError';
  readonly resource: string;
  readonly bound: BoundLock;
  readonly presented: (BoundLock & { readonly token: bigint }) | null;
  constructor(resource: string, bound: BoundLock, presented: SequencerMismatchError['presented'], options?: FencekeeperErrorOptions) {
    const what = presented === null ? 'a bare token' : `a token of ${presented.kind} ${presented.lock} at ${presented.source.kind}:${presented.source.id}`;
    super('SEQUENCER_MISMATCH', `${resource} is fenced by ${bound.kind} ${bound.lock} at ${bound.source.kind}:${bound.source.id}; refused ${what}`, options);
    this.resource = resource;
    this.bound = bound;
    this.presented = presented;
  }
}

/** bindFence on a fence already bound to another lock: a binding is made once and never silently replaced. */
export class FenceAlreadyBoundError extends FencekeeperError {
  static override readonly kind: string = 'FenceAlreadyBoundError';
  readonly resource: string;
  readonly bound: BoundLock;
  constructor(resource: string, bound: BoundLock, options?: FencekeeperErrorOptions) {
    super('FENCE_ALREADY_BOUND', `${resource} is already bound to ${bound.kind} ${bound.lock} at ${bound.source.kind}:${bound.source.id}`, options);
    this.resource = resource;
    this.bound = bound;
  }
}

/**
 * A table, column or function of fencekeeper's own is missing from the
 * database the call ran on: its migrations were never applied there (or only
 * some of them, by an older version). Nothing was written. Retrying cannot
 * help: run `migrate(db)` from the adapter (or `fencekeeper migrate`) on that
 * database first. `relation` names the missing object (e.g.
 * 'fencekeeper_fences'). An object of the caller's own that is missing is
 * never reported this way: that error is passed through as the driver raised it.
 */
export class SchemaMissingError extends FencekeeperError {
  static override readonly kind: string = 'SchemaMissingError';
  /** The missing object of ours, as the database named it (a table, column or function). */
  readonly relation: string;
  constructor(relation: string, message: string, options?: FencekeeperErrorOptions) {
    super('SCHEMA_MISSING', message, { ...options, retryable: false });
    this.relation = relation;
  }
}
