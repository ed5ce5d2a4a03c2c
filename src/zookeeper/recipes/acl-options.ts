/**
 * The ACL option of the lock and election recipes, and its validation
 * (shared with ConnectOptions.defaultAcl). What the ACL protects and how an
 * existing container is checked: ./acl.ts.
 */
import { InvalidArgumentError } from '../../errors.js';
import type { AcquireOptions, CampaignOptions, TryAcquireOptions } from '../../lock.js';
import type { ACL } from '../protocol.js';
import type { LockDelayOption } from './lock-delay.js';

export interface AclOption {
  /**
   * The ACL for the lock's container and its queue nodes (the roots, and the
   * nodes between them and a nested name's container, are made open: they
   * are every lock's). Default: the client's defaultAcl, else open to
   * everyone (OPEN_ACL_UNSAFE), unchecked. See the README for which to choose.
   */
  readonly acl?: readonly ACL[];
}

/** lockDelayMs: ./lock-delay.ts (locks only; an election ignores it). */
export type ZooKeeperAcquireOptions = AcquireOptions & AclOption & LockDelayOption;
export type ZooKeeperTryAcquireOptions = TryAcquireOptions & AclOption & LockDelayOption;
export type ZooKeeperCampaignOptions = CampaignOptions & AclOption;

/** Throws InvalidArgumentError unless `acl` is a non-empty list of well-formed entries. */
export function validateAcl(acl: unknown, what: string): asserts acl is readonly ACL[] {
  if (!Array.isArray(acl) || acl.length === 0) throw new InvalidArgumentError(`${what} must be a non-empty array of ACL entries`);
  for (const entry of acl as unknown[]) {
    const e = entry as Partial<ACL> | null;
    if (
      e === null || typeof e !== 'object' || !Number.isInteger(e.perms) || (e.perms as number) < 0 || (e.perms as number) > 31
      || typeof e.id?.scheme !== 'string' || typeof e.id.id !== 'string'
    ) {
      throw new InvalidArgumentError(`each entry of ${what} needs { perms: 0..31, id: { scheme: string, id: string } }`);
    }
  }
}
