/**
 * Our node at the head of a queue: the core's queue grant (../../../queue-grant.ts)
 * over ZooKeeper. It holds until the session's step-down deadline, a loss,
 * or until we leave (release / resign), which aborts the signal at once and
 * then deletes the node.
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
import { QueueGrant } from '../../../queue-grant.js';
import type { SequencerKind, SourceIdentity } from '../../../sequencer.js';
import type { Holding } from '../../../step-down.js';
import type { MultiOp, MultiResult, ZooKeeperClient } from '../client.js';
import { fencedMulti } from './fenced-multi.js';
import { NODE_DELETED, NODE_DONE, holdSession, nextEvent, sessionHoldings, watchOwnNode, type OwnNode, type SessionHoldings } from './holding.js';
import { leaveQueue, type QueueNode } from './queue.js';
import { zookeeperSourceIds } from './source-id.js';

export abstract class HeldNode extends QueueGrant<MultiOp, MultiResult[]> implements OwnNode {
  /** Our queue node's path. */
  readonly path: string;
  readonly #zk: ZooKeeperClient;
  readonly #node: QueueNode;
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

  /** `kind`: a lock's grant (plain, read, write, a permit's) or a leadership; `sequencerName`: a permit's slot (`<name>#<slot>`). */
  constructor(zk: ZooKeeperClient, kind: SequencerKind, name: string, node: QueueNode, marginMs: number, sequencerName: string = name) {
    super(kind, name, node.token, sequencerName);
    this.#zk = zk;
    this.#node = node;
    this.#marginMs = marginMs;
    this.path = node.path;
    this.#session = sessionHoldings(zk);
    this.#grantedAfterEnd = this.#session.endedBy !== null;
    watchOwnNode(zk, this);
    // Observed (fencekeeper/opentelemetry, a diagnostics subscriber): every grant is a holding from the start.
    if (holdingsObserved()) this.holding();
  }

  protected override entryJSON(): Record<string, string> {
    return { path: this.path };
  }

  protected sourceIdentity(): SourceIdentity | undefined {
    return zookeeperSourceIds.known(this.#zk);
  }

  /** ifHeld / ifLeader: `ops` in one multi behind a check of our node (./fenced-multi.ts). */
  protected fenced(what: 'ifHeld' | 'ifLeader', ops: readonly MultiOp[]): Promise<MultiResult[]> {
    return fencedMulti(this.#zk, this, this.lockLabel, what, ops);
  }

  get deadline(): number {
    return this.#zk.sessionDeadline - this.#marginMs;
  }

  /**
   * Unlooked-at and nothing ended it yet: note the release. Else the
   * holding (made now if need be, with whatever ended it first) is released.
   */
  protected override released(): void {
    if (this.#holding === null && this.#session.endedBy === null && this.#deletedAt === Infinity && performance.now() < this.deadline) {
      this.#leftAt = nextEvent();
    } else {
      this.holding().lose('released');
    }
  }

  protected leaveEntry(): Promise<void> {
    return this.leaveNode(this.#zk, this.#node);
  }

  /** How our node leaves the queue: a plain delete; a lock with lock-delay marks the release clean (./lock-delay.ts). */
  protected leaveNode(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
    return leaveQueue(zk, node);
  }

  get [NODE_DONE](): boolean {
    return this.leaving || this.#deletedAt !== Infinity || (this.#holding !== null && this.#holding.signal.aborted);
  }

  [NODE_DELETED](): void {
    if (this.#holding === null) {
      this.#deletedAt = nextEvent();
      this.#deletedTime = performance.now();
    }
    else this.#holding.lose('node_deleted', 'its node was deleted');
  }

  protected holding(): Holding {
    let holding = this.#holding;
    if (holding === null) {
      holding = holdSession(this.#zk, this.#session, this.lockLabel, this.#marginMs, this.#node.token);
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
