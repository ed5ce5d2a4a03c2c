/**
 * The core: fencing tokens, errors with stable codes, the lock and fence
 * contracts, sequencers, withLock and CURRENT_LOCK, and the diagnostics
 * channel names. Guide: docs/core.md in the package.
 *
 * @module fencekeeper
 */
// The public surface of 'fencekeeper': what an application uses. Everything
// a user may import is named here; nothing internal is re-exported
// wholesale. What someone writing a source, a store or an instrumentation
// needs besides is 'fencekeeper/extend' (./extend.ts); each token source and
// each enforcement adapter has an entry of its own.
export type { FencingToken } from './token.js';
export { parseToken, formatToken, assertToken, MAX_TOKEN } from './token.js';
// Errors: one base class with stable codes, grouped as in ./errors.ts
export type { ErrorCode, ZooKeeperErrorCode, FencekeeperErrorOptions, LossReason, BoundLock } from './errors.js';
export {
  FencekeeperError,
  // tokens and arguments
  InvalidTokenError,
  InvalidArgumentError,
  // locks, sessions and the connection to a lock service
  LockLostError,
  LockTimeoutError,
  LockUpgradeError,
  LockOrderError,
  AmbiguousLockError,
  PermitsMismatchError,
  SessionExpiredError,
  ConnectionLossError,
  TlsError,
  QuorumError,
  ListenUnavailableError,
  ClientClosedError,
  ProtocolError,
  ZooKeeperError,
  AclMismatchError,
  // fences and sequencers
  StaleTokenError,
  CorruptFenceError,
  FenceReleasedError,
  NoCurrentLockError,
  SequencerMismatchError,
  FenceAlreadyBoundError,
  // the schema a fence keeps its marks in
  SchemaMissingError,
  // writes whose outcome or commit is in doubt
  UnknownOutcomeError,
  WorkNotCommittedError,
  CommitFailedError,
  LayoutMismatchError,
  RepeatedBodyError,
  // side effects
  EffectPendingError,
  EffectFailedError,
} from './errors.js';
export { sequencer, fenceBinding, isSequencer, matchesBinding, formatSequencer, parseSequencer, parseFencing, SEQUENCER_FORMAT } from './sequencer.js';
export type { Sequencer, SequencerKind, SourceIdentity, FenceBinding } from './sequencer.js';
export { withLock, withReadLock, withWriteLock, currentLock, resolveFencing, CURRENT_LOCK } from './with-lock.js';
export type { ScopedFn } from './with-lock.js';
export type { WithLockOptions, Fencing, FencingGrant, ResolvedFencing } from './with-lock.js';
export { acquireLocks, withLocks } from './multi-lock.js';
export type { MultiLock, AcquireLocksOptions } from './multi-lock.js';
export type { FenceStore, FenceAdmission } from './fence.js';
export type { FenceMode } from './fence-mode.js';
export type { IdempotencyStore, IdempotencyScopeKey, IdempotencyClaim, IdempotencyLookup, StoredResponse } from './idempotency-store.js';

// The lock contract every token source implements
export type { Lock, Leadership, AcquireOptions, TryAcquireOptions, CampaignOptions, Permit, PermitOptions, TryPermitOptions } from './lock.js';
export type { LockSource, LockStatus, LockStatusEntry, SourceObserver, LockObserver } from './lock-source.js';

// Diagnostics: the channel names operators and instrumentations subscribe to, and their messages
export { CHANNELS, TRACING_CHANNELS, RUN_WITHIN } from './diagnostics.js';
// ... and the messages they carry, for a subscriber of your own
export type {
  TraceContext,
  AcquireTraceContext,
  ReleaseTraceContext,
  CampaignTraceContext,
  FenceTraceContext,
  FenceWriteTraceContext,
  S3WriteTraceContext,
  EffectTraceContext,
  LockHeldMessage,
  LockEndedMessage,
  SessionStateMessage,
  SourceActivityMessage,
  FenceRefusedMessage,
  UnknownOutcomeMessage,
} from './diagnostics.js';
