/**
 * The etcd token source over your etcd3 client: fair locks, read-write locks, semaphores and elections whose
 * token is the create revision of the holder's key, one lease per client.
 * Guide: docs/etcd.md in the package.
 *
 * @module fencekeeper/etcd
 */
// fencekeeper/etcd: a fair lock, a read-write lock, a semaphore and leader election over etcd, whose token
// is the create revision of the holder's key. Every entry point takes an
// etcd3 client (a structural interface: etcd3 is an optional peer
// dependency of this entry only, never imported here). One lease per
// client carries every grant of the process (etcdSession).
export { acquireLock, tryAcquireLock, lockStatus, observeLock } from './lock.js';
export type { EtcdLock, EtcdLockObserver } from './lock.js';
export { acquireReadLock, tryAcquireReadLock, acquireWriteLock, tryAcquireWriteLock, rwLockStatus } from './rw-lock.js';
export type { EtcdRwQueueEntry } from './rw-lock.js';
export { acquirePermit, tryAcquirePermit } from './permits.js';
export type { EtcdPermit } from './permits.js';
export { campaign, observeLeader } from './election.js';
export type { EtcdLeadership, EtcdLeaderObserver, EtcdLeaderInfo } from './election.js';
export { etcdSource } from './source.js';
export type { EtcdSource } from './source.js';
export { etcdSession, EtcdSession } from './session.js';
export type { EtcdSessionOptions } from './session.js';
export type { EtcdQueueEntry } from './queue.js';
export type { EtcdClient, EtcdRequestOp, EtcdTxnResponse } from './client.js';
