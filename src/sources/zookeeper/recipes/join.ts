/**
 * Join a queue and wait for our turn: the core's fair-queue join
 * (../../../queue-join.ts) over ZooKeeper's sequential nodes, for the lock,
 * the read-write lock, the semaphore and the election. What only ZooKeeper
 * has fills the core's named hooks: the parent's ACL check (confirmEntry)
 * and lock-delay (holdBack). Any way out other than a grant removes our
 * node before the caller hears of it.
 */
import { ClientClosedError, InvalidArgumentError, LockLostError, SessionExpiredError } from '../../../errors.js';
import { DEFAULT_OWNER } from '../../../lock.js';
import { joinQueue, type QueueJoinSteps, type QueueTurn } from '../../../queue-join.js';
import type { QueueStopper } from '../../../queue-stopper.js';
import type { SequencerKind } from '../../../sequencer.js';
import type { ZooKeeperAcquireOptions } from './acl-options.js';
import { checkParent, isChecked, nodeAclFor, type NodeAcl } from './acl.js';
import type { ZooKeeperClient } from '../client.js';
import { sessionMargin } from './holding.js';
import { lockDelayOf, readAfter, readBefore, waitOutUnclean, type ArrivalReads } from './lock-delay.js';
import { abandon, awaitTurn, enqueue, withoutStrays, type Enqueued, type QueueNode } from './queue.js';
import { position as lockPosition, positionInListing, queueParent, type PositionOf, type TurnOutcome } from './queue-order.js';
import { zookeeperWaits } from './waits.js';

export interface Join<T> {
  /** The grant's kind (a plain, read or write lock, a permit, a leadership). */
  readonly kind: SequencerKind;
  /** The queue's root: the locks' or the elections'. */
  readonly root: string;
  readonly name: string;
  /** 'wait' for our turn, or 'try': take the turn only if it is ours at once (else null). */
  readonly mode: 'wait' | 'try';
  readonly options: ZooKeeperAcquireOptions;
  /**
   * Make the holder of our node, with the safety margin already checked
   * (`zk` and this join passed too, so a recipe can pass one function for
   * every acquire rather than a closure each: a waiting acquire keeps it).
   */
  readonly build: (node: QueueNode, marginMs: number, zk: ZooKeeperClient, join: Join<T>) => T;
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
   * us the head (null: the turn came later, list again). `waiting()` is
   * called before it waits (the self-wait warning).
   */
  take(node: QueueNode, marginMs: number, acl: NodeAcl | null, mode: 'wait' | 'try', stopper: QueueStopper, listing: readonly string[] | null, waiting: () => void): Promise<T | null>;
}

type Wait = Extract<TurnOutcome, { turn: false }>;

const NO_CHILDREN: string[] = [];

/**
 * One join's steps and the state they share (the lock-delay reads, the
 * listing that made us the head). A waiting acquire keeps it: what the
 * steps' shape asks for is read from the join (getters), not copied.
 */
class ZooKeeperJoin<T extends { readonly held: boolean }> implements QueueJoinSteps<Enqueued, Wait, T, T> {
  readonly client: ZooKeeperClient;
  readonly #join: Join<T>;
  readonly #parent: string;
  readonly #marginMs: number;
  readonly #acl: NodeAcl | null;
  readonly #lockDelayMs: number;
  #reads: ArrivalReads | null = null;
  #seen: { predecessor: string } | undefined;
  /** The join's listing, when it made us the head (a permit's claim needs no second one). */
  #listing: readonly string[] | null = null;

  constructor(zk: ZooKeeperClient, join: Join<T>, parent: string, marginMs: number, acl: NodeAcl | null, lockDelayMs: number) {
    this.client = zk;
    this.#join = join;
    this.#parent = parent;
    this.#marginMs = marginMs;
    this.#acl = acl;
    this.#lockDelayMs = lockDelayMs;
    if (join.claim !== undefined) {
      this.claim = (joined, stopper, waiting) => this.#claim(join.claim as JoinClaim<T>, joined, stopper, waiting);
      // A grant the claim made after the join gave up (a stop in the claim's last tick) goes back.
      this.unclaim = (claiming) => claiming.then((grant) => (grant as { release?: () => Promise<void> } | null)?.release?.(), () => undefined);
    }
  }

  get kind(): SequencerKind {
    return this.#join.kind;
  }

  get name(): string {
    return this.#join.name;
  }

  get mode(): 'wait' | 'try' {
    return this.#join.mode;
  }

  get signal(): AbortSignal | undefined {
    return this.#join.options.signal;
  }

  get timeoutMs(): number | undefined {
    return this.#join.options.timeoutMs;
  }

  get waits(): ReturnType<typeof zookeeperWaits> {
    return zookeeperWaits(this.client);
  }

  // Declared, not defined: a plain lock's join has no claim and no slot for one.
  declare claim?: QueueJoinSteps<Enqueued, Wait, T, T>['claim'];
  declare unclaim?: QueueJoinSteps<Enqueued, Wait, T, T>['unclaim'];

  get #position(): PositionOf {
    return this.#join.position ?? lockPosition;
  }

  enter(): Promise<Enqueued> {
    const zk = this.client;
    const parent = this.#parent;
    // Lock-delay: the parent's stat just before our create and just after it, in the same write (./lock-delay.ts).
    const before = this.#lockDelayMs > 0 ? readBefore(zk, parent) : null;
    const joining = enqueue(zk, this.#join.root, parent, ownerBytes(this.#join.options.owner), this.#acl, this.#join.marker);
    this.#join.claim?.start(parent);
    if (before !== null) this.#reads = { before, after: readAfter(zk, parent) };
    return joining;
  }

  /** The ACL hook: with an ACL, the parent is still the one whose ACL was checked; a claim's own check (a semaphore's size). */
  confirmEntry(joined: Enqueued): Promise<void> | null {
    const acl = this.#acl;
    const claim = this.#join.claim;
    if (acl === null && claim === undefined) return null;
    return (async () => {
      if (acl !== null) await confirmParent(this.client, this.#parent, acl, joined.parentCzxid);
      if (claim !== undefined) await claim.joined(joined);
    })();
  }

  place(joined: Enqueued): 'turn' | 'gone' | Wait {
    // A lock's certain join reads its place off the listing's bytes (no string per child); else the names.
    const bytes = this.#join.position === undefined && !joined.node.uncertain ? joined.listing : undefined;
    if (bytes !== undefined && bytes !== null) {
      const where = positionInListing(bytes, joined.node.child);
      if (where !== null && !where.turn) return where;
      if (where !== null && this.#join.claim !== undefined) this.#listing = joined.children;
      // Nothing reads the listing again: a holder does not keep it.
      joined.children = NO_CHILDREN;
      return where === null ? 'gone' : 'turn';
    }
    const listing = withoutStrays(this.client, joined.node, joined.children);
    const where = this.#position(listing, joined.node.child);
    if (where === null) return 'gone';
    if (where.turn) {
      this.#listing = listing;
      return 'turn';
    }
    return where;
  }

  /** Never called: awaitTurn is (the core prefers it). Kept for the steps' shape. */
  waitForTurn(joined: Enqueued, where: Wait, stopper: QueueStopper): Promise<'turn' | 'gone'> {
    return new Promise((resolve, reject) => this.awaitTurn(joined, where, stopper, { arrived: resolve, failed: reject }));
  }

  /** Wait without a promise (./queue.ts awaitTurn): thousands of acquires may wait on one client. */
  awaitTurn(joined: Enqueued, where: Wait, stopper: QueueStopper, turn: QueueTurn): void {
    if (this.#reads !== null) this.#seen = { predecessor: where.predecessor };
    // The listing goes to the process's knowledge of a deep queue (./queue-known.ts), as bytes when
    // the join kept them; then it is not read again: a waiting acquire does not keep it.
    const children = joined.listing ?? joined.children;
    joined.children = NO_CHILDREN;
    awaitTurn(this.client, joined.node, where, stopper, turn, this.#seen, this.#position, { children, parentCzxid: joined.parentCzxid });
  }

  /** The lock-delay hook: after an unclean release, wait it out before the grant. */
  holdBack(joined: Enqueued): Promise<void> | null {
    const reads = this.#reads;
    return reads === null ? null : waitOutUnclean(this.client, joined.node, this.#lockDelayMs, this.#seen, reads);
  }

  ended(): unknown {
    const state = this.client.state;
    if (state === 'expired') return new SessionExpiredError();
    if (state === 'closed') return new ClientClosedError();
    return null;
  }

  lost(joined: Enqueued): Error {
    return new LockLostError(this.name, 'node_deleted', `lock ${this.name}: our queue node ${joined.node.path} was deleted while waiting`);
  }

  #claim(claim: JoinClaim<T>, joined: Enqueued, stopper: QueueStopper, waiting: () => void): Promise<T | null> {
    return claim.take(joined.node, this.#marginMs, this.#acl, this.mode, stopper, this.#listing, waiting);
  }

  build(joined: Enqueued | null, claimed: T | null): T {
    return claimed ?? this.#join.build((joined as Enqueued).node, this.#marginMs, this.client, this.#join);
  }

  abandon(joining: Promise<Enqueued | null>): Promise<void> {
    return abandon(this.client, joining as Promise<Enqueued>);
  }
}

/** Check every argument (a bad one rejects, nothing sent), then join and wait (null only in 'try' mode). */
export function joinAndWait<T extends { readonly held: boolean }>(zk: ZooKeeperClient, join: Join<T>): Promise<T | null> {
  let steps: ZooKeeperJoin<T>;
  try {
    steps = checked(zk, join);
  } catch (error) {
    return Promise.reject(error);
  }
  return joinQueue(steps);
}

function checked<T extends { readonly held: boolean }>(zk: ZooKeeperClient, join: Join<T>): ZooKeeperJoin<T> {
  const { root, name, options } = join;
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
  return new ZooKeeperJoin(zk, join, parent, marginMs, acl, lockDelayMs);
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
