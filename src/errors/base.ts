// The base of every error fencekeeper throws: the stable codes, the class
// every error extends and the one way to classify an error by code. The
// errors are the bottom of the core, imported by everything, token.ts
// included, so nothing under src/errors/ imports anything outside it (tokens
// are spelled `bigint` here: FencingToken is that type).
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
