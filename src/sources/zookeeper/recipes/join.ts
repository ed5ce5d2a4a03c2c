/**
 * Join a queue and wait for our turn: the acquire path shared by the lock
 * and the election (an election is a lock that is held for longer). Any way
 * out other than a grant removes our node before the caller hears of it.
 */
import { ClientClosedError, InvalidArgumentError, LockLostError, SessionExpiredError } from '../../../errors.js';
import { DEFAULT_OWNER } from '../../../lock.js';
import type { ZooKeeperAcquireOptions } from './acl-options.js';
import { checkParent, isChecked, nodeAclFor, type NodeAcl } from './acl.js';
import type { ClientState, ZooKeeperClient } from '../client.js';
import { sessionMargin } from './holding.js';
import { lockDelayOf, readAfter, readBefore, waitOutUnclean, type ArrivalReads } from './lock-delay.js';
import { abandon, enqueue, waitForTurn, withoutStrays, type Enqueued, type QueueNode } from './queue.js';
import { position as lockPosition, queueParent, type PositionOf } from './queue-order.js';
import { Stopper } from './stopper.js';


export interface Join<T> {
  /** The queue's root: the locks' or the elections'. */
  readonly root: string;
  readonly name: string;
  /** 'wait' for our turn, or 'try': take the turn only if it is ours at once (else null). */
  readonly mode: 'wait' | 'try';
  readonly options: ZooKeeperAcquireOptions;
  /** Make the holder of our node, with the safety margin already checked. */
  readonly build: (node: QueueNode, marginMs: number) => T;
  /** What separates our node's guid from its sequence (default '-lock-'; a read-write lock's '-read-' / '-write-'). */
  readonly marker?: string;
  /** Where our node stands in a listing (default: a lock's, the lowest holds and each waits for its predecessor). */
  readonly position?: PositionOf;
  /** For a grant that takes more than the head of the queue (a permit's slot, ./permit.ts): used instead of `build`. */
  readonly claim?: JoinClaim<T>;
}

/**
 * What a grant needs beyond heading the queue. Any way out of the join but
 * a grant still removes our queue node (the caller's abandon); `take` must
 * leave nothing of its own behind when it throws or answers null.
 */
export interface JoinClaim<T> {
  /** Called in the tick of our create, so its reads share the create's socket write. */
  start(parent: string): void;
  /** Check the queue we joined (our node is in it) before we wait in it; throws to leave. */
  joined(enqueued: Enqueued): Promise<void>;
  /**
   * Our node heads the queue: take what the grant needs and make its holder;
   * null in 'try' mode when that cannot be had at once. `listing`: the
   * parent's children as the join listed them, if that listing already made
   * us the head (null: the turn came later, list again).
   */
  take(node: QueueNode, marginMs: number, acl: NodeAcl | null, mode: 'wait' | 'try', stopper: Stopper, listing: readonly string[] | null): Promise<T | null>;
}

export async function joinAndWait<T>(zk: ZooKeeperClient, join: Join<T>): Promise<T | null> {
  const { root, name, mode, options } = join;
  const position = join.position ?? lockPosition;
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options must be an object');
  const parent = queueParent(root, name);
  const { signal, timeoutMs } = options;
  if (timeoutMs !== undefined && (!Number.isFinite(timeoutMs) || timeoutMs < 0)) {
    throw new InvalidArgumentError(`timeoutMs must be a non-negative number, got ${String(timeoutMs)}`);
  }
  const marginMs = sessionMargin(zk, options.safetyMarginMs);
  if (options.owner !== undefined && typeof options.owner !== 'string') throw new InvalidArgumentError('owner must be a string');
  const acl = nodeAclFor(zk, options.acl);
  const lockDelayMs = lockDelayOf(options);
  signal?.throwIfAborted();
  if (zk.state === 'expired') throw new SessionExpiredError();
  if (zk.state === 'closed') throw new ClientClosedError();

  // Without a signal or a timeout, only the session's end can stop the join,
  // and it fails the join's own requests: no Stopper until we must wait.
  let stopper = signal === undefined && timeoutMs === undefined ? null : new Stopper(zk, name, signal, timeoutMs);

  // Lock-delay: the parent's stat just before our create and just after it, in the same write (./lock-delay.ts).
  const before = lockDelayMs > 0 ? readBefore(zk, parent) : null;
  const joining = enqueue(zk, root, parent, ownerBytes(options.owner), acl, join.marker);
  const claim = join.claim;
  claim?.start(parent);
  const reads: ArrivalReads | null = before === null ? null : { before, after: readAfter(zk, parent) };
  let seen: { predecessor: string } | undefined;
  let handedOver = false;
  try {
    const joined = stopper === null ? await joining : await Promise.race([joining, stopper.stopped]);
    const node = joined.node;
    if (acl !== null) {
      const confirmed = confirmParent(zk, parent, acl, joined.parentCzxid);
      await (stopper === null ? confirmed : Promise.race([confirmed, stopper.stopped]));
    }
    if (claim !== undefined) await (stopper === null ? claim.joined(joined) : Promise.race([claim.joined(joined), stopper.stopped]));
    let outcome: 'turn' | 'gone' | 'busy';
    const listing = withoutStrays(zk, node, joined.children);
    const where = position(listing, node.child);
    if (where === null) outcome = 'gone';
    else if (where.turn) outcome = 'turn';
    else if (mode === 'try') outcome = 'busy';
    else {
      stopper ??= new Stopper(zk, name, undefined, undefined);
      if (reads !== null) seen = { predecessor: where.predecessor };
      outcome = await waitForTurn(zk, parent, node, where, stopper.stopped, seen, position);
    }
    if (outcome === 'busy') return null;
    if (outcome === 'turn' && reads !== null) {
      stopper ??= new Stopper(zk, name, undefined, undefined);
      await Promise.race([waitOutUnclean(zk, node, lockDelayMs, seen, reads), stopper.stopped]);
    }
    if (stopper !== null) stopper.check();
    else {
      // What a Stopper would have caught: the session ended as the grant arrived.
      const state = zk.state as ClientState;
      if (state === 'expired') throw new SessionExpiredError();
      if (state === 'closed') throw new ClientClosedError();
    }
    if (outcome === 'gone') {
      throw new LockLostError(name, 'node_deleted', `lock ${name}: our queue node ${node.path} was deleted while waiting`);
    }
    if (claim !== undefined) {
      stopper ??= new Stopper(zk, name, undefined, undefined);
      const claimed = await claim.take(node, marginMs, acl, mode, stopper, where?.turn === true ? listing : null);
      if (claimed === null) return null;
      handedOver = true;
      return claimed;
    }
    const holder = join.build(node, marginMs);
    handedOver = true;
    return holder;
  } finally {
    stopper?.dispose();
    if (!handedOver) await abandon(zk, joining);
  }
}

/** The owner string as node data: the default one (most acquires) encoded once. */
const DEFAULT_OWNER_BYTES = Buffer.from(DEFAULT_OWNER, 'utf8');
function ownerBytes(owner: string | undefined): Uint8Array {
  return owner === undefined || owner === DEFAULT_OWNER ? DEFAULT_OWNER_BYTES : Buffer.from(owner, 'utf8');
}

/**
 * With an ACL, our node is only a place in the queue if its parent is still
 * the one whose ACL was checked (or made) before the create: the reaper may
 * have removed that container and someone else re-created it meanwhile. The
 * listing's czxid tells, at no cost while it is unchanged; otherwise read the
 * ACL again (a refusal leaves through the caller's abandon, removing our node).
 */
async function confirmParent(zk: ZooKeeperClient, parent: string, acl: NodeAcl, czxid: bigint | undefined): Promise<void> {
  if (czxid !== undefined && isChecked(zk, parent, acl, czxid)) return;
  await checkParent(zk, parent, acl);
}
