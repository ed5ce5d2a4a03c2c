/**
 * A queue's cached view (the core's QueueObserver, ../../../queue-observer.ts)
 * over ZooKeeper: a children watch on the queue's parent invalidates the
 * cache, so while nothing changes a lookup is answered locally. The head
 * alone reads one node; the whole queue reads every one.
 */
import { isCode } from '../../../errors.js';
import { QueueObserver } from '../../../queue-observer.js';
import type { ClientState, ZooKeeperClient } from '../client.js';
import { joinPath } from '../paths.js';
import { retryOnLoss } from './connection-loss.js';
import { readEntry, type QueueEntry } from './queue.js';
import { sortQueue } from './queue-order.js';

export class ZooKeeperQueueObserver extends QueueObserver<QueueEntry> {
  readonly #zk: ZooKeeperClient;
  readonly #parent: string;
  /** Bumped on every invalidation: a watch left by an older read fires into nothing. */
  #generation = 0;

  constructor(zk: ZooKeeperClient, parent: string) {
    super();
    this.#zk = zk;
    this.#parent = parent;
    zk.on('state', this.#onState);
  }

  /**
   * The cache is only as good as the children watch behind it. A
   * disconnection keeps it (setWatches re-arms the watch on reconnect and
   * fires it if the queue changed meanwhile), but an expired or closed
   * session has lost its watches for good: drop the cache, so the next
   * lookup fails with the session's error instead of naming a holder that
   * may have left long ago.
   */
  readonly #onState = (state: ClientState): void => {
    if (state === 'expired' || state === 'closed') this.#invalidate(this.#generation);
  };

  protected release(): void {
    this.#zk.off('state', this.#onState);
  }

  #invalidate(generation: number): void {
    if (this.closed || generation !== this.#generation) return;
    this.#generation++;
    this.changed();
  }

  protected override readHead(): Promise<QueueEntry | null> {
    return this.#load();
  }

  protected readEntries(): Promise<QueueEntry[]> {
    return this.#loadEntries();
  }

  async #load(): Promise<QueueEntry | null> {
    for (;;) {
      const children = await this.#children();
      if (children === null) return null;
      const first = children[0];
      if (first === undefined) return null;
      const head = await readEntry(this.#zk, joinPath(this.#parent, first));
      // Null: the head left between the listing and the read; list again.
      if (head !== null) return head;
    }
  }

  async #loadEntries(): Promise<QueueEntry[]> {
    const children = await this.#children();
    if (children === null) return [];
    const read = await Promise.all(children.map((child) => readEntry(this.#zk, joinPath(this.#parent, child))));
    // Null: that node left between the listing and its read (the watch has fired for it).
    return read.filter((entry): entry is QueueEntry => entry !== null);
  }

  /** The queue's children in grant order, leaving a watch that fires on its next change; null while it has no parent. */
  async #children(): Promise<string[] | null> {
    const generation = this.#generation;
    const watch = (): void => this.#invalidate(generation);
    for (;;) {
      try {
        return sortQueue(await retryOnLoss(() => this.#zk.getChildren(this.#parent, { watch })));
      } catch (error) {
        if (!isCode(error, 'ZK_NONODE')) throw error;
        // No queue yet: be told when it appears.
        const stat = await retryOnLoss(() => this.#zk.exists(this.#parent, { watch }));
        if (stat === null) return null;
      }
    }
  }
}
