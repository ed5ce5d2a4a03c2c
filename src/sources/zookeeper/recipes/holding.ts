/**
 * Holding a ZooKeeper queue node: the step-down clock (../../step-down.ts)
 * fed with the session, and the watch on our own node.
 *
 * The server expires a session it has not heard from for the negotiated
 * timeout, and it heard from us no earlier than the send time of the last
 * request whose reply arrived, so every holding of one client shares the
 * deadline ZooKeeperClient.sessionDeadline (that send time + the timeout),
 * and one clock: one timer per client, however many locks it holds. A
 * holding also ends at once when the session expires or the client closes
 * (or starts closing), and when our own node is deleted by anyone.
 */
import { performance } from 'node:perf_hooks';
import { ConnectionLossError } from '../../../errors.js';
import type { LossReason } from '../../../errors.js';
import { StepDownClock, safetyMargin, type Holding } from '../../../step-down.js';
import { clientInternals, type ZooKeeperClient } from '../client.js';
import type { WatchEvent } from '../watches.js';
import { perClient } from './per-client.js';
import type { FencingToken } from '../../../token.js';

/**
 * One client's session as its holdings see it: the step-down clock, and how
 * the session ended, if it has. The reason is kept because a holding is
 * made when its holder first looks (./held-node.ts): one made after the end
 * must carry the reason the end had when it happened (a close() while
 * disconnected is 'closed', even if the session then also expired locally).
 */
export class SessionHoldings {
  readonly clock: StepDownClock;
  /** How the session ended (the first of: close() called, expired, closed). Null: it has not. */
  endedBy: LossReason | null = null;
  /** When, as an event number (see nextEvent). */
  endedAt = Infinity;
  /** When, on the performance.now() clock. */
  endedTime = Infinity;

  constructor(zk: ZooKeeperClient) {
    this.clock = new StepDownClock({
      name: 'ZooKeeper',
      kind: 'zookeeper',
      grant: 'session',
      ended: () => (zk.state === 'expired' ? 'session_expired' : zk.state === 'closed' ? 'closed' : null),
      cause: () => clientInternals.get(zk)?.disconnectedBy() ?? null,
    });
    const end = (reason: LossReason): void => {
      if (this.endedBy === null) {
        this.endedBy = reason;
        this.endedAt = nextEvent();
        this.endedTime = performance.now();
      }
      this.clock.end(reason);
    };
    zk.on('state', (state) => {
      if (state === 'expired') end('session_expired');
      else if (state === 'closed') end('closed');
    });
    // Closing the client ends its holdings at once, before the session has finished ending.
    zk.on('closing', () => end('closed'));
  }
}

let events = 0;
/** Numbers the events that end a holding, so one made later can apply the first of them. */
export function nextEvent(): number {
  return ++events;
}

/** The holdings of `zk`'s session: made with the client's first grant, and listening to it from then on. */
export const sessionHoldings = perClient((zk) => new SessionHoldings(zk));

/** A holding on the session's clock, until the deadline, a loss, or release (`lose('released')`). */
export function holdSession(zk: ZooKeeperClient, session: SessionHoldings, lock: string, marginMs: number, token: FencingToken): Holding {
  return session.clock.hold({ lock, marginMs, deadline: () => zk.sessionDeadline, token });
}

/** Whether the holder of a node no longer needs its watch (released or lost). */
export const NODE_DONE = Symbol('fencekeeper.nodeDone');
/** Called once when our node is found deleted. */
export const NODE_DELETED = Symbol('fencekeeper.nodeDeleted');

/** What the own-node watch needs of a held node. */
export interface OwnNode {
  readonly path: string;
  readonly [NODE_DONE]: boolean;
  [NODE_DELETED](): void;
}

/**
 * Our own node vanishing (an operator's delete, a session expiry seen first
 * by the server) ends the holding, or the wait for it. One watcher function
 * per client serves every node (looked up by path), and the watches a turn
 * asks for go out together.
 *
 * A waiter watches its node from the start (it learns of a deletion while
 * it waits, and the watch serves the holding that follows: the holder takes
 * the entry over, no request of its own). A holder granted at once asks for
 * the watch on the next turn of the event loop: sent eagerly, it would leave
 * in a socket write of its own and cost a reply and a notification, and a
 * holder that releases within this turn never needs it. Nothing is missed
 * meanwhile: if the node is deleted first, exists() answers null.
 */
class OwnNodeWatches {
  readonly #zk: ZooKeeperClient;
  /** Nodes whose exists watch is set or being set, by path: the entry may change hands (waiter -> holder). */
  readonly #watched = new Map<string, OwnNode>();
  #pending: OwnNode[] = [];
  #scheduled = false;

  constructor(zk: ZooKeeperClient) {
    this.#zk = zk;
  }

  /** Watch from the next turn on, or at once if the node is watched already (taking its entry over). */
  soon(node: OwnNode): void {
    if (this.#watched.has(node.path)) {
      this.#watched.set(node.path, node);
      return;
    }
    this.#pending.push(node);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#flush);
    }
  }

  now(node: OwnNode): void {
    this.#watched.set(node.path, node);
    this.#check(node.path);
  }

  readonly #flush = (): void => {
    this.#scheduled = false;
    const pending = this.#pending;
    this.#pending = [];
    for (const node of pending) {
      if (node[NODE_DONE] || this.#watched.has(node.path)) continue;
      this.#watched.set(node.path, node);
      this.#check(node.path);
    }
  };

  readonly #onEvent = (event: WatchEvent): void => {
    const node = this.#watched.get(event.path);
    if (node === undefined) return;
    if (event.type === 'deleted') this.#gone(event.path);
    else if (!node[NODE_DONE]) this.#check(event.path); // its data changed: watch again
    else this.#watched.delete(event.path);
  };

  #gone(path: string): void {
    const node = this.#watched.get(path);
    this.#watched.delete(path);
    node?.[NODE_DELETED]();
  }

  #check(path: string): void {
    this.#zk.exists(path, { watch: this.#onEvent }).then(
      (stat) => {
        if (stat === null) this.#gone(path);
      },
      (error: unknown) => {
        const node = this.#watched.get(path);
        if (error instanceof ConnectionLossError && node !== undefined && !node[NODE_DONE]) this.#check(path);
        else this.#watched.delete(path); // session expiry and close reach the holding through the clock
      },
    );
  }
}

const ownNodeWatchesOf = perClient((zk) => new OwnNodeWatches(zk));

/** A holder's watch on its node: from the next turn on, or the waiter's watch taken over. */
export function watchOwnNode(zk: ZooKeeperClient, node: OwnNode): void {
  ownNodeWatchesOf(zk).soon(node);
}

/** A waiter's watch on its node, sent at once (with the predecessor's, in one write). */
export function watchOwnNodeNow(zk: ZooKeeperClient, node: OwnNode): void {
  ownNodeWatchesOf(zk).now(node);
}

/** The safety margin for this client's negotiated session timeout (default a quarter of it). */
export function sessionMargin(zk: ZooKeeperClient, requested: number | undefined): number {
  return safetyMargin(zk.sessionTimeoutMs, requested);
}
