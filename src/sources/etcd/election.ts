/**
 * Leader election on the same queue as the lock: electing a leader is
 * acquiring a lock that is held for longer. The leader's epoch is its key's
 * create revision, so every later leader's epoch is larger, across etcd
 * leader changes too; downstream systems fence on it as on a lock token.
 */
import { type CampaignOptions, type FencingToken, type Leadership, type SourceObserver } from '../../index.js';
import { leadershipGrant, traceCampaign } from '../../extend.js';
import type { EtcdClient, EtcdRequestOp, EtcdTxnResponse } from './client.js';
import { HeldKey } from './held-key.js';
import { checkClient, checkName } from './input.js';
import { joinAndWait } from './join.js';
import { EtcdQueueObserver } from './observer.js';
import { ELECTIONS_ROOT, queuePrefix, type QueueKey } from './queue.js';
import type { Lease } from './session.js';
import { etcdSourceIds } from './source-id.js';

/** A leadership won in an etcd election: the core's Leadership, our id, and the key behind it. */
export interface EtcdLeadership extends Leadership {
  /** This candidate's id (CampaignOptions.id), as observers see it. */
  readonly id: string;
  /** Our key (its create revision is the epoch). */
  readonly key: string;
  readonly lease: bigint;
  /** Apply `ops` (etcd txn operations) only while this candidate leads: one txn comparing our key's create revision; LockLostError, nothing written, once it does not. */
  ifLeader(ops: readonly EtcdRequestOp[]): Promise<EtcdTxnResponse['responses']>;
}

class HeldLeadership extends leadershipGrant<EtcdRequestOp, EtcdTxnResponse['responses'], typeof HeldKey>('etcd', HeldKey) implements EtcdLeadership {
  readonly id: string;

  constructor(etcd: EtcdClient, lease: Lease, name: string, id: string, node: QueueKey, revision: bigint, marginMs: number) {
    super(etcd, lease, 'election', name, node, revision, marginMs);
    this.id = id;
  }
}

/** Stand for election; resolves when this candidate is the leader. */
export function campaign(etcd: EtcdClient, name: string, options: CampaignOptions = {}): Promise<EtcdLeadership> {
  const build = (lease: Lease, node: QueueKey, revision: bigint, marginMs: number, id: string): HeldLeadership =>
    new HeldLeadership(etcd, lease, name, id, node, revision, marginMs);
  // A waiting join ends in a leadership or an error, never null.
  return traceCampaign('etcd', name, () =>
    etcdSourceIds.afterGrant(etcd, joinAndWait(etcd, { kind: 'election', root: ELECTIONS_ROOT, name, mode: 'wait', options, ownerField: 'id', build }), (leader) => leader.resign(), options) as Promise<HeldLeadership>);
}

/** The current leader of an etcd election, as observers see it: its id and epoch. */
export interface EtcdLeaderInfo {
  readonly id: string;
  readonly epoch: FencingToken;
  readonly key: string;
}

/**
 * Who leads an election, without campaigning. `current()` answers from a
 * cache that a watch on the election's prefix invalidates, so repeated calls
 * cost no request while nothing changes.
 */
export interface EtcdLeaderObserver extends SourceObserver {
  /** The current leader, from the cache while it is fresh; null when nobody leads. */
  current(): Promise<EtcdLeaderInfo | null>;
}

/**
 * Watches an etcd election from outside it: current() answers the leader from
 * a cache kept fresh by a watch; close() stops.
 */
export function observeLeader(etcd: EtcdClient, name: string): EtcdLeaderObserver {
  checkClient(etcd);
  checkName(name);
  const queue = new EtcdQueueObserver(etcd, queuePrefix(ELECTIONS_ROOT, name), 1);
  return {
    async current() {
      const head = (await queue.entries())[0];
      return head === undefined ? null : { id: head.owner, epoch: head.token, key: head.key };
    },
    onChange: (listener) => queue.onChange(listener),
    close: () => queue.close(),
  };
}
