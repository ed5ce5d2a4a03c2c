/**
 * Stable error codes. Callers classify errors by `code` (or instanceof), never
 * by message text. ZooKeeper server errors carry 'ZK_*' codes; the raw number
 * from the reply header is kept in `ZooKeeperError.zkCode`.
 */
export type ErrorCode =
  | 'STALE_TOKEN'
  | 'INVALID_TOKEN'
  | 'INVALID_ARGUMENT'
  | 'LOCK_LOST'
  | 'LOCK_TIMEOUT'
  | 'SESSION_EXPIRED'
  | 'CONNECTION_LOSS'
  | 'CLOSED'
  | 'PROTOCOL'
  | 'UNKNOWN_OUTCOME'
  | 'LAYOUT_MISMATCH'
  | 'REPEATED_BODY'
  | 'CORRUPT_FENCE'
  | 'WORK_NOT_COMMITTED'
  | 'COMMIT_FAILED'
  | 'FENCE_RELEASED'
  | 'SERVER_NOT_INSTALLED'
  | 'SERVER_START_FAILED'
  | 'EFFECT_FAILED'
  | 'TLS_FAILED'
  | 'NO_QUORUM'
  // A PostgreSQL source's LISTEN did not hear its own NOTIFY (a transaction-pooling proxy such as PgBouncer in between).
  | 'LISTEN_UNAVAILABLE'
  | 'ACL_MISMATCH'
  | 'NO_CURRENT_LOCK'
  | 'SEQUENCER_MISMATCH'
  | 'FENCE_ALREADY_BOUND'
  // A read lock's scope re-entered as a write lock of the same name: take the write lock first.
  | 'LOCK_UPGRADE'
  // Inside a lock scope, a name that sorts before one already held was asked for: take every name at once (withLocks).
  | 'LOCK_ORDER'
  // CURRENT_LOCK (or currentLock()) inside withLocks, which holds several: name the lock (currentLock(name)).
  | 'AMBIGUOUS_LOCK'
  // acquirePermit with another `permits` than the holders and waiters of that name use.
  | 'PERMITS_MISMATCH'
  // A fence table is missing from the database: run the adapter's migrate().
  | 'SCHEMA_MISSING'
  // A locking read found a row changed after the transaction's snapshot (MySQL/MariaDB error 1020): retry the transaction.
  | 'SNAPSHOT_CONFLICT'
  | ZooKeeperErrorCode;

/**
 * The codes of ZooKeeperError: the ZooKeeper server's own error names,
 * prefixed `ZK_` (e.g. `ZK_NONODE`, `ZK_NOAUTH`).
 */
export type ZooKeeperErrorCode =
  | 'ZK_SYSTEMERROR' | 'ZK_RUNTIMEINCONSISTENCY' | 'ZK_DATAINCONSISTENCY'
  | 'ZK_CONNECTIONLOSS' | 'ZK_MARSHALLINGERROR' | 'ZK_UNIMPLEMENTED'
  | 'ZK_OPERATIONTIMEOUT' | 'ZK_BADARGUMENTS' | 'ZK_NEWCONFIGNOQUORUM'
  | 'ZK_RECONFIGINPROGRESS' | 'ZK_UNKNOWNSESSION' | 'ZK_APIERROR' | 'ZK_NONODE'
  | 'ZK_NOAUTH' | 'ZK_BADVERSION' | 'ZK_NOCHILDRENFOREPHEMERALS' | 'ZK_NODEEXISTS'
  | 'ZK_NOTEMPTY' | 'ZK_SESSIONEXPIRED' | 'ZK_INVALIDCALLBACK' | 'ZK_INVALIDACL'
  | 'ZK_AUTHFAILED' | 'ZK_SESSIONMOVED' | 'ZK_NOTREADONLY' | 'ZK_EPHEMERALONLOCALSESSION'
  | 'ZK_NOWATCHER' | 'ZK_REQUESTTIMEOUT' | 'ZK_RECONFIGDISABLED' | 'ZK_SESSIONCLOSEDREQUIRESASLAUTH'
  | 'ZK_QUOTAEXCEEDED' | 'ZK_THROTTLEDOP' | 'ZK_UNKNOWN';

// instanceof must hold across two copies of this package in one process (an
// app and a library each depending on fencekeeper): each instance carries the
// kinds of its class chain under a registry-wide symbol, and Symbol.hasInstance
// checks that list instead of the prototype chain.
const KINDS = Symbol.for('fencekeeper.error.kinds');

interface Branded { readonly [KINDS]?: readonly string[] }

/**
 * What every FencekeeperError constructor takes besides its message: the
 * underlying `cause`, and whether the same call may succeed if tried again.
 */
export interface FencekeeperErrorOptions {
  readonly cause?: unknown;
  readonly retryable?: boolean;
}

/**
 * The base class of every error fencekeeper throws. Classify by `code` (a
 * stable string, see ErrorCode) or by subclass with `instanceof`, never by
 * the message; `retryable` says whether the same call may simply be tried again.
 */
export class FencekeeperError extends Error {
  static readonly kind: string = 'FencekeeperError';
  override readonly name: string;
  readonly code: ErrorCode;
  /** True when the same call may succeed if simply tried again. */
  readonly retryable: boolean;
  declare readonly [KINDS]: readonly string[];

  constructor(code: ErrorCode, message: string, options: FencekeeperErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? false;
    const kinds: string[] = [];
    // Walk the constructor chain up to Error; a user's subclass without its
    // own `kind` still inherits every kind above it.
    for (let c: unknown = new.target; typeof c === 'function' && c !== Error; c = Object.getPrototypeOf(c)) {
      if (Object.hasOwn(c, 'kind')) kinds.push((c as unknown as { kind: string }).kind);
    }
    Object.defineProperty(this, KINDS, { value: Object.freeze(kinds), enumerable: false });
    this.name = kinds[0] ?? 'FencekeeperError';
  }

  /**
   * `error instanceof StaleTokenError` (or any class of ours) holds for an
   * error thrown by another copy of this package in the same process too: it
   * compares the kinds the error carries, not its prototype chain.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (typeof value !== 'object' || value === null) return false;
    // A user's subclass that declares no kind of its own cannot be told apart
    // by kinds (it would inherit its parent's): fall back to the prototype chain.
    if (!Object.hasOwn(this, 'kind')) return Function.prototype[Symbol.hasInstance].call(this, value);
    const kinds = (value as Branded)[KINDS];
    return Array.isArray(kinds) && kinds.includes((this as unknown as { kind: string }).kind);
  }
}

/**
 * True when `error` is one of ours with this code ('ZK_NONODE',
 * 'CONNECTION_LOSS', ...): the one way the library classifies an error, by its
 * stable code and never by its message.
 */
export function isCode(error: unknown, code: ErrorCode): error is FencekeeperError {
  return error instanceof FencekeeperError && error.code === code;
}

// Tokens are spelled `bigint` in this file (FencingToken is that type): the
// errors are the bottom of the core, imported by everything, token.ts included,
// so they import nothing themselves.

// ---- Tokens and arguments: what a caller passed ----

/** Text that is not a token: not a decimal integer in 1..2^63-1. */
export class InvalidTokenError extends FencekeeperError {
  static override readonly kind: string = 'InvalidTokenError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('INVALID_TOKEN', message, options); }
}

/** A caller passed something unusable (a bad path, a bad option, a bad identifier). */
export class InvalidArgumentError extends FencekeeperError {
  static override readonly kind: string = 'InvalidArgumentError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('INVALID_ARGUMENT', message, options); }
}

// ---- Locks, sessions and the connection to a lock service ----

/**
 * Why a lock or a leadership ended, whatever source granted it:
 *   released         the holder released it (or resigned)
 *   deadline         the step-down deadline passed: no renewal (heartbeat, keepalive,
 *                    TTL extension) was acknowledged in time, so the source may end
 *                    the grant at any moment, if it has not already
 *   session_expired  the session or lease that carried the grant ended on the server
 *                    (a ZooKeeper session expired, an etcd lease expired or was revoked)
 *   node_deleted     the grant's record was deleted by someone else (our znode or key)
 *   renewal_failed   the source refused a renewal: it no longer holds our grant (a
 *                    Redis key that expired or carries another holder's value, a
 *                    Redlock extension that reached no majority)
 *   closed           the client behind the grant was closed by its owner
 */
export type LossReason = 'released' | 'deadline' | 'session_expired' | 'node_deleted' | 'renewal_failed' | 'closed';

/** The lock (or leadership) can no longer be assumed held: stop writing. */
export class LockLostError extends FencekeeperError {
  static override readonly kind: string = 'LockLostError';
  readonly lock: string;
  readonly reason: LossReason;
  constructor(lock: string, reason: LossReason, message?: string, options?: FencekeeperErrorOptions) {
    super('LOCK_LOST', message ?? `lock ${lock} lost (${reason})`, options);
    this.lock = lock;
    this.reason = reason;
  }
}

/**
 * A scoped read lock (withReadLock) was re-entered as a write lock of the
 * same source and name. Upgrading in place would wait for our own read grant
 * (and two upgrading readers would wait for each other forever), so it is
 * refused before any request: take the write lock in the outer scope
 * (withWriteLock), which nested read scopes then share.
 */
export class LockUpgradeError extends FencekeeperError {
  static override readonly kind: string = 'LockUpgradeError';
  readonly lock: string;
  constructor(lock: string, options?: FencekeeperErrorOptions) {
    super('LOCK_UPGRADE', `lock ${lock}: a read lock's scope cannot take the write lock of the same name (it would wait for itself); take the write lock in the outer scope`, options);
    this.lock = lock;
  }
}

/**
 * Inside a lock scope (withLock, withLocks, withReadLock, withWriteLock),
 * a lock of the same source was asked for whose name sorts before one the
 * scope already holds. Two callers taking the same names in different orders
 * can wait for each other forever, so names are taken in JavaScript string
 * order only; refused before any request. Take every name you need at once
 * (withLocks / acquireLocks, which sort them), or nest in ascending order.
 */
export class LockOrderError extends FencekeeperError {
  static override readonly kind: string = 'LockOrderError';
  /** The name asked for. */
  readonly lock: string;
  /** The name the scope holds that sorts after it. */
  readonly held: string;
  constructor(lock: string, held: string, message?: string, options?: FencekeeperErrorOptions) {
    super('LOCK_ORDER', message ?? `lock ${lock} asked for inside the scope of ${held}, which sorts after it: take locks in name order (withLocks takes several at once, sorted) so two callers never wait for each other`, options);
    this.lock = lock;
    this.held = held;
  }
}

/**
 * CURRENT_LOCK (or currentLock() without a name) was used inside withLocks,
 * whose scope holds several locks: which one fences the write is not known.
 * Raised before any I/O. Name the lock: pass `currentLock(name)`'s sequencer
 * (or the MultiLock's lock) where the token goes.
 */
export class AmbiguousLockError extends FencekeeperError {
  static override readonly kind: string = 'AmbiguousLockError';
  /** The names the scope holds. */
  readonly locks: readonly string[];
  constructor(locks: readonly string[], options?: FencekeeperErrorOptions) {
    super('AMBIGUOUS_LOCK', `CURRENT_LOCK is ambiguous inside withLocks (${locks.join(', ')}): pass currentLock(name)'s sequencer instead`, options);
    this.locks = Object.freeze([...locks]);
  }
}

/**
 * acquirePermit / tryAcquirePermit asked for a semaphore with another
 * number of permits than the holders and waiters of that name use. Two
 * sizes of one semaphore would let more holders in than either allows, so it
 * is refused, leaving nothing behind. Use one `permits` per name (a constant
 * next to the name), or a new name for a new size.
 */
export class PermitsMismatchError extends FencekeeperError {
  static override readonly kind: string = 'PermitsMismatchError';
  readonly lock: string;
  /** What this call asked for. */
  readonly permits: number;
  /** What the name's holders and waiters use. */
  readonly inUse: number;
  constructor(lock: string, permits: number, inUse: number, options?: FencekeeperErrorOptions) {
    super('PERMITS_MISMATCH', `semaphore ${lock} is in use with permits ${inUse}; asked for permits ${permits}`, options);
    this.lock = lock;
    this.permits = permits;
    this.inUse = inUse;
  }
}

/**
 * The lock was not acquired within `timeoutMs` (someone else holds it);
 * nothing is left queued. Retryable: try again later or wait longer.
 */
export class LockTimeoutError extends FencekeeperError {
  static override readonly kind: string = 'LockTimeoutError';
  readonly lock: string;
  readonly timeoutMs: number;
  constructor(lock: string, timeoutMs: number, options?: FencekeeperErrorOptions) {
    super('LOCK_TIMEOUT', `lock ${lock} not acquired within ${timeoutMs} ms`, { retryable: true, ...options });
    this.lock = lock;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The client's session (a ZooKeeper session, an etcd lease) ended on the
 * server: every grant on it is gone and every later call of that client fails
 * this way. Not retryable: make a new client and acquire again.
 */
export class SessionExpiredError extends FencekeeperError {
  static override readonly kind: string = 'SessionExpiredError';
  constructor(message = 'ZooKeeper session expired', options?: FencekeeperErrorOptions) {
    super('SESSION_EXPIRED', message, options);
  }
}

/**
 * The connection dropped with the request in flight: it may or may not have
 * been applied. Retryable for reads; a caller retrying a write must check.
 */
export class ConnectionLossError extends FencekeeperError {
  static override readonly kind: string = 'ConnectionLossError';
  constructor(message = 'connection to ZooKeeper lost', options?: FencekeeperErrorOptions) {
    super('CONNECTION_LOSS', message, { retryable: true, ...options });
  }
}

/**
 * TLS to the server failed in a way no retry can change: its certificate does
 * not verify (wrong CA, wrong host name, expired), or it does not speak TLS.
 * The client stops at once instead of trying until its connect timeout.
 */
export class TlsError extends FencekeeperError {
  static override readonly kind: string = 'TlsError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('TLS_FAILED', message, { ...options, retryable: false }); }
}

/**
 * Fewer than a majority of a Redlock set's nodes answered: the set can
 * neither grant nor refuse the lock. Nothing is left behind on the nodes
 * that did answer. Retryable: the nodes may come back.
 */
export class QuorumError extends FencekeeperError {
  static override readonly kind: string = 'QuorumError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('NO_QUORUM', message, { retryable: true, ...options }); }
}

/**
 * A PostgreSQL source LISTENed on its session's channel and did not hear the
 * NOTIFY it sent there itself: the connection does not deliver
 * notifications, as through PgBouncer in transaction or statement pooling
 * mode (a LISTEN runs on whichever server connection the statement got, and
 * notifications follow that connection, not the client). The source's
 * waiters are woken by NOTIFY, so it refuses to run without it: connect the
 * source's pool to PostgreSQL directly, or through PgBouncer in session
 * pooling mode. Not retryable: the path does not change by itself.
 */
export class ListenUnavailableError extends FencekeeperError {
  static override readonly kind: string = 'ListenUnavailableError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('LISTEN_UNAVAILABLE', message, { ...options, retryable: false }); }
}

/** The client was closed by its owner; nothing more will be sent. */
export class ClientClosedError extends FencekeeperError {
  static override readonly kind: string = 'ClientClosedError';
  constructor(message = 'client closed', options?: FencekeeperErrorOptions) { super('CLOSED', message, options); }
}

/** The peer sent bytes that break the protocol (a frame too large, an xid out of order). */
export class ProtocolError extends FencekeeperError {
  static override readonly kind: string = 'ProtocolError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('PROTOCOL', message, options); }
}

/** An error answer from the ZooKeeper server, by its reply-header error number. */
export class ZooKeeperError extends FencekeeperError {
  static override readonly kind: string = 'ZooKeeperError';
  /** The raw error number from the reply header (e.g. -101 for NONODE). */
  readonly zkCode: number;
  readonly path: string | undefined;
  /** For a failed multi: the index of the operation that failed (the others were rolled back). */
  readonly opIndex: number | undefined;
  constructor(
    code: ZooKeeperErrorCode,
    zkCode: number,
    path: string | undefined,
    options?: FencekeeperErrorOptions & { readonly opIndex?: number },
  ) {
    const where = path === undefined ? '' : ` at ${path}`;
    const op = options?.opIndex === undefined ? '' : ` (multi op ${options.opIndex})`;
    super(code, `ZooKeeper error ${code} (${zkCode})${where}${op}`, options);
    this.zkCode = zkCode;
    this.path = path;
    this.opIndex = options?.opIndex;
  }
}

/**
 * A lock's (or election's) container exists with an ACL other than the one
 * the acquire asked for: someone else made it (or re-made it after the
 * reaper removed ours). Queueing under it would leave the lock to whoever
 * that ACL admits, so nothing was queued.
 */
export class AclMismatchError extends FencekeeperError {
  static override readonly kind: string = 'AclMismatchError';
  /** The container's path. */
  readonly path: string;
  readonly expected: readonly { readonly perms: number; readonly id: { readonly scheme: string; readonly id: string } }[];
  readonly found: readonly { readonly perms: number; readonly id: { readonly scheme: string; readonly id: string } }[];
  constructor(
    path: string,
    expected: AclMismatchError['expected'],
    found: AclMismatchError['found'],
    message: string,
    options?: FencekeeperErrorOptions,
  ) {
    super('ACL_MISMATCH', message, options);
    this.path = path;
    this.expected = expected;
    this.found = found;
  }
}

// ---- Fences and sequencers: a write refused where the resource lives ----

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

// ---- The schema a fence keeps its marks in (PostgreSQL) ----

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

// ---- Writes whose outcome or commit is in doubt (PostgreSQL, S3) ----

/** A write whose outcome cannot be known (a 5xx after a conditional PUT that a read-back could not settle). */
export class UnknownOutcomeError extends FencekeeperError {
  static override readonly kind: string = 'UnknownOutcomeError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('UNKNOWN_OUTCOME', message, { retryable: true, ...options }); }
}

/**
 * The fenced work returned, but its writes did not commit: a statement in its
 * transaction failed and the work caught the error (PostgreSQL then answers
 * COMMIT with ROLLBACK), or a deferred constraint failed. The fence advance
 * was committed on its own, so the mark does not go back below `token`.
 */
export class WorkNotCommittedError extends FencekeeperError {
  static override readonly kind: string = 'WorkNotCommittedError';
  readonly resource: string;
  readonly token: bigint;
  constructor(resource: string, token: bigint, options?: FencekeeperErrorOptions) {
    super('WORK_NOT_COMMITTED', `the writes fenced on ${resource} with token ${token} did not commit${causeText(options)}; the fence advance did`, options);
    this.resource = resource;
    this.token = token;
  }
}

/**
 * The transaction holding the fence advance did not reach a confirmed COMMIT:
 * COMMIT itself failed (a serialization failure), the connection was lost, or
 * the work ended the transaction itself. The advance went with it and was
 * applied again at once in a transaction of its own; `restored` says whether
 * that worked (false: the mark may stay below `token` until a holder presents
 * a token at least as large). The work's writes did not commit, except that a
 * connection lost during COMMIT leaves them unknown. Retryable when PostgreSQL
 * reported a serialization failure or a deadlock and the advance was restored.
 */
export class CommitFailedError extends FencekeeperError {
  static override readonly kind: string = 'CommitFailedError';
  readonly resource: string;
  readonly token: bigint;
  readonly restored: boolean;
  constructor(resource: string, token: bigint, restored: boolean, options?: FencekeeperErrorOptions) {
    const advance = restored ? 'the fence advance was applied again on its own' : 'the fence advance could not be applied again';
    super('COMMIT_FAILED', `the transaction fenced on ${resource} with token ${token} did not commit${causeText(options)}; ${advance}`, options);
    this.resource = resource;
    this.token = token;
    this.restored = restored;
  }
}

function causeText(options: FencekeeperErrorOptions | undefined): string {
  const message = (options?.cause as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' && message.length > 0 ? ` (${message})` : '';
}

/**
 * A fenced write of one storage layout met a resource kept in another (an S3
 * key written in place, written through a pointer, or a pointer's data
 * object). Nothing was written: a key's writers and readers rely on one
 * layout, so a key changes layout only by a deliberate migration.
 */
export class LayoutMismatchError extends FencekeeperError {
  static override readonly kind: string = 'LayoutMismatchError';
  readonly resource: string;
  /** The layout the write asked for. */
  readonly expected: string;
  /** The layout the resource is kept in. */
  readonly found: string;
  constructor(resource: string, expected: string, found: string, message: string, options?: FencekeeperErrorOptions) {
    super('LAYOUT_MISMATCH', message, options);
    this.resource = resource;
    this.expected = expected;
    this.found = found;
  }
}

/**
 * An in-place conditional write whose body is byte for byte the object's
 * current body. The object's ETag would not change, so a paused holder that
 * read the object earlier could still pass its own condition and put its
 * older token back. Nothing was written.
 */
export class RepeatedBodyError extends FencekeeperError {
  static override readonly kind: string = 'RepeatedBodyError';
  readonly resource: string;
  constructor(resource: string, message: string, options?: FencekeeperErrorOptions) {
    super('REPEATED_BODY', message, options);
    this.resource = resource;
  }
}

// ---- Side effects through withEffect ----

/**
 * An outside effect (withEffect) whose outcome is not known: its intent was
 * recorded as pending, and nothing recorded since says whether it happened.
 * An earlier holder may have paused or died between recording the intent and
 * recording the outcome, and its call may even still be on its way. Retrying
 * the call cannot settle it; reconciling with the outside system can
 * (`retryable` is true only when the call that failed had a reconcile to run
 * on the next attempt). `token` is the one that recorded the pending intent;
 * `deadline` the wall-clock instant after which that call can no longer land
 * (null: none was given, so a "did not happen" can never be trusted).
 */
export class EffectPendingError extends UnknownOutcomeError {
  static override readonly kind: string = 'EffectPendingError';
  readonly resource: string;
  readonly key: string;
  readonly idempotencyKey: string;
  readonly attempt: number;
  readonly token: bigint;
  readonly deadline: Date | null;
  constructor(
    effect: { readonly resource: string; readonly key: string; readonly idempotencyKey: string; readonly attempt: number; readonly token: bigint; readonly deadline: Date | null },
    message: string,
    options?: FencekeeperErrorOptions,
  ) {
    super(message, { retryable: false, ...options });
    this.resource = effect.resource;
    this.key = effect.key;
    this.idempotencyKey = effect.idempotencyKey;
    this.attempt = effect.attempt;
    this.token = effect.token;
    this.deadline = effect.deadline;
  }
}

/**
 * An outside effect (withEffect) that definitely failed, as recorded: the
 * effect (or its reconcile) said the outside system refused it and did
 * nothing. Recorded failures are not run again unless the caller asks
 * (`retryFailed`), and then under a fresh idempotency key. `details` is the
 * JSON value recorded with the failure, if any.
 */
export class EffectFailedError extends FencekeeperError {
  static override readonly kind: string = 'EffectFailedError';
  readonly resource: string;
  readonly key: string;
  readonly idempotencyKey: string;
  readonly attempt: number;
  readonly details: unknown;
  constructor(
    effect: { readonly resource: string; readonly key: string; readonly idempotencyKey: string; readonly attempt: number },
    failure: { readonly message: string; readonly details?: unknown },
    options?: FencekeeperErrorOptions,
  ) {
    super('EFFECT_FAILED', `the effect ${effect.key} on ${effect.resource} (attempt ${effect.attempt}) failed: ${failure.message}`, options);
    this.resource = effect.resource;
    this.key = effect.key;
    this.idempotencyKey = effect.idempotencyKey;
    this.attempt = effect.attempt;
    this.details = failure.details;
  }
}

// ---- fencekeeper/testing: the servers it starts ----

/**
 * fencekeeper/testing: a throwaway server cannot start because its program
 * is not on this machine. `missing` names what was looked for (a path, a
 * command), `install` what provides it.
 */
export class ServerNotInstalledError extends FencekeeperError {
  static override readonly kind: string = 'ServerNotInstalledError';
  readonly missing: string;
  readonly install: string;
  constructor(missing: string, install: string, message: string, options?: FencekeeperErrorOptions) {
    super('SERVER_NOT_INSTALLED', message, options);
    this.missing = missing;
    this.install = install;
  }
}

/**
 * fencekeeper/testing: a throwaway server exited or did not become ready in
 * time. `log` holds the last lines it wrote.
 */
export class ServerStartError extends FencekeeperError {
  static override readonly kind: string = 'ServerStartError';
  readonly log: string;
  constructor(message: string, log: string, options?: FencekeeperErrorOptions) {
    super('SERVER_START_FAILED', message, options);
    this.log = log;
  }
}
