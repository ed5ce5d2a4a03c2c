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
import { InvalidArgumentError } from '../../errors.js';
import type { AcquireOptions, CampaignOptions, TryAcquireOptions } from '../../lock.js';
import type { LockSource, LockStatus } from '../../lock-source.js';
import { ZooKeeperClient } from '../client.js';
import { campaign, type ZooKeeperLeadership } from './election.js';
import { acquireLock, lockStatus, tryAcquireLock, type ZooKeeperLock } from './lock.js';
import type { QueueEntry } from './queue.js';

/** The ZooKeeper source: every method of LockSource, with ZooKeeper's richer results. */
export interface ZooKeeperSource extends LockSource {
  readonly kind: 'zookeeper';
  acquireLock(name: string, options?: AcquireOptions): Promise<ZooKeeperLock>;
  tryAcquireLock(name: string, options?: TryAcquireOptions): Promise<ZooKeeperLock | null>;
  campaign(name: string, options?: CampaignOptions): Promise<ZooKeeperLeadership>;
  lockStatus(name: string): Promise<LockStatus<QueueEntry>>;
}

export function zookeeperSource(zk: ZooKeeperClient): ZooKeeperSource {
  if (!(zk instanceof ZooKeeperClient)) throw new InvalidArgumentError('zookeeperSource needs a ZooKeeperClient');
  const chroot = zk.chroot === '' ? '' : `, chroot ${zk.chroot}`;
  return Object.freeze({
    kind: 'zookeeper',
    description: `ZooKeeper session 0x${zk.sessionId.toString(16)}${chroot}`,
    acquireLock: (name: string, options?: AcquireOptions) => acquireLock(zk, name, options),
    tryAcquireLock: (name: string, options?: TryAcquireOptions) => tryAcquireLock(zk, name, options),
    campaign: (name: string, options?: CampaignOptions) => campaign(zk, name, options),
    lockStatus: (name: string) => lockStatus(zk, name),
  });
}
