// Errors of locks, sessions and the connection to a lock service: a grant lost
// or not had in time, a session or connection gone, a server's error answer.
import { FencekeeperError, type FencekeeperErrorOptions, type ZooKeeperErrorCode } from './base.js';

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
