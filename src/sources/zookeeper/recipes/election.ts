/**
 * Leader election on the same queue as the lock: electing a leader is
 * acquiring a lock that is held for longer. The leader's epoch is the czxid
 * of its node, so every later leader's epoch is larger, across ZooKeeper
 * failovers too; downstream systems fence on it exactly as on a lock token.
 */
import { traceCampaign } from '../../../diagnostics.js';
import { leadershipGrant } from '../../../queue-grant.js';
import type { Leadership } from '../../../lock.js';
import type { SourceObserver } from '../../../lock-source.js';
import type { ZooKeeperAcquireOptions, ZooKeeperCampaignOptions } from './acl-options.js';
import type { FencingToken } from '../../../token.js';
import type { MultiOp, MultiResult, ZooKeeperClient } from '../client.js';
import { HeldNode } from './held-node.js';
import { DEFAULT_OWNER } from '../../../lock.js';
import { joinAndWait } from './join.js';
import { ZooKeeperQueueObserver } from './observer.js';
import type { QueueNode } from './queue.js';
import { zookeeperSourceIds } from './source-id.js';
import { queueParent } from './queue-order.js';

export const ELECTIONS_ROOT = '/fencekeeper/elections';

/** A leadership won in a ZooKeeper election: the core's Leadership, our id, and the queue node behind it. */
export interface ZooKeeperLeadership extends Leadership {
  /** This candidate's id (CampaignOptions.id), as observers see it. */
  readonly id: string;
  /** Our node's path (its czxid is the epoch). */
  readonly path: string;
  /**
   * Apply `ops` only while this candidate leads: as ZooKeeperLock.ifHeld
   * (one multi with a check of our node; LockLostError, nothing written, when not leading).
   */
  ifLeader(ops: readonly MultiOp[]): Promise<MultiResult[]>;
}

class HeldLeadership extends leadershipGrant<MultiOp, MultiResult[], typeof HeldNode>('zookeeper', HeldNode) implements ZooKeeperLeadership {
  readonly id: string;

  constructor(zk: ZooKeeperClient, name: string, id: string, node: QueueNode, marginMs: number) {
    super(zk, 'election', name, node, marginMs);
    this.id = id;
  }
}

/** Stand for election; resolves when this candidate is the leader. */
export async function campaign(zk: ZooKeeperClient, name: string, options: ZooKeeperCampaignOptions = {}): Promise<ZooKeeperLeadership> {
  const id = options.id ?? DEFAULT_OWNER;
  const acquire: ZooKeeperAcquireOptions = {
    owner: id,
    ...(options.acl !== undefined && { acl: options.acl }),
    ...(options.signal !== undefined && { signal: options.signal }),
    ...(options.safetyMarginMs !== undefined && { safetyMarginMs: options.safetyMarginMs }),
  };
  const build = (node: QueueNode, marginMs: number): HeldLeadership => new HeldLeadership(zk, name, id, node, marginMs);
  return traceCampaign('zookeeper', name, async () =>
    (await zookeeperSourceIds.afterGrant(zk, joinAndWait(zk, { kind: 'election', root: ELECTIONS_ROOT, name, mode: 'wait', options: acquire, build }), (leader) => leader.resign(), acquire)) as HeldLeadership);
}

/** The current leader of an election, as observers see it: its id, epoch and node. */
export interface LeaderInfo {
  readonly id: string;
  readonly epoch: FencingToken;
  readonly path: string;
}

/**
 * Who leads an election, without campaigning. `current()` answers from a
 * cache that a children watch invalidates, so repeated calls cost no round
 * trip while nothing changes.
 */
export interface LeaderObserver extends SourceObserver {
  /** The current leader, from the cache while it is fresh; null when nobody leads. */
  current(): Promise<LeaderInfo | null>;
}

/**
 * Watches an election from outside it: current() answers the leader from a
 * cache kept fresh by a watch (no round trip per call); close() stops.
 */
export function observeLeader(zk: ZooKeeperClient, name: string): LeaderObserver {
  const queue = new ZooKeeperQueueObserver(zk, queueParent(ELECTIONS_ROOT, name));
  return {
    async current() {
      const head = await queue.head();
      return head === null ? null : { id: head.owner, epoch: head.token, path: head.path };
    },
    onChange: (listener) => queue.onChange(listener),
    close: () => queue.close(),
  };
}
