/**
 * A cached view of who is at the head of a queue (the lock holder, the
 * leader). A children watch on the queue's parent invalidates the cache, so
 * while nothing changes a lookup is answered locally: what a resource needs
 * to check every request's token against the lock service (Chubby's
 * CheckSequencer) without a round trip per request.
 */
import { ZooKeeperError } from './errors.js';
import { retryOnLoss, sortQueue } from './queue.js';
import type { FencingToken } from './token.js';
import type { ClientState, ZooKeeperClient } from './zookeeper/client.js';
import { joinPath } from './zookeeper/paths.js';

export interface QueueHead {
  readonly path: string;
  readonly token: FencingToken;
  /** The node's data: the holder's owner string / the leader's id. */
  readonly owner: string;
  readonly sessionId: bigint;
}

export class QueueObserver {
  readonly #zk: ZooKeeperClient;
  readonly #parent: string;
  #cache: Promise<QueueHead | null> | null = null;
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

  head(): Promise<QueueHead | null> {
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

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Stop caching and notifying; head() still answers, with a fresh read each time. */
  close(): void {
    this.#zk.off('state', this.#onState);
    this.#closed = true;
    this.#cache = null;
    this.#listeners.clear();
  }

  #invalidate(generation: number): void {
    if (this.#closed || generation !== this.#generation) return;
    this.#generation++;
    this.#cache = null;
    for (const l of this.#listeners) l();
  }

  async #load(): Promise<QueueHead | null> {
    const generation = this.#generation;
    const watch = (): void => this.#invalidate(generation);
    for (;;) {
      let children: string[];
      try {
        children = await retryOnLoss(() => this.#zk.getChildren(this.#parent, { watch }));
      } catch (error) {
        if (!(error instanceof ZooKeeperError && error.code === 'ZK_NONODE')) throw error;
        // No queue yet: be told when it appears.
        const stat = await retryOnLoss(() => this.#zk.exists(this.#parent, { watch }));
        if (stat === null) return null;
        continue;
      }
      const first = sortQueue(children)[0];
      if (first === undefined) return null;
      const path = joinPath(this.#parent, first);
      try {
        const { data, stat } = await retryOnLoss(() => this.#zk.getData(path));
        return { path, token: stat.czxid, owner: Buffer.from(data).toString('utf8'), sessionId: stat.ephemeralOwner };
      } catch (error) {
        // The head left between the listing and the read: list again.
        if (error instanceof ZooKeeperError && error.code === 'ZK_NONODE') continue;
        throw error;
      }
    }
  }
}
