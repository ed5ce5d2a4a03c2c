// The public surface of 'fencekeeper'. Everything a user may import is named
// here; nothing internal is re-exported wholesale.
export type { FencingToken } from './token.js';
export { parseToken, formatToken, assertToken, MAX_TOKEN } from './token.js';
export type { ErrorCode, ZooKeeperErrorCode, FencekeeperErrorOptions } from './errors.js';
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
  WorkNotCommittedError,
  CommitFailedError,
} from './errors.js';
export type { FenceStore, FenceAdmission } from './fence.js';

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
export type { Stat, ACL, Id, CreateMode } from './zookeeper/protocol.js';
export { Perms, OPEN_ACL_UNSAFE, CREATOR_ALL_ACL, READ_ACL_UNSAFE } from './zookeeper/protocol.js';
export type { WatchEvent, WatchEventType, Watcher } from './zookeeper/watches.js';

// Lock and election
export { acquireLock, tryAcquireLock, lockStatus, observeLock, LockObserver } from './lock.js';
export type { Lock, AcquireOptions, LockHolder, QueueEntryInfo } from './lock.js';
export { campaign, observeLeader, LeaderObserver } from './election.js';
export type { Leadership, CampaignOptions, LeaderInfo } from './election.js';
