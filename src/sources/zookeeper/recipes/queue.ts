/**
 * The ordered wait queue under a lock's (or election's) parent node, shared
 * by the lock and election recipes.
 *
 * Each contender creates an ephemeral sequential child `<guid>-lock-<seq>`;
 * the lowest sequence holds; every other contender watches only its
 * predecessor, so a release wakes exactly one waiter instead of the whole
 * queue (no thundering herd). When the predecessor goes, the waiter lists
 * again rather than assuming it is next: the predecessor may have been a
 * waiter that gave up.
 *
 * The fencing token is the czxid of our own node, read from create2's Stat:
 * the zxid is (epoch << 32 | counter), strictly increasing across creations
 * and across leader failover, unlike the sequence suffix, which is the
 * parent's 32-bit cversion and restarts when a container parent is reaped.
 */
import { randomBytes } from 'node:crypto';
import { ConnectionLossError, isCode } from '../../../errors.js';
import type { FencingToken } from '../../../token.js';
import type { LockStatusEntry } from '../../../lock-source.js';
import type { ZooKeeperClient } from '../client.js';
import type { ChildListing } from '../child-listing.js';
import { joinPath } from '../paths.js';
import { listChildren, retryOnLoss, whileConnected } from './connection-loss.js';
import { NODE_DELETED, NODE_DONE, watchOwnNodeNow, type OwnNode } from './holding.js';
import { MARKER, guidOf, position, sequenceOf, type PositionOf, type TurnOutcome } from './queue-order.js';
import { KnownQueue } from './queue-known.js';
import { checkParent, isChecked, madeParent, refusedParent, type NodeAcl } from './acl.js';
import type { WatchEvent } from '../watches.js';
import type { QueueTurn } from '../../../queue-join.js';
import type { QueueStopper, StopReceiver } from '../../../queue-stopper.js';

/**
 * Each join gets its own guid, so a lost create2 reply can be matched to its
 * node. Random per process, counted per join: unique among one session's
 * nodes (and adoption also checks the ephemeral owner), without asking the
 * kernel for entropy on every acquire.
 */
const PROCESS_GUID = randomBytes(6).toString('hex');
let joins = 0;
function nextGuid(): string {
  joins = (joins + 1) % 0x100000000;
  return `${PROCESS_GUID}${joins.toString(16).padStart(8, '0')}`;
}

export interface QueueNode {
  /** Full path of our node. */
  readonly path: string;
  readonly parent: string;
  /** Child name under the parent. */
  readonly child: string;
  readonly token: FencingToken;
  /** This join's guid, the prefix of its node's name. */
  readonly guid: string;
  /**
   * A create of this join lost its reply. In an ensemble the lost create can
   * still commit after we have listed, adopted nothing and created again
   * (it was on its way from the old server to the leader when the session
   * moved): then a second node of ours exists, and once ours is released it
   * would block the lock for as long as our session lives. Such a join drops
   * every other node carrying its guid while waiting and when leaving.
   */
  readonly uncertain: boolean;
}

/**
 * Our queue node as the join made it. Its child name and guid are read off
 * its path when asked for (both are in it: `<parent>/<guid><marker><seq>`),
 * not kept: every held lock and waiting acquire keeps its node, and the two
 * strings cost some 90 bytes each.
 */
class JoinedNode implements QueueNode {
  constructor(
    readonly path: string,
    readonly parent: string,
    readonly token: FencingToken,
    readonly uncertain: boolean,
  ) {}

  get child(): string {
    return this.path.slice(this.parent.length + 1);
  }

  get guid(): string {
    return guidOf(this.child);
  }
}

/** A node in the queue as others see it: the holder (the first entry), a waiter, a leader. */
export interface QueueEntry extends LockStatusEntry {
  /** Full path of the node. */
  readonly path: string;
  /** The node's czxid: the token of that grant. */
  readonly token: FencingToken;
  /** The node's data: the holder's owner string, the candidate's id. */
  readonly owner: string;
  /** The session that owns the (ephemeral) node. */
  readonly sessionId: bigint;
}

/**
 * Create `path` (a lock's container) and, when missing, the persistent roots
 * and the container nodes above it. A container is reaped by the server once
 * its last child is gone, so it is created on demand every time a create
 * finds it missing. `acl` is the one `path` itself is made with (null: open);
 * the roots and the nodes between them and the container ('jobs' of
 * 'jobs/reindex') are shared by every lock under them, so they are made open
 * whatever the lock's ACL (see ./acl.ts).
 */
async function ensureParents(zk: ZooKeeperClient, path: string, root: string, acl: NodeAcl | null): Promise<void> {
  // Usually only the lock's own container is missing (reaped while the lock
  // was idle): try it first, and walk up only when its parent is missing too.
  const persistent = root === path || root.startsWith(`${path}/`);
  const mode = persistent ? 'persistent' : 'container';
  const up = path.lastIndexOf('/');
  try {
    const { stat } = await zk.create(path, null, acl === null || persistent ? { mode } : { mode, acl: acl.acl });
    if (acl !== null && !persistent) madeParent(zk, path, acl, stat.czxid);
  } catch (error) {
    if (isCode(error, 'ZK_NODEEXISTS')) return;
    // A node between the roots and the container that we may not create under
    // (someone closed it): say which, not a bare NOAUTH on the path below it.
    // A root a deployment closed answers NOAUTH, as documented.
    if (isCode(error, 'ZK_NOAUTH') && up > root.length) throw await refusedParent(zk, path.slice(0, up), error);
    if (!isCode(error, 'ZK_NONODE') || up <= 0) throw error;
    await ensureParents(zk, path.slice(0, up), root, null);
    await ensureParents(zk, path, root, acl);
  }
}

export interface Enqueued {
  readonly node: QueueNode;
  /**
   * The parent's children as listed right after our create (same socket
   * write). Emptied once the join waits (./join.ts): nothing reads it
   * later, and a waiting acquire should not keep the listing.
   */
  children: string[];
  /**
   * The parent's czxid from that listing (undefined when the listing was
   * made again after a loss). With an ACL, it tells whether the parent is
   * still the one whose ACL was checked (see ./acl.ts); a waiter in a deep
   * queue keys the process's knowledge of the queue with it (./queue-known.ts).
   */
  readonly parentCzxid?: bigint;
  /**
   * The common join's listing kept as its bytes (null once the join waits,
   * absent on the other paths): `children` decodes it only when read, and a
   * lock's join reads its place off the bytes (./queue-order.ts
   * positionInListing), making no string per child.
   */
  readonly listing?: ChildListing | null;
  /**
   * The first create did not make our node (the parent was missing, or the
   * reply was lost): a read sent in the same write as that create may have
   * seen another parent, or none (a semaphore reads its size so, ./permit.ts).
   */
  readonly retried?: true;
}

/**
 * Join the queue: create2 our node (`<guid><marker><seq>`, the marker
 * `-lock-` unless a recipe names its own) and list the parent in the same socket
 * write (ZooKeeper answers one session's requests in order, so the listing
 * already contains our node). Uncontended, that is the whole acquire: one
 * round trip.
 *
 * If the connection drops with the create in flight, its outcome is
 * unknown: after the reconnect we list the parent and adopt the node that
 * carries this attempt's guid and is owned by our session, and only create
 * again if there is none. One acquire never leaves two nodes.
 */
export function enqueue(zk: ZooKeeperClient, root: string, parent: string, data: Uint8Array | null, acl: NodeAcl | null = null, marker: string = MARKER): Promise<Enqueued> {
  if (acl !== null) return enqueueWithAcl(zk, root, parent, data, acl, marker);
  const guid = nextGuid();
  const prefix = joinPath(parent, `${guid}${marker}`);
  // The common case without async frames: every acquire takes it.
  const created = zk.create(prefix, data, SEQUENTIAL);
  const listed = zk.getChildrenListing(parent);
  return created.then(
    ({ path, stat }) => {
      const node: QueueNode = new JoinedNode(path, parent, stat.czxid, false);
      return listed.then(
        (listing): Enqueued => new ListedJoin(node, listing),
        (error: unknown) => listAfterLoss(zk, node, error),
      );
    },
    (error: unknown) => {
      listed.catch(ignore);
      return enqueueAfter(zk, root, parent, data, guid, prefix, error, null);
    },
  );
}

/**
 * The join with an ACL: the parent's ACL is checked before anything is
 * created under a parent this client has not checked (or made) yet, and the
 * listing carries the parent's Stat, so the caller can tell that the parent
 * is still that one (see ./acl.ts and confirmParent in ./join.ts).
 */
async function enqueueWithAcl(zk: ZooKeeperClient, root: string, parent: string, data: Uint8Array | null, acl: NodeAcl, marker: string): Promise<Enqueued> {
  if (!isChecked(zk, parent, acl)) await checkParent(zk, parent, acl);
  const guid = nextGuid();
  const prefix = joinPath(parent, `${guid}${marker}`);
  const created = zk.create(prefix, data, acl.sequential);
  const listed = zk.getChildrenWithStat(parent);
  let node: QueueNode;
  try {
    const { path, stat } = await created;
    node = new JoinedNode(path, parent, stat.czxid, false);
  } catch (error) {
    listed.catch(ignore);
    return enqueueAfter(zk, root, parent, data, guid, prefix, error, acl);
  }
  try {
    const { children, stat } = await listed;
    return { node, children, parentCzxid: stat.czxid };
  } catch (error) {
    return listAfterLoss(zk, node, error);
  }
}

/** The common join (see Enqueued.listing): its listing decoded only if `children` is read. */
class ListedJoin implements Enqueued {
  readonly parentCzxid: bigint;
  listing: ChildListing | null;
  #children: string[] | null = null;

  constructor(
    readonly node: QueueNode,
    listing: ChildListing,
  ) {
    this.listing = listing;
    this.parentCzxid = listing.czxid;
  }

  get children(): string[] {
    return (this.#children ??= this.listing?.names() ?? []);
  }

  /** Replaced (emptied once the join waits): the bytes go too. */
  set children(value: string[]) {
    this.#children = value;
    this.listing = null;
  }
}

const SEQUENTIAL = Object.freeze({ mode: 'ephemeral_sequential' } as const);
const ignore = (): void => undefined;

/** Our create landed but the listing was lost with the connection: list again (a read). */
async function listAfterLoss(zk: ZooKeeperClient, node: QueueNode, error: unknown): Promise<Enqueued> {
  if (!(error instanceof ConnectionLossError)) throw error;
  return { node, children: await listChildren(zk, node.parent) };
}

/** The join after its first create failed with `firstError`: make the parents, or adopt a lost create, and try again. */
async function enqueueAfter(
  zk: ZooKeeperClient,
  root: string,
  parent: string,
  data: Uint8Array | null,
  guid: string,
  prefix: string,
  firstError: unknown,
  acl: NodeAcl | null,
): Promise<Enqueued> {
  let uncertain = false;
  let error = firstError;
  for (let attempt = 0; ; attempt++) {
    if (isCode(error, 'ZK_NONODE') && attempt < 10) {
      await ensureParents(zk, parent, root, acl);
    } else {
      if (!(error instanceof ConnectionLossError)) throw error;
      uncertain = true;
      const adopted = await adopt(zk, parent, guid);
      if (adopted !== null) return { node: adopted, children: await listChildren(zk, parent), retried: true };
    }
    const created = zk.create(prefix, data, acl === null ? SEQUENTIAL : acl.sequential);
    // The listing brings the parent's czxid too (see Enqueued.parentCzxid).
    const listed = zk.getChildrenWithStat(parent);
    let node: QueueNode;
    try {
      const { path, stat } = await created;
      node = new JoinedNode(path, parent, stat.czxid, uncertain);
    } catch (failed) {
      listed.catch(ignore);
      error = failed;
      continue;
    }
    try {
      const listing = await listed;
      return { node, children: listing.children, parentCzxid: listing.stat.czxid, retried: true };
    } catch (failed) {
      return { ...(await listAfterLoss(zk, node, failed)), retried: true };
    }
  }
}

async function adopt(zk: ZooKeeperClient, parent: string, guid: string): Promise<QueueNode | null> {
  const children = await listChildren(zk, parent).catch((error: unknown) => {
    if (isCode(error, 'ZK_NONODE')) return [] as string[];
    throw error;
  });
  const child = children.find((c) => guidOf(c) === guid);
  if (child === undefined) return null;
  const path = joinPath(parent, child);
  const stat = await retryOnLoss(() => zk.exists(path));
  if (stat === null || stat.ephemeralOwner !== zk.sessionId) return null;
  return new JoinedNode(path, parent, stat.czxid, true);
}

/**
 * For an uncertain join (see QueueNode.uncertain): the listing without our
 * other nodes, which are deleted in the background. A certain join's
 * listing is returned as it is, at no cost.
 */
export function withoutStrays(zk: ZooKeeperClient, node: QueueNode, children: string[]): string[] {
  if (!node.uncertain) return children;
  const strays = children.filter((c) => c !== node.child && guidOf(c) === node.guid);
  if (strays.length === 0) return children;
  for (const stray of strays) leave(zk, joinPath(node.parent, stray)).catch(() => undefined);
  return children.filter((c) => !strays.includes(c));
}

/**
 * Every way out of a join but a grant removes our node before the caller
 * hears of it; if the caller gave up while the create was in flight, wait
 * for the create to settle and remove what it made. While connected, that
 * is a round trip or two. Disconnected, the create and the delete wait for
 * the reconnect (or for the session's expiry, which removes the node as
 * well): a caller's timeout or abort must not wait that long, so the
 * removal finishes in the background.
 */
export async function abandon(zk: ZooKeeperClient, joining: Promise<Enqueued>): Promise<void> {
  const removal = joining.then((joined) => leaveQueue(zk, joined.node)).catch(() => undefined);
  await whileConnected(zk, removal);
}

/** Leave the queue for good: our node, and for an uncertain join any other node carrying its guid. */
export function leaveQueue(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
  return node.uncertain ? leaveUncertain(zk, node) : leave(zk, node.path);
}

async function leaveUncertain(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
  await leave(zk, node.path);
  await dropOthers(zk, node);
}

/** For an uncertain join, once our node is gone: delete any other node carrying its guid. */
export async function dropOthers(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
  if (zk.state === 'expired' || zk.state === 'closed') return;
  try {
    const children = await listChildren(zk, node.parent);
    await Promise.all(children.filter((c) => guidOf(c) === node.guid).map((c) => leave(zk, joinPath(node.parent, c))));
  } catch {
    // The parent is gone (NONODE) or so is the session: nothing of ours is left either way.
  }
}

/**
 * Leave the queue: delete our node, repeating the delete across connection
 * losses (a lost delete reply is answered NONODE the second time). Ends when
 * the node is gone or the session is (which deletes it too). Every release
 * takes this path: one promise on the delete's, no async frames around it.
 */
export function leave(zk: ZooKeeperClient, path: string): Promise<void> {
  return zk.delete(path).then(undefined, (error: unknown) => {
    if (isCode(error, 'ZK_NONODE')) return;
    if (error instanceof ConnectionLossError) return leave(zk, path);
    if (zk.state === 'expired' || zk.state === 'closed') return;
    throw error;
  });
}

/**
 * Wait until our node is the lowest, starting behind `start.predecessor`,
 * with `start.ahead` nodes before ours (from `joined`, the listing the join
 * made, and its parent's czxid), and
 * tell `turn` how the wait ended. Each round watches only the predecessor
 * (exists with a watch; if it is already gone, look again at once), so a
 * release wakes one waiter, not the queue.
 *
 * When the predecessor goes, the waiter lists again rather than assuming it
 * is next (the predecessor may have been a waiter that gave up), except
 * when the predecessor was the head: nodes only ever join behind ours
 * (sequence order), so with the head gone nothing is ahead of us, and the
 * grant needs no listing (a release hands over in one notification, not a
 * notification and a round trip). Deeper in a lock's queue, the process's
 * knowledge of the queue (./queue-known.ts) tells the same when every node
 * ahead of ours is known gone; only when one is not does the waiter list.
 * That is sound only if our own node still
 * exists: so the waiter watches its own node too, from the start (in the
 * write that carries the predecessor's watch), and that watch then serves
 * the holding as well.
 *
 * The stopper (abort, timeout, session end) ends the wait with its reason;
 * the join then removes our node. `seen`, if given, is kept pointing at the
 * predecessor of the latest round. `positionOf` reads our place from a
 * listing: the node we wait for and how many nodes up to it are ahead (a
 * lock's `position`; a reader of a read-write lock waits for the nearest
 * write node before it, ./rw-order.ts).
 */
export function awaitTurn(
  zk: ZooKeeperClient,
  node: QueueNode,
  start: { readonly predecessor: string; readonly ahead: number },
  stopper: QueueStopper,
  turn: QueueTurn,
  seen?: { predecessor: string },
  positionOf: PositionOf = position,
  joined?: { readonly children: readonly string[] | ChildListing; readonly parentCzxid?: bigint | undefined },
): void {
  // The shared knowledge only for a lock's order (a read-write lock's is its own) and a queue deeper
  // than holder and us (behind the head, the ahead === 1 rule needs none): most waits make no table.
  const czxid = positionOf === position ? joined?.parentCzxid : undefined;
  let known: KnownQueue | null = null;
  if (czxid !== undefined && start.ahead > 1) {
    const own = sequenceOf(node.child);
    if (own !== null) {
      known = KnownQueue.use(zk, node.parent, czxid);
      known.merge(joined!.children, own);
    }
  }
  new TurnWaiter(zk, node, start.ahead, turn, seen, positionOf, known, czxid).start(stopper, start.predecessor);
}

/**
 * One waiting acquire, as a state object its callbacks resume (the exists
 * reply, the predecessor's watch, a listing, our node's deletion, the
 * stop): while thousands of acquires wait on one client, each keeps this
 * object, its watch closure and the client's watch entries, and no
 * suspended async function, race or promise chain.
 */
class TurnWaiter implements OwnNode, StopReceiver {
  readonly #zk: ZooKeeperClient;
  readonly #node: QueueNode;
  readonly #seen: { predecessor: string } | undefined;
  readonly #positionOf: PositionOf;
  /** Told once, then null: the wait is over (and its watches' late calls find nothing to do). */
  #turn: QueueTurn | null;
  /** How many nodes are ahead of ours, as the latest listing showed. */
  #ahead: number;
  /** The predecessor's path while its exists or watch is awaited, else null. */
  #watching: string | null = null;
  /** The process's knowledge of this deep queue (./queue-known.ts), while we use it; null for most waits. */
  #known: KnownQueue | null;
  /** The parent's czxid from the join's listing, for a lock's order (else undefined): finds the table deeper waiters made. */
  readonly #czxid: bigint | undefined;
  /** The predecessor's watch: one per waiter, for all its rounds. */
  readonly #watch = (event: WatchEvent): void => {
    if (this.#turn === null || event.path !== this.#watching) return;
    this.#watching = null;
    const gone = event.type === 'deleted';
    if (gone) this.#told()?.gone(event.path.slice(this.#node.parent.length + 1));
    this.#predecessorLeft(gone);
  };

  constructor(
    zk: ZooKeeperClient,
    node: QueueNode,
    ahead: number,
    turn: QueueTurn,
    seen: { predecessor: string } | undefined,
    positionOf: PositionOf,
    known: KnownQueue | null,
    czxid: bigint | undefined,
  ) {
    this.#zk = zk;
    this.#node = node;
    this.#turn = turn;
    this.#seen = seen;
    this.#positionOf = positionOf;
    this.#ahead = ahead;
    this.#known = known;
    this.#czxid = czxid;
  }

  get path(): string {
    return this.#node.path;
  }

  /**
   * Listen for the stop, then watch our node and the predecessor (in one
   * write). The stopper keeps the waiter until it is disposed (the join's
   * end): a stop after the wait ended finds it over.
   */
  start(stopper: QueueStopper, predecessor: string): void {
    stopper.tell(this);
    if (this.#turn === null) return; // stopped already
    watchOwnNodeNow(this.#zk, this);
    this.#watchPredecessor(predecessor);
  }

  /** The stop (abort, timeout, session end): the wait ends with its reason. */
  stopped(reason: unknown): void {
    this.#end()?.failed(reason);
  }

  get [NODE_DONE](): boolean {
    return this.#turn === null;
  }

  /** Our own node was deleted (its watch, ./holding.ts): the wait ends, 'gone'. */
  [NODE_DELETED](): void {
    this.#end()?.arrived('gone');
  }

  #end(): QueueTurn | null {
    const turn = this.#turn;
    this.#turn = null;
    this.#watching = null;
    this.#known?.unuse();
    this.#known = null;
    return turn;
  }

  /**
   * Our turn: tell the process's knowledge (every node below ours is gone,
   * unless this join is uncertain: its strays, which the listing's position
   * ignores, may still be there), then end the wait.
   */
  #granted(): void {
    const known = this.#told();
    if (known !== null && !this.#node.uncertain) {
      const own = sequenceOf(this.#node.child);
      if (own !== null) known.headed(own);
    }
    this.#end()?.arrived('turn');
  }

  #watchPredecessor(predecessor: string): void {
    // For lock-delay (./lock-delay.ts): the last predecessor we waited behind.
    if (this.#seen !== undefined) this.#seen.predecessor = predecessor;
    const path = joinPath(this.#node.parent, predecessor);
    this.#watching = path;
    this.#exists(path);
  }

  /** The table a fact we see goes to: ours, or for a waiter that keeps none, the one deeper waiters made (if any). */
  #told(): KnownQueue | null {
    if (this.#known !== null) return this.#known;
    return this.#czxid === undefined ? null : KnownQueue.find(this.#zk, this.#node.parent, this.#czxid);
  }

  /** The process knows every node ahead of ours gone (./queue-known.ts): we head the queue. */
  #knownHead(): boolean {
    const known = this.#known;
    if (known === null) return false;
    const own = sequenceOf(this.#node.child);
    return own !== null && known.nothingBelow(own);
  }

  /** exists with the watch, sent again across connection losses (a read). */
  #exists(path: string): void {
    this.#zk.exists(path, { watch: this.#watch }).then(
      (stat) => {
        if (stat !== null || this.#watching !== path || this.#turn === null) return;
        this.#watching = null;
        // Gone on our session, which listed it: a fact.
        this.#told()?.gone(path.slice(this.#node.parent.length + 1));
        this.#predecessorLeft(true);
      },
      (error: unknown) => {
        if (this.#watching !== path || this.#turn === null) return;
        if (error instanceof ConnectionLossError) return this.#exists(path);
        // Session trouble: the listing reports it.
        this.#watching = null;
        this.#predecessorLeft(false);
      },
    );
  }

  /** The predecessor is gone (true: deleted), or something else happened to it (false: its data changed, a failed exists): look again. */
  #predecessorLeft(gone: boolean): void {
    if (gone && (this.#ahead === 1 || this.#knownHead())) {
      this.#granted();
      return;
    }
    listChildren(this.#zk, this.#node.parent).then(
      (listing) => {
        if (this.#turn === null) return;
        let where: TurnOutcome | null;
        try {
          where = this.#positionOf(withoutStrays(this.#zk, this.#node, listing), this.#node.child);
        } catch (error) {
          this.#end()?.failed(error);
          return;
        }
        if (where === null) {
          this.#end()?.arrived('gone');
          return;
        }
        // Our session's listing, our node in it: its absences below ours are facts for the process's knowledge.
        if (this.#known !== null) {
          const own = sequenceOf(this.#node.child);
          if (own !== null) this.#known.merge(listing, own);
        }
        if (where.turn) this.#granted();
        else {
          this.#ahead = where.ahead;
          this.#watchPredecessor(where.predecessor);
        }
      },
      (error: unknown) => this.#end()?.failed(error),
    );
  }
}

/** A waiter's own node, for its watch (./holding.ts): its deletion ends the wait. */
export class WaitingNode implements OwnNode {
  done = false;
  isDeleted = false;
  readonly deleted: Promise<false>;
  #wake!: (value: false) => void;

  constructor(readonly path: string) {
    this.deleted = new Promise<false>((resolve) => {
      this.#wake = resolve;
    });
  }

  get [NODE_DONE](): boolean {
    return this.done;
  }

  [NODE_DELETED](): void {
    if (this.done) return;
    this.isDeleted = true;
    this.#wake(false);
  }
}

/** Who is behind a queue node (null: it left meanwhile). One read. */
export async function readEntry(zk: ZooKeeperClient, path: string): Promise<QueueEntry | null> {
  try {
    const { data, stat } = await retryOnLoss(() => zk.getData(path));
    return { path, token: stat.czxid, owner: Buffer.from(data).toString('utf8'), sessionId: stat.ephemeralOwner };
  } catch (error) {
    if (isCode(error, 'ZK_NONODE')) return null;
    throw error;
  }
}
