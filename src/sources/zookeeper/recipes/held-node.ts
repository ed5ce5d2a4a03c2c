/**
 * Our node at the head of a queue: what a held lock and a leadership share.
 * It holds until the session's step-down deadline, a loss, or until we leave
 * (release / resign), which aborts the signal at once and then deletes the node.
 *
 * The step-down holding (its AbortController, its place on the session's
 * clock) is made when the holder first looks at `held` or `signal`. A holder
 * that never looks (acquire, write with the token, release) costs neither,
 * and loses nothing: `held` compares with the session's deadline when it is
 * read, the session's end is read from the client, and a deletion of our
 * node seen before is applied when the holding is made. From then on the
 * holding follows the session as every other one does. While anyone
 * subscribes to the holdings' diagnostics channels, it is made at the grant.
 */
import { performance } from 'node:perf_hooks';
import { holdingsObserved } from '../../../diagnostics.js';
import type { SequencerKind, Sequencer } from '../../../sequencer.js';
import { grantSequencer } from '../../../source-identity.js';
import type { Holding } from '../../../step-down.js';
import type { MultiOp, MultiResult, ZooKeeperClient } from '../client.js';
import { fencedMulti } from './fenced-multi.js';
import { NODE_DELETED, NODE_DONE, holdSession, nextEvent, sessionHoldings, watchOwnNode, type OwnNode, type SessionHoldings } from './holding.js';
import { leaveQueue, type QueueNode } from './queue.js';
import { zookeeperSourceIds } from './source-id.js';

export abstract class HeldNode implements OwnNode {
  readonly name: string;
  /** Our queue node's path. */
  readonly path: string;
  readonly #zk: ZooKeeperClient;
  readonly #node: QueueNode;
  readonly #kind: SequencerKind;
  /** The name LockLostError carries ('jobs/reindex', 'election primary'). */
  readonly #lock: string;
  readonly #marginMs: number;
  readonly #session: SessionHoldings;
  /** The session had already ended when we were granted (then its state alone decides). */
  readonly #grantedAfterEnd: boolean;
  #holding: Holding | null = null;
  /** When our node was found deleted / we left, as event numbers (./holding.ts nextEvent). */
  #deletedAt = Infinity;
  #leftAt = Infinity;
  /** When our node was found deleted, on the performance.now() clock. */
  #deletedTime = Infinity;
  #leaving: Promise<void> | null = null;
  #sequencer: Sequencer | null = null;

  /** `kind`: a lock's grant or a leadership. */
  constructor(zk: ZooKeeperClient, kind: SequencerKind, name: string, node: QueueNode, marginMs: number) {
    this.#zk = zk;
    this.#node = node;
    this.#kind = kind;
    this.#lock = kind === 'lock' ? name : `election ${name}`;
    this.#marginMs = marginMs;
    this.name = name;
    this.path = node.path;
    this.#session = sessionHoldings(zk);
    this.#grantedAfterEnd = this.#session.endedBy !== null;
    watchOwnNode(zk, this);
    // Observed (fencekeeper/opentelemetry, a diagnostics subscriber): every grant is a holding from the start.
    if (holdingsObserved()) this.#holdingNow();
  }

  /** The grant's sequencer (our kind, name and token, the ensemble's identity), made when first asked for. */
  get sequencer(): Sequencer {
    return (this.#sequencer ??= grantSequencer(this.#kind, this.name, zookeeperSourceIds.known(this.#zk), this.#node.token));
  }

  /** ifHeld / ifLeader: `ops` in one multi behind a check of our node (./fenced-multi.ts). */
  protected fenced(what: 'ifHeld' | 'ifLeader', ops: readonly MultiOp[]): Promise<MultiResult[]> {
    return fencedMulti(this.#zk, this, this.#lock, what, ops);
  }

  get signal(): AbortSignal {
    return this.#holdingNow().signal;
  }

  get held(): boolean {
    return this.#holdingNow().held;
  }

  get deadline(): number {
    return this.#zk.sessionDeadline - this.#marginMs;
  }

  /** Abort the signal, then delete our node. Idempotent: every call returns the first one's promise. */
  protected leave(): Promise<void> {
    if (this.#leaving === null) {
      // Unlooked-at and nothing ended it yet: note the release. Else the
      // holding (made now if need be, with whatever ended it first) is released.
      if (this.#holding === null && this.#session.endedBy === null && this.#deletedAt === Infinity && performance.now() < this.deadline) {
        this.#leftAt = nextEvent();
      } else {
        this.#holdingNow().lose('released');
      }
      this.#leaving = this.leaveNode(this.#zk, this.#node);
    }
    return this.#leaving;
  }

  /** How our node leaves the queue: a plain delete; a lock with lock-delay marks the release clean (./lock-delay.ts). */
  protected leaveNode(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
    return leaveQueue(zk, node);
  }

  get [NODE_DONE](): boolean {
    return this.#leaving !== null || this.#deletedAt !== Infinity || (this.#holding !== null && this.#holding.signal.aborted);
  }

  [NODE_DELETED](): void {
    if (this.#holding === null) {
      this.#deletedAt = nextEvent();
      this.#deletedTime = performance.now();
    }
    else this.#holding.lose('node_deleted', 'its node was deleted');
  }

  #holdingNow(): Holding {
    let holding = this.#holding;
    if (holding === null) {
      holding = holdSession(this.#zk, this.#session, this.#lock, this.#marginMs, this.#node.token);
      this.#holding = holding;
      // What would have ended it, had it existed from the grant on, in the order it happened.
      const endedAt = this.#grantedAfterEnd ? Infinity : this.#session.endedAt;
      const first = Math.min(this.#leftAt, this.#deletedAt, endedAt);
      if (first === Infinity) void holding.held; // a deadline already passed, or a session that just ended, ends it here
      else if (first === this.#leftAt) holding.lose('released');
      // Applied now, as of when it happened (a loss that came before the deadline is not a deadline).
      else if (first === this.#deletedAt) holding.lose('node_deleted', 'its node was deleted', this.#deletedTime);
      else holding.lose(this.#session.endedBy ?? 'closed', undefined, this.#session.endedTime);
    }
    return holding;
  }
}
