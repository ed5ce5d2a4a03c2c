/**
 * The ACL option of the lock and election recipes (validated by the wire
 * client's validateAcl, like ConnectOptions.defaultAcl). What the ACL
 * protects and how an existing container is checked: ./acl.ts.
 */
import type { AcquireOptions, CampaignOptions, PermitOptions, TryAcquireOptions, TryPermitOptions } from '../../../lock.js';
import type { ACL } from '../protocol.js';
import type { LockDelayOption } from './lock-delay.js';

/**
 * The `acl` option of the lock and election recipes: the ACL their containers
 * and queue nodes are created with (default: the client's defaultAcl, else open).
 */
export interface AclOption {
  /**
   * The ACL for the lock's container and its queue nodes (the roots, and the
   * nodes between them and a nested name's container, are made open: they
   * are every lock's). Default: the client's defaultAcl, else open to
   * everyone (OPEN_ACL_UNSAFE), unchecked. Recommended: [...CREATOR_ALL_ACL, ...READ_ACL_UNSAFE] (the holder may do anything, everyone else only read).
   */
  readonly acl?: readonly ACL[];
}

/** acquireLock's options over ZooKeeper: the common ones (timeoutMs, signal, safetyMarginMs, owner), the `acl` and `lockDelayMs` (locks only; an election ignores it). */
export type ZooKeeperAcquireOptions = AcquireOptions & AclOption & LockDelayOption;
/** tryAcquireLock's options over ZooKeeper: the common ones, the `acl` and `lockDelayMs`. */
export type ZooKeeperTryAcquireOptions = TryAcquireOptions & AclOption & LockDelayOption;
/** campaign's options over ZooKeeper: the common CampaignOptions and the `acl`. */
export type ZooKeeperCampaignOptions = CampaignOptions & AclOption;

/**
 * A read or write lock's options (acquireReadLock, acquireWriteLock): every
 * acquire's, and the ACL. No lock-delay: it is a plain lock's.
 */
export type ZooKeeperRwAcquireOptions = AcquireOptions & AclOption;
/** tryAcquireReadLock / tryAcquireWriteLock's options: as ZooKeeperRwAcquireOptions, without a timeout (they never wait). */
export type ZooKeeperRwTryAcquireOptions = TryAcquireOptions & AclOption;

/**
 * acquirePermit's options: the number of permits, every acquire's options,
 * and the ACL (of the semaphore's container, its queue nodes and its slot
 * nodes). No lock-delay: it is a plain lock's.
 */
export type ZooKeeperPermitOptions = PermitOptions & AclOption;
/** tryAcquirePermit's options: as ZooKeeperPermitOptions, without a timeout (it never waits). */
export type ZooKeeperTryPermitOptions = TryPermitOptions & AclOption;
