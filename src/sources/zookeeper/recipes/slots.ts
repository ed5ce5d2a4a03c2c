/**
 * A semaphore's slots: how the head of its queue takes one (./permit.ts).
 *
 * Under the semaphore's parent (a container whose data is the number of
 * permits N), beside the queue nodes `<guid>-lock-<seq>`, each held permit
 * is an ephemeral node `slot-<i>`, i in [0, N), its data `<guid> <owner>`
 * (the guid of the join that took it). A fixed name per slot makes the
 * claim atomic: two creates of `slot-3` cannot both succeed.
 *
 * Only the head of the queue claims, with one multi: create `slot-<i>` and
 * delete our queue node. All or nothing, so a permit never holds a slot and
 * a place in the queue at once, and our successor becomes the head exactly
 * when we stop being it (its predecessor watch fires on that delete). The
 * delete also makes a claim unrepeatable: two multis of one join (one whose
 * reply was lost, and the retry) cannot both apply, since both delete the
 * same queue node. After a lost reply we look for a slot carrying our guid
 * and owned by our session, and adopt it; only with none, and our queue
 * node still there, do we claim again.
 *
 * The head that finds every slot taken watches the slots themselves
 * (exists watches on `slot-0` .. `slot-<N-1>`, one socket write): a release
 * wakes the head only, never the waiters behind it, who watch their
 * predecessor in the queue as a lock's waiters do.
 *
 * The token is the slot node's czxid, read in the claim's socket write
 * (ZooKeeper 3.8 answers a create inside a multi without its Stat): taken
 * when the permit claims its slot, not when it joined the queue, so per slot
 * every later holder's token is larger, across crashes and session expiry.
 */
import { ConnectionLossError, LockLostError, PermitsMismatchError, ProtocolError, ZooKeeperError, isCode } from '../../../errors.js';
import type { QueueStopper } from '../../../queue-stopper.js';
import type { ZooKeeperClient } from '../client.js';
import { joinPath } from '../paths.js';
import type { NodeAcl } from './acl.js';
import { listChildren, retryOnLoss, whileConnected } from './connection-loss.js';
import { watchOwnNodeNow } from './holding.js';
import type { JoinClaim } from './join.js';
import { WaitingNode, dropOthers, leave, type Enqueued, type QueueNode } from './queue.js';

const SLOT = 'slot-';
const ignore = (): void => undefined;

/** The child name of slot `i`. */
export function slotChild(i: number): string {
  return `${SLOT}${i}`;
}

/** The lowest slot in [0, permits) no child holds, or -1. */
function firstFree(children: readonly string[], permits: number): number {
  const taken = new Set<number>();
  for (const child of children) {
    if (!child.startsWith(SLOT)) continue;
    const i = Number(child.slice(SLOT.length));
    if (Number.isInteger(i) && i >= 0 && i < permits) taken.add(i);
  }
  for (let i = 0; i < permits; i++) if (!taken.has(i)) return i;
  return -1;
}

/** A slot claimed by our join: its node (the holder's "own node") and the slot's index. */
export interface ClaimedSlot {
  readonly slot: number;
  readonly node: QueueNode;
}

type Attempt = { readonly kind: 'claimed'; readonly claimed: ClaimedSlot } | { readonly kind: 'taken' } | { readonly kind: 'gone' };

/** The slot side of one acquirePermit: the size check at the join, and the claim at the head. */
export class SlotClaim<T> implements JoinClaim<T> {
  readonly #zk: ZooKeeperClient;
  readonly #name: string;
  readonly #permits: number;
  readonly #owner: string;
  readonly #build: (claimed: ClaimedSlot, marginMs: number) => T;
  #parent = '';
  #sizeRead: Promise<{ data: Uint8Array; stat: { version: number } } | null> | null = null;

  constructor(zk: ZooKeeperClient, name: string, permits: number, owner: string, build: (claimed: ClaimedSlot, marginMs: number) => T) {
    this.#zk = zk;
    this.#name = name;
    this.#permits = permits;
    this.#owner = owner;
    this.#build = build;
  }

  /** The parent's data (the size), read right after our create, in its socket write. */
  start(parent: string): void {
    this.#parent = parent;
    this.#sizeRead = this.#zk.getData(parent).catch(() => null);
  }

  /**
   * Our node is in the parent: its size must be ours. A read that went out
   * with a create that did not make our node may have seen no parent or
   * another one, so then we read again. A parent without a size (just made
   * by the join, ./queue.ts) gets ours, written only over the version we
   * read: of two joins racing with different sizes, one write wins and the
   * other join reads it and is refused.
   */
  async joined(enqueued: Enqueued): Promise<void> {
    let read = enqueued.retried === true ? null : await this.#sizeRead;
    for (;;) {
      read ??= await retryOnLoss(() => this.#zk.getData(this.#parent));
      const text = Buffer.from(read.data).toString('utf8');
      if (text === '') {
        try {
          await this.#zk.setData(this.#parent, String(this.#permits), read.stat.version);
          return;
        } catch (error) {
          // Another join set it first, or our write's reply was lost: read what is there now.
          if (!isCode(error, 'ZK_BADVERSION') && !(error instanceof ConnectionLossError)) throw error;
          read = null;
          continue;
        }
      }
      const inUse = /^[1-9][0-9]{0,3}$/.test(text) ? Number(text) : NaN;
      if (Number.isNaN(inUse)) throw new ProtocolError(`${this.#parent} holds ${JSON.stringify(text.slice(0, 40))}, not a number of permits: it is not a fencekeeper semaphore`);
      if (inUse !== this.#permits) throw new PermitsMismatchError(this.#name, this.#permits, inUse);
      return;
    }
  }

  /**
   * Our node heads the queue: claim the lowest free slot, or (waiting)
   * watch the slots until one is released. While it waits, our queue node
   * is watched too: its deletion (an operator, a session expiring) ends the wait.
   */
  async take(node: QueueNode, marginMs: number, acl: NodeAcl | null, mode: 'wait' | 'try', stopper: QueueStopper, listing: readonly string[] | null, waiting: () => void): Promise<T | null> {
    // Our queue node is watched only once we wait for a slot (a claim that goes out at once needs no watch).
    const self = new WaitingNode(node.path);
    let watching = false;
    // The join's listing, when it made us the head: an uncontended permit claims without listing again.
    let known = listing;
    try {
      for (;;) {
        const children = known ?? (await Promise.race([listChildren(this.#zk, this.#parent), stopper.stopped]));
        known = null;
        if (self.isDeleted || !children.includes(node.child)) throw this.#gone(node);
        const free = firstFree(children, this.#permits);
        if (free === -1) {
          if (mode === 'try') return null;
          if (!watching) {
            watching = true;
            waiting();
            watchOwnNodeNow(this.#zk, self);
          }
          await Promise.race([this.#slotReleased(), self.deleted, stopper.stopped]);
          if (self.isDeleted) throw this.#gone(node);
          continue;
        }
        const attempt = await this.#claim(node, free, acl, stopper);
        if (attempt.kind === 'gone') throw this.#gone(node);
        if (attempt.kind === 'taken') continue;
        const { claimed } = attempt;
        try {
          // A stop that came while the claim was on its way still wins: give the slot back.
          stopper.check();
        } catch (error) {
          await whileConnected(this.#zk, leave(this.#zk, claimed.node.path).catch(ignore));
          throw error;
        }
        if (node.uncertain) dropOthers(this.#zk, node).catch(ignore);
        return this.#build(claimed, marginMs);
      }
    } finally {
      self.done = true;
    }
  }

  #gone(node: QueueNode): LockLostError {
    return new LockLostError(this.#name, 'node_deleted', `semaphore ${this.#name}: our queue node ${node.path} was deleted while waiting`);
  }

  /**
   * Resolves when a slot may have been released: an exists watch on each
   * slot (one socket write), the first deletion (or a slot already gone,
   * or any other event on one) ends the wait, and the head lists again.
   */
  #slotReleased(): Promise<void> {
    return new Promise<void>((resolve) => {
      const watch = (): void => resolve();
      for (let i = 0; i < this.#permits; i++) {
        retryOnLoss(() => this.#zk.exists(joinPath(this.#parent, slotChild(i)), { watch })).then(
          (stat) => {
            if (stat === null) resolve();
          },
          () => resolve(), // session trouble: the listing (or the stopper) reports it
        );
      }
    });
  }

  /**
   * One claim of slot `i`: the multi (create the slot, delete our queue
   * node) and, in the same write, a read of the slot for its czxid. If the
   * caller gives up while it is in flight, it finishes in the background
   * and gives back whatever it took.
   */
  async #claim(node: QueueNode, i: number, acl: NodeAcl | null, stopper: QueueStopper): Promise<Attempt> {
    const path = joinPath(this.#parent, slotChild(i));
    const applying = this.#zk.multi([
      { op: 'create', path, data: `${node.guid} ${this.#owner}`, mode: 'ephemeral', ...(acl !== null && { acl: acl.acl }) },
      { op: 'delete', path: node.path },
    ]);
    const reading = this.#zk.getData(path);
    reading.catch(ignore);
    const settled = applying.then(
      () => this.#read(node, path, i, reading),
      (error: unknown) => this.#afterFailure(node, error),
    );
    try {
      return await Promise.race([settled, stopper.stopped]);
    } catch (error) {
      // Stopped with the claim in flight: whatever it took goes back, in the background.
      settled.then((attempt) => (attempt.kind === 'claimed' ? leave(this.#zk, attempt.claimed.node.path) : undefined)).catch(ignore);
      throw error;
    }
  }

  /** The multi applied: our slot's czxid from the read that followed it. */
  async #read(node: QueueNode, path: string, i: number, reading: Promise<{ data: Uint8Array; stat: { czxid: bigint; ephemeralOwner: bigint } }>): Promise<Attempt> {
    let read: { data: Uint8Array; stat: { czxid: bigint; ephemeralOwner: bigint } };
    try {
      read = await reading.catch((error: unknown) => {
        if (error instanceof ConnectionLossError) return retryOnLoss(() => this.#zk.getData(path));
        throw error;
      });
    } catch (error) {
      if (isCode(error, 'ZK_NONODE')) return { kind: 'gone' }; // deleted already (an operator; our session's expiry)
      throw error;
    }
    if (!this.#ours(read, node)) return { kind: 'gone' };
    return { kind: 'claimed', claimed: this.#claimed(node, path, i, read.stat.czxid) };
  }

  /**
   * The multi failed. The slot was taken meanwhile (NODEEXISTS on the
   * create): list again. Our queue node was gone (NONODE on the delete), or
   * the reply was lost: a slot of ours is adopted if there is one, else we
   * claim again while our node is there.
   */
  async #afterFailure(node: QueueNode, error: unknown): Promise<Attempt> {
    if (error instanceof ZooKeeperError && error.opIndex === 0 && isCode(error, 'ZK_NODEEXISTS')) return { kind: 'taken' };
    const nodeGone = error instanceof ZooKeeperError && error.opIndex === 1 && isCode(error, 'ZK_NONODE');
    if (!nodeGone && !(error instanceof ConnectionLossError)) throw error;
    const adopted = await this.#findOurs(node);
    if (adopted !== null) return { kind: 'claimed', claimed: adopted };
    if (nodeGone) return { kind: 'gone' };
    return (await retryOnLoss(() => this.#zk.exists(node.path))) === null ? { kind: 'gone' } : { kind: 'taken' };
  }

  /** A slot carrying our join's guid and owned by our session (a claim whose reply was lost), or null. */
  async #findOurs(node: QueueNode): Promise<ClaimedSlot | null> {
    const children = await listChildren(this.#zk, this.#parent);
    const slots = children.filter((c) => c.startsWith(SLOT));
    const reads = await Promise.all(
      slots.map((child) =>
        retryOnLoss(() => this.#zk.getData(joinPath(this.#parent, child))).catch((error: unknown) => {
          if (isCode(error, 'ZK_NONODE')) return null;
          throw error;
        }),
      ),
    );
    for (let k = 0; k < slots.length; k++) {
      const read = reads[k];
      if (read === null || read === undefined || !this.#ours(read, node)) continue;
      const child = slots[k] as string;
      return this.#claimed(node, joinPath(this.#parent, child), Number(child.slice(SLOT.length)), read.stat.czxid);
    }
    return null;
  }

  /** A slot node of this join: its data starts with our guid, and our session owns it. */
  #ours(read: { data: Uint8Array; stat: { ephemeralOwner: bigint } }, node: QueueNode): boolean {
    return read.stat.ephemeralOwner === this.#zk.sessionId && Buffer.from(read.data).toString('utf8').startsWith(`${node.guid} `);
  }

  #claimed(node: QueueNode, path: string, slot: number, czxid: bigint): ClaimedSlot {
    return { slot, node: { path, parent: this.#parent, child: slotChild(slot), token: czxid, guid: node.guid, uncertain: false } };
  }
}
