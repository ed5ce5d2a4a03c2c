/**
 * A cached view of a queue: who is at its head (the lock holder, the
 * leader), and on demand the whole queue in grant order (`fencekeeper status
 * --watch`). A children watch on the queue's parent invalidates the cache, so
 * while nothing changes a lookup is answered locally: what a resource needs
 * to check every request's token against the lock service (Chubby's
 * CheckSequencer) without a round trip per request.
 */
import { isCode } from '../../../errors.js';
import type { ClientState, ZooKeeperClient } from '../client.js';
import { joinPath } from '../paths.js';
import { retryOnLoss } from './connection-loss.js';
import { readEntry, type QueueEntry } from './queue.js';
import { sortQueue } from './queue-order.js';

export class QueueObserver {
  readonly #zk: ZooKeeperClient;
  readonly #parent: string;
  #cache: Promise<QueueEntry | null> | null = null;
  #entriesCache: Promise<QueueEntry[]> | null = null;
  #generation = 0;
  #closed = false;
  readonly #listeners = new Set<() => void>();

  constructor(zk: ZooKeeperClient, parent: string) {
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

  head(): Promise<QueueEntry | null> {
    // Closed: no watch keeps a cache honest any more, so every call reads.
    if (this.#closed) return this.#load();
    if (this.#cache === null) {
      const load = this.#load();
      this.#cache = load;
      // A failed lookup is not cached: the next call asks again.
      load.catch(() => {
        if (this.#cache === load) this.#cache = null;
      });
    }
    return this.#cache;
  }

  /** The whole queue in grant order; the head alone (head()) reads one node, this reads every one. */
  entries(): Promise<QueueEntry[]> {
    if (this.#closed) return this.#loadEntries();
    if (this.#entriesCache === null) {
      const load = this.#loadEntries();
      this.#entriesCache = load;
      load.catch(() => {
        if (this.#entriesCache === load) this.#entriesCache = null;
      });
    }
    return this.#entriesCache;
  }

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Stop caching and notifying; head() still answers, with a fresh read each time. */
  close(): void {
    this.#zk.off('state', this.#onState);
    this.#closed = true;
    this.#cache = null;
    this.#entriesCache = null;
    this.#listeners.clear();
  }

  #invalidate(generation: number): void {
    if (this.#closed || generation !== this.#generation) return;
    this.#generation++;
    this.#cache = null;
    this.#entriesCache = null;
    for (const l of this.#listeners) l();
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
