/**
 * ZooKeeper as a LockSource: the lock and election recipes bound to one
 * client, for code that takes any source.
 *
 *   const source = zookeeperSource(zk);
 *   const lock = await source.acquireLock('jobs/reindex');   // = acquireLock(zk, 'jobs/reindex')
 *
 * Each method is the function of the same name with `zk` filled in; the
 * source holds no state of its own (two sources over one client share its
 * session, its holdings and their step-down clock). Closing the client is
 * still its owner's job.
 */
import { InvalidArgumentError } from '../../../errors.js';
import type { LockSource, LockStatus } from '../../../lock-source.js';
import { ZooKeeperClient } from '../client.js';
import { campaign, type ZooKeeperLeadership } from './election.js';
import { acquireLock, lockStatus, observeLock, tryAcquireLock, type ZooKeeperLock, type ZooKeeperLockObserver } from './lock.js';
import { zookeeperSourceId } from './source-id.js';
import type { SourceIdentity } from '../../../sequencer.js';
import type { QueueEntry } from './queue.js';
import { validateAcl } from '../requests.js';
import type {
  AclOption,
  ZooKeeperAcquireOptions,
  ZooKeeperCampaignOptions,
  ZooKeeperPermitOptions,
  ZooKeeperRwAcquireOptions,
  ZooKeeperRwTryAcquireOptions,
  ZooKeeperTryAcquireOptions,
  ZooKeeperTryPermitOptions,
} from './acl-options.js';
import { acquirePermit, tryAcquirePermit, type ZooKeeperPermit } from './permit.js';
import { acquireReadLock, acquireWriteLock, tryAcquireReadLock, tryAcquireWriteLock } from './rw-lock.js';

/**
 * The ZooKeeper source: every method of LockSource (plain, read and write
 * locks, permits, elections, status, observers), with ZooKeeper's richer results.
 */
export interface ZooKeeperSource extends LockSource {
  readonly kind: 'zookeeper';
  acquireLock(name: string, options?: ZooKeeperAcquireOptions): Promise<ZooKeeperLock>;
  tryAcquireLock(name: string, options?: ZooKeeperTryAcquireOptions): Promise<ZooKeeperLock | null>;
  acquireReadLock(name: string, options?: ZooKeeperRwAcquireOptions): Promise<ZooKeeperLock>;
  tryAcquireReadLock(name: string, options?: ZooKeeperRwTryAcquireOptions): Promise<ZooKeeperLock | null>;
  acquireWriteLock(name: string, options?: ZooKeeperRwAcquireOptions): Promise<ZooKeeperLock>;
  tryAcquireWriteLock(name: string, options?: ZooKeeperRwTryAcquireOptions): Promise<ZooKeeperLock | null>;
  acquirePermit(name: string, options: ZooKeeperPermitOptions): Promise<ZooKeeperPermit>;
  tryAcquirePermit(name: string, options: ZooKeeperTryPermitOptions): Promise<ZooKeeperPermit | null>;
  campaign(name: string, options?: ZooKeeperCampaignOptions): Promise<ZooKeeperLeadership>;
  lockStatus(name: string): Promise<LockStatus<QueueEntry>>;
  observeLock(name: string): ZooKeeperLockObserver;
  identity(): Promise<SourceIdentity>;
}

/** `acl`: the ACL of every lock and election taken through this source that names none (before the client's defaultAcl). */
export type ZooKeeperSourceOptions = AclOption;

/** Binds the ZooKeeper recipes to one client as a LockSource, for code that takes any token source. */
export function zookeeperSource(zk: ZooKeeperClient, sourceOptions: ZooKeeperSourceOptions = {}): ZooKeeperSource {
  if (!(zk instanceof ZooKeeperClient)) throw new InvalidArgumentError('zookeeperSource needs a ZooKeeperClient');
  if (sourceOptions === null || typeof sourceOptions !== 'object') throw new InvalidArgumentError('zookeeperSource options must be an object');
  const acl = sourceOptions.acl;
  if (acl !== undefined) validateAcl(acl, 'acl');
  // Only when the source has an ACL does it touch the options: without one each call passes them on as they are.
  const withAcl = <O extends AclOption>(options: O | undefined): O | undefined =>
    acl === undefined || options?.acl !== undefined ? options : { ...(options as O), acl };
  const chroot = zk.chroot === '' ? '' : `, chroot ${zk.chroot}`;
  return Object.freeze({
    kind: 'zookeeper',
    description: `ZooKeeper session 0x${zk.sessionId.toString(16)}${chroot}`,
    acquireLock: (name: string, options?: ZooKeeperAcquireOptions) => acquireLock(zk, name, withAcl(options)),
    tryAcquireLock: (name: string, options?: ZooKeeperTryAcquireOptions) => tryAcquireLock(zk, name, withAcl(options)),
    acquireReadLock: (name: string, options?: ZooKeeperRwAcquireOptions) => acquireReadLock(zk, name, withAcl(options)),
    tryAcquireReadLock: (name: string, options?: ZooKeeperRwTryAcquireOptions) => tryAcquireReadLock(zk, name, withAcl(options)),
    acquireWriteLock: (name: string, options?: ZooKeeperRwAcquireOptions) => acquireWriteLock(zk, name, withAcl(options)),
    tryAcquireWriteLock: (name: string, options?: ZooKeeperRwTryAcquireOptions) => tryAcquireWriteLock(zk, name, withAcl(options)),
    acquirePermit: (name: string, options: ZooKeeperPermitOptions) => acquirePermit(zk, name, withAcl(options) as ZooKeeperPermitOptions),
    tryAcquirePermit: (name: string, options: ZooKeeperTryPermitOptions) => tryAcquirePermit(zk, name, withAcl(options) as ZooKeeperTryPermitOptions),
    campaign: (name: string, options?: ZooKeeperCampaignOptions) => campaign(zk, name, withAcl(options)),
    lockStatus: (name: string) => lockStatus(zk, name),
    observeLock: (name: string) => observeLock(zk, name),
    identity: () => zookeeperSourceId(zk),
  });
}
