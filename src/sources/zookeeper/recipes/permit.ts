/**
 * An N-permit semaphore whose every permit carries a fencing token for its
 * slot: at most N holders at once, granted in arrival order.
 *
 *   const permit = await acquirePermit(zk, 'crawler/fetch', { permits: 4 });
 *   // permit.slot in [0, 4); fence the slot's resource with permit.sequencer
 *   await permit.release();
 *
 * One parent per name under /fencekeeper/semaphores, a container whose data
 * is N: a call with another N while the name is in use (held, waited for,
 * or emptied less than the server's container check interval ago) is
 * refused with PermitsMismatchError, leaving nothing behind. Waiters queue
 * as a lock's do (./queue.ts: `<guid>-lock-<seq>`, each watching its
 * predecessor); the head claims a slot node `slot-<i>` and leaves the queue
 * in one multi, or watches the slots until one is released (./slots.ts).
 *
 * The token is the czxid of the slot node the permit created, so per slot
 * the tokens of successive holders strictly increase, across crashes and
 * session expiry; the sequencer is `{ kind: 'permit', name: '<name>#<slot>' }`,
 * so a resource fenced per slot refuses a stale holder of that slot, and one
 * slot's holder cannot advance another slot's fence. Holding, step-down and
 * loss are the lock's (./held-node.ts), with the slot node as our node.
 *
 * Releasing deletes `slot-<i>` by name: the slot's name is shared by its
 * successive holders, so had an operator deleted our slot node by hand and
 * another permit claimed the slot before our release's delete arrived, that
 * delete would end the other permit (whose holding then reports
 * node_deleted). Our own-node watch skips the delete once it has seen our
 * node go; a session's expiry cannot cause this (an expired session sends nothing).
 */
import { traceAcquire } from '../../../diagnostics.js';
import { InvalidArgumentError } from '../../../errors.js';
import { DEFAULT_OWNER, type Permit } from '../../../lock.js';
import { lockGrant } from '../../../queue-grant.js';
import { assertLockName } from '../../../sequencer.js';
import type { MultiOp, MultiResult, ZooKeeperClient } from '../client.js';
import type { ZooKeeperPermitOptions, ZooKeeperTryPermitOptions } from './acl-options.js';
import { HeldNode } from './held-node.js';
import { NODE_DELETED } from './holding.js';
import { joinAndWait } from './join.js';
import type { QueueNode } from './queue.js';
import { SlotClaim, type ClaimedSlot } from './slots.js';
import { zookeeperSourceIds } from './source-id.js';

export const SEMAPHORES_ROOT = '/fencekeeper/semaphores';

/** The most permits a semaphore may have (the head watches every slot while all are taken). */
export const MAX_PERMITS = 1024;

/** A permit granted by ZooKeeper: the core's Permit, and the slot node behind it. */
export interface ZooKeeperPermit extends Permit {
  /** Our slot node's path, `<parent>/slot-<slot>` (its czxid is the token). */
  readonly path: string;
}

class HeldPermit extends lockGrant<MultiOp, MultiResult[], typeof HeldNode>('zookeeper', HeldNode) implements ZooKeeperPermit {
  readonly slot: number;
  readonly permits: number;
  #nodeGone = false;

  constructor(zk: ZooKeeperClient, name: string, permits: number, claimed: ClaimedSlot, marginMs: number) {
    // The sequencer (and a loss) names the slot: each slot is fenced on its own.
    super(zk, 'permit', name, claimed.node, marginMs, `${name}#${claimed.slot}`);
    this.slot = claimed.slot;
    this.permits = permits;
  }

  override [NODE_DELETED](): void {
    this.#nodeGone = true;
    super[NODE_DELETED]();
  }

  /** The slot's name is shared by its holders: once ours is known gone, the delete would hit the next holder's node. */
  protected override leaveNode(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
    return this.#nodeGone ? Promise.resolve() : super.leaveNode(zk, node);
  }

  override toJSON(): Record<string, unknown> {
    return { ...super.toJSON(), slot: this.slot, permits: this.permits };
  }
}

const leaveGrant = (permit: HeldPermit): Promise<void> => permit.release();
const unreachable = (): never => {
  throw new Error('unreachable: a permit is built by its slot claim');
};

function join(zk: ZooKeeperClient, name: string, mode: 'wait' | 'try', options: ZooKeeperPermitOptions): Promise<HeldPermit | null> {
  if (options === null || typeof options !== 'object') return Promise.reject(new InvalidArgumentError('acquirePermit needs options with permits, e.g. { permits: 4 }'));
  const { permits } = options;
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
    return Promise.reject(new InvalidArgumentError(`permits must be an integer from 1 to ${MAX_PERMITS}, got ${String(permits)}`));
  }
  if ((options as { lockDelayMs?: unknown }).lockDelayMs !== undefined) {
    return Promise.reject(new InvalidArgumentError('lockDelayMs applies to plain locks (acquireLock) only, not to permits'));
  }
  try {
    // Every slot's sequencer name must be one a sequencer can carry: checked before any I/O.
    assertLockName(name);
    assertLockName(`${name}#${permits - 1}`);
  } catch (error) {
    return Promise.reject(error);
  }
  const owner = options.owner ?? DEFAULT_OWNER;
  const claim = new SlotClaim(zk, name, permits, typeof owner === 'string' ? owner : '', (claimed, marginMs) => new HeldPermit(zk, name, permits, claimed, marginMs));
  const granting = joinAndWait(zk, { kind: 'permit', root: SEMAPHORES_ROOT, name, mode, options, build: unreachable, claim });
  return zookeeperSourceIds.afterGrant(zk, granting, leaveGrant, options);
}

/**
 * Wait for one of `options.permits` permits of the semaphore `name` (in
 * arrival order) and return it: at most that many are held at once. The
 * Permit holds one slot in [0, permits); its token (the slot node's czxid)
 * and its sequencer (`<name>#<slot>`, kind 'permit') fence that slot's
 * resource. Every caller of one name must pass the same `permits` while it
 * is in use (PermitsMismatchError otherwise).
 */
export function acquirePermit(zk: ZooKeeperClient, name: string, options: ZooKeeperPermitOptions): Promise<ZooKeeperPermit> {
  return traceAcquire('zookeeper', name, 'wait', () => join(zk, name, 'wait', options) as Promise<HeldPermit>);
}

/** A permit of the semaphore `name` if a slot is free and nobody waits ahead; null otherwise (leaving nothing behind). */
export function tryAcquirePermit(zk: ZooKeeperClient, name: string, options: ZooKeeperTryPermitOptions): Promise<ZooKeeperPermit | null> {
  return traceAcquire('zookeeper', name, 'try', () => join(zk, name, 'try', options));
}
