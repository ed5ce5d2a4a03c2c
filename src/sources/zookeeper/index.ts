/**
 * The ZooKeeper token source: a wire-protocol client of its own, fair locks
 * whose token is the holder's node czxid, leader elections, and
 * verifyWithZooKeeper for HTTP guards. Guide: docs/zookeeper.md in the
 * package.
 *
 * @module fencekeeper/zookeeper
 */
// fencekeeper/zookeeper: the ZooKeeper token source. A wire-protocol client
// of its own (no ZooKeeper package underneath), the fair lock and leader
// election recipes over it, as functions of a client or as a LockSource,
// and the HTTP verify that admits only the current holder's token.
// ZooKeeper client
export { ZooKeeperClient, digestAclId } from './client.js';
export type {
  ClientState,
  ConnectOptions,
  AuthInfo,
  CreateOptions,
  WatchOptions,
  MultiOp,
  MultiResult,
} from './client.js';
export type { Connector } from './client.js';
export { tlsConnector } from './tls.js';
// The default connector (plain TCP), for a Connector that wraps it.
export { connectTcp as tcpConnector } from './connection.js';
export type { TlsOptions } from './tls.js';
export type { ServerAddress } from './paths.js';
export type { Stat, ACL, Id, CreateMode } from './protocol.js';
export { Perms, OPEN_ACL_UNSAFE, CREATOR_ALL_ACL, READ_ACL_UNSAFE } from './protocol.js';
export type { WatchEvent, WatchEventType, Watcher } from './watches.js';
export type { ChildListing } from './child-listing.js';

// ZooKeeper's lock and election recipes, as functions of a client or as a LockSource
export { acquireLock, tryAcquireLock, lockStatus, observeLock } from './recipes/lock.js';
export type { ZooKeeperLock, ZooKeeperLockObserver } from './recipes/lock.js';
export { acquireReadLock, tryAcquireReadLock, acquireWriteLock, tryAcquireWriteLock } from './recipes/rw-lock.js';
export { acquirePermit, tryAcquirePermit } from './recipes/permit.js';
export type { ZooKeeperPermit } from './recipes/permit.js';
export { campaign, observeLeader } from './recipes/election.js';
export type { ZooKeeperLeadership, LeaderObserver, LeaderInfo } from './recipes/election.js';
export type { QueueEntry } from './recipes/queue.js';
export { zookeeperSource } from './recipes/source.js';
export { queuePath } from './recipes/queue-path.js';
export { zookeeperSourceId } from './recipes/source-id.js';
export type { ZooKeeperSource, ZooKeeperSourceOptions } from './recipes/source.js';
export type {
  AclOption,
  ZooKeeperAcquireOptions,
  ZooKeeperTryAcquireOptions,
  ZooKeeperCampaignOptions,
  ZooKeeperRwAcquireOptions,
  ZooKeeperRwTryAcquireOptions,
  ZooKeeperPermitOptions,
  ZooKeeperTryPermitOptions,
} from './recipes/acl-options.js';

// Chubby's CheckSequencer for a resource: admit only the current holder's token
export { verifyWithZooKeeper } from './recipes/verify.js';
export type { ZooKeeperVerifier, VerifyWithZooKeeperOptions } from './recipes/verify.js';
