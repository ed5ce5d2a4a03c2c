/**
 * etcd as a LockSource: the lock and election bound to one client and its
 * session, for code that takes any source.
 *
 *   const source = etcdSource(etcd, { ttlSeconds: 10 });
 *   const lock = await source.acquireLock('jobs/reindex');   // = acquireLock(etcd, 'jobs/reindex')
 *
 *   const read = await source.acquireReadLock('catalog');    // shared with other readers
 *
 * The source's one setting, the lease TTL, is the client's session's: every
 * source over one client shares its lease. Closing the session (and the
 * client) is still its owner's job: `etcdSession(etcd).close()`.
 */
import type { AcquireOptions, CampaignOptions, LockSource, LockStatus, PermitOptions, SourceIdentity, TryAcquireOptions, TryPermitOptions } from '../../index.js';
import type { EtcdClient } from './client.js';
import { campaign, type EtcdLeadership } from './election.js';
import { acquireLock, lockStatus, observeLock, tryAcquireLock, type EtcdLock, type EtcdLockObserver } from './lock.js';
import { acquirePermit, tryAcquirePermit, type EtcdPermit } from './permits.js';
import { acquireReadLock, acquireWriteLock, tryAcquireReadLock, tryAcquireWriteLock } from './rw-lock.js';
import { etcdSourceIds } from './source-id.js';
import type { EtcdQueueEntry } from './queue.js';
import { etcdSession, type EtcdSessionOptions } from './session.js';

/**
 * The etcd source: every method of LockSource, with etcd's richer results:
 * plain locks, read-write locks (a queue per name apart from the plain
 * lock's), N-permit semaphores (a fenced slot per permit), elections, status and observers, all on the client's one lease.
 */
export interface EtcdSource extends LockSource {
  readonly kind: 'etcd';
  acquireLock(name: string, options?: AcquireOptions): Promise<EtcdLock>;
  tryAcquireLock(name: string, options?: TryAcquireOptions): Promise<EtcdLock | null>;
  acquireReadLock(name: string, options?: AcquireOptions): Promise<EtcdLock>;
  tryAcquireReadLock(name: string, options?: TryAcquireOptions): Promise<EtcdLock | null>;
  acquireWriteLock(name: string, options?: AcquireOptions): Promise<EtcdLock>;
  tryAcquireWriteLock(name: string, options?: TryAcquireOptions): Promise<EtcdLock | null>;
  acquirePermit(name: string, options: PermitOptions): Promise<EtcdPermit>;
  tryAcquirePermit(name: string, options: TryPermitOptions): Promise<EtcdPermit | null>;
  campaign(name: string, options?: CampaignOptions): Promise<EtcdLeadership>;
  lockStatus(name: string): Promise<LockStatus<EtcdQueueEntry>>;
  observeLock(name: string): EtcdLockObserver;
  identity(): Promise<SourceIdentity>;
}

/** Binds the etcd recipes to one etcd3 client as a LockSource, for code that takes any token source. */
export function etcdSource(etcd: EtcdClient, options?: EtcdSessionOptions): EtcdSource {
  const session = etcdSession(etcd, options);
  return Object.freeze({
    kind: 'etcd',
    description: `etcd, one ${session.requestedTtlSeconds} s lease per client`,
    acquireLock: (name: string, o?: AcquireOptions) => acquireLock(etcd, name, o),
    tryAcquireLock: (name: string, o?: TryAcquireOptions) => tryAcquireLock(etcd, name, o),
    acquireReadLock: (name: string, o?: AcquireOptions) => acquireReadLock(etcd, name, o),
    tryAcquireReadLock: (name: string, o?: TryAcquireOptions) => tryAcquireReadLock(etcd, name, o),
    acquireWriteLock: (name: string, o?: AcquireOptions) => acquireWriteLock(etcd, name, o),
    tryAcquireWriteLock: (name: string, o?: TryAcquireOptions) => tryAcquireWriteLock(etcd, name, o),
    acquirePermit: (name: string, o: PermitOptions) => acquirePermit(etcd, name, o),
    tryAcquirePermit: (name: string, o: TryPermitOptions) => tryAcquirePermit(etcd, name, o),
    campaign: (name: string, o?: CampaignOptions) => campaign(etcd, name, o),
    lockStatus: (name: string) => lockStatus(etcd, name),
    observeLock: (name: string) => observeLock(etcd, name),
    identity: () => etcdSourceIds.of(etcd),
  });
}
