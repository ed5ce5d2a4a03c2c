/**
 * Leader election on the same queue as the lock (seed 000: "election is the
 * acquire path with a longer lease"). The leader's epoch is the czxid of its
 * node, so every later leader's epoch is larger, across ZooKeeper failovers
 * too; downstream systems fence on it exactly as on a lock token.
 */
import { hostname } from 'node:os';
import { Holding } from './holding.js';
import { joinAndWait, type AcquireOptions } from './lock.js';
import { ELECTIONS_ROOT, leaveQueue, queueParent, type QueueNode } from './queue.js';
import { QueueObserver, type QueueHead } from './observer.js';
import type { FencingToken } from './token.js';
import type { ZooKeeperClient } from './zookeeper/client.js';

export interface CampaignOptions {
  /** Stop campaigning (rejects with its reason; our node is removed first). */
  readonly signal?: AbortSignal;
  /** This candidate's id, visible to observers. Default: hostname:pid. */
  readonly id?: string;
  /** See AcquireOptions.safetyMarginMs. */
  readonly safetyMarginMs?: number;
}

export interface Leadership {
  readonly name: string;
  readonly id: string;
  /** The czxid of the leader's node: fence downstream writes with it. */
  readonly epoch: FencingToken;
  readonly path: string;
  /** Aborts with LockLostError when this process must stop acting as leader. */
  readonly signal: AbortSignal;
  readonly held: boolean;
  /** Step down: delete our node (the next candidate is elected) and abort the signal. Idempotent. */
  resign(): Promise<void>;
}

class HeldLeadership implements Leadership {
  readonly name: string;
  readonly id: string;
  readonly epoch: FencingToken;
  readonly path: string;
  readonly #zk: ZooKeeperClient;
  readonly #node: QueueNode;
  readonly #holding: Holding;
  #resigning: Promise<void> | null = null;

  constructor(zk: ZooKeeperClient, name: string, id: string, node: QueueNode, marginMs: number) {
    this.#zk = zk;
    this.#node = node;
    this.name = name;
    this.id = id;
    this.epoch = node.token;
    this.path = node.path;
    this.#holding = new Holding(zk, `election ${name}`, node.path, marginMs);
  }

  get signal(): AbortSignal {
    return this.#holding.signal;
  }

  get held(): boolean {
    return this.#holding.held;
  }

  resign(): Promise<void> {
    if (this.#resigning === null) {
      this.#holding.lose('released');
      this.#resigning = leaveQueue(this.#zk, this.#node);
    }
    return this.#resigning;
  }
}

/** Stand for election; resolves when this candidate is the leader. */
export async function campaign(zk: ZooKeeperClient, name: string, options: CampaignOptions = {}): Promise<Leadership> {
  const id = options.id ?? `${hostname()}:${process.pid}`;
  const acquire: AcquireOptions = {
    owner: id,
    ...(options.signal !== undefined && { signal: options.signal }),
    ...(options.safetyMarginMs !== undefined && { safetyMarginMs: options.safetyMarginMs }),
  };
  const leadership = await joinAndWait(zk, ELECTIONS_ROOT, name, acquire, false, (node, margin) => new HeldLeadership(zk, name, id, node, margin));
  return leadership as Leadership;
}

export interface LeaderInfo {
  readonly id: string;
  readonly epoch: FencingToken;
  readonly path: string;
}

/**
 * Watch who leads `name` without campaigning. `current()` answers from a
 * cache that a children watch invalidates, so repeated calls cost no round
 * trip while nothing changes.
 */
export function observeLeader(zk: ZooKeeperClient, name: string): LeaderObserver {
  return new LeaderObserver(new QueueObserver(zk, queueParent(ELECTIONS_ROOT, name)));
}

export class LeaderObserver {
  readonly #queue: QueueObserver;
  constructor(queue: QueueObserver) {
    this.#queue = queue;
  }
  async current(): Promise<LeaderInfo | null> {
    const head: QueueHead | null = await this.#queue.head();
    return head === null ? null : { id: head.owner, epoch: head.token, path: head.path };
  }
  /** Called (with no arguments) whenever the leader may have changed. Returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    return this.#queue.onChange(listener);
  }
  close(): void {
    this.#queue.close();
  }
}
