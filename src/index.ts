// The public surface of 'fencekeeper'. Everything a user may import is named
// here; nothing internal is re-exported wholesale.
export type { FencingToken } from './token.js';
export { parseToken, formatToken, assertToken, MAX_TOKEN } from './token.js';
export type { ErrorCode, ZooKeeperErrorCode, FencekeeperErrorOptions, LossReason } from './errors.js';
export {
  FencekeeperError,
  StaleTokenError,
  InvalidTokenError,
  InvalidArgumentError,
  LockLostError,
  LockTimeoutError,
  SessionExpiredError,
  ConnectionLossError,
  ClientClosedError,
  ProtocolError,
  UnknownOutcomeError,
  ZooKeeperError,
  LayoutMismatchError,
  RepeatedBodyError,
  CorruptFenceError,
  WorkNotCommittedError,
  CommitFailedError,
} from './errors.js';
export { FenceReleasedError } from './errors.js';
export { EffectPendingError, EffectFailedError } from './errors.js';
export { TlsError } from './errors.js';
export { QuorumError } from './errors.js';
export { AclMismatchError } from './errors.js';
export { NoCurrentLockError, SequencerMismatchError, FenceAlreadyBoundError } from './errors.js';
export type { BoundLock } from './errors.js';
export { sequencer, fenceBinding, isSequencer, matchesBinding, formatSequencer, parseSequencer, assertLockName } from './sequencer.js';
export type { Sequencer, SequencerKind, SourceIdentity, FenceBinding } from './sequencer.js';
export { SourceIdentityCache, grantSequencer } from './source-identity.js';
export { withLock, currentLock, resolveFencing, CURRENT_LOCK } from './with-lock.js';
export type { WithLockOptions, Fencing, ResolvedFencing } from './with-lock.js';
export type { FenceStore, FenceAdmission } from './fence.js';
export type { IdempotencyStore, IdempotencyScopeKey, IdempotencyClaim, IdempotencyLookup, StoredResponse } from './idempotency-store.js';

// The lock contract every token source implements
export type { Lock, Leadership, AcquireOptions, TryAcquireOptions, CampaignOptions } from './lock.js';
export type { LockSource, LockStatus, LockStatusEntry, SourceObserver } from './lock-source.js';
export { StepDownClock, safetyMargin } from './step-down.js';
export type { StepDownSource, Holding, HoldingOptions } from './step-down.js';

// ZooKeeper client
export { ZooKeeperClient, digestAclId } from './zookeeper/client.js';
export type {
  ClientState,
  ConnectOptions,
  AuthInfo,
  CreateOptions,
  WatchOptions,
  MultiOp,
  MultiResult,
} from './zookeeper/client.js';
export type { Connector } from './zookeeper/client.js';
export { tlsConnector } from './zookeeper/tls.js';
export type { TlsOptions } from './zookeeper/tls.js';
export type { ServerAddress } from './zookeeper/paths.js';
export type { Stat, ACL, Id, CreateMode } from './zookeeper/protocol.js';
export { Perms, OPEN_ACL_UNSAFE, CREATOR_ALL_ACL, READ_ACL_UNSAFE } from './zookeeper/protocol.js';
export type { WatchEvent, WatchEventType, Watcher } from './zookeeper/watches.js';

// ZooKeeper's lock and election recipes, as functions of a client or as a LockSource
export { acquireLock, tryAcquireLock, lockStatus, observeLock } from './zookeeper/recipes/lock.js';
export type { ZooKeeperLock, LockObserver } from './zookeeper/recipes/lock.js';
export { campaign, observeLeader } from './zookeeper/recipes/election.js';
export type { ZooKeeperLeadership, LeaderObserver, LeaderInfo } from './zookeeper/recipes/election.js';
export type { QueueEntry } from './zookeeper/recipes/queue.js';
export { zookeeperSource } from './zookeeper/recipes/source.js';
export { zookeeperSourceId } from './zookeeper/recipes/source-id.js';
export type { ZooKeeperSource, ZooKeeperSourceOptions } from './zookeeper/recipes/source.js';
export type { AclOption, ZooKeeperAcquireOptions, ZooKeeperTryAcquireOptions, ZooKeeperCampaignOptions } from './zookeeper/recipes/acl-options.js';

// Diagnostics: the channel names operators and instrumentations subscribe to, and their messages
export { CHANNELS, TRACING_CHANNELS, RUN_WITHIN } from './diagnostics.js';
// ... and the publishers, for the adapters and for a LockSource or FenceStore of your own
export {
  traceAcquire,
  traceRelease,
  traceCampaign,
  traceAdmit,
  traceWithFence,
  traceFencedWrite,
  traceS3Put,
  traceS3Delete,
  traceEffect,
  publishSessionState,
  publishRefused,
  publishUnknownOutcome,
} from './diagnostics.js';
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
  FenceRefusedMessage,
  UnknownOutcomeMessage,
} from './diagnostics.js';
