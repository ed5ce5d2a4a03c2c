/**
 * Our node at the head of a queue: what a held lock and a leadership share.
 * It holds until the session's step-down deadline, a loss, or until we leave
 * (release / resign), which aborts the signal at once and then deletes the node.
 */
import type { Holding } from '../../step-down.js';
import type { ZooKeeperClient } from '../client.js';
import { holdNode } from './holding.js';
import { leaveQueue, type QueueNode } from './queue.js';

export abstract class HeldNode {
  readonly name: string;
  /** Our queue node's path. */
  readonly path: string;
  readonly #zk: ZooKeeperClient;
  readonly #node: QueueNode;
  readonly #holding: Holding;
  #leaving: Promise<void> | null = null;

  /** `lock`: the name LockLostError carries ('jobs/reindex', 'election primary'). */
  constructor(zk: ZooKeeperClient, name: string, lock: string, node: QueueNode, marginMs: number) {
    this.#zk = zk;
    this.#node = node;
    this.name = name;
    this.path = node.path;
    this.#holding = holdNode(zk, lock, node.path, marginMs);
  }

  get signal(): AbortSignal {
    return this.#holding.signal;
  }

  get held(): boolean {
    return this.#holding.held;
  }

  get deadline(): number {
    return this.#holding.deadline;
  }

  /** Abort the signal, then delete our node. Idempotent: every call returns the first one's promise. */
  protected leave(): Promise<void> {
    if (this.#leaving === null) {
      this.#holding.lose('released');
      this.#leaving = leaveQueue(this.#zk, this.#node);
    }
    return this.#leaving;
  }
}
