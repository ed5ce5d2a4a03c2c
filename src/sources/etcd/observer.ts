/**
 * A queue watched from outside it (an election's leader, a lock's holder,
 * `fencekeeper status --watch`): the core's QueueObserver over etcd, its
 * cache invalidated by a watch on the queue's key prefix, so repeated reads
 * cost no request while nothing changes. The watch starts at the revision
 * after the first read, so no change after that read is missed; a broken
 * Watch stream resumes it from the revision it had reached (./watches.ts;
 * read again then, once, anyway), and a watch etcd can no longer resume
 * (compacted past it) is read anew and watched again from that read.
 */
import { QueueObserver } from '../../extend.js';
import { int64, type EtcdClient } from './client.js';
import { entryOf, prefixEnd, type EtcdQueueEntry } from './queue.js';
import { watchRange, type EtcdWatch } from './watches.js';

export type ConnectionListener = (state: 'disconnected' | 'reconnected', detail: string) => void;

export class EtcdQueueObserver extends QueueObserver<EtcdQueueEntry> {
  readonly #etcd: EtcdClient;
  readonly #prefix: string;
  readonly #limit: number | undefined;
  readonly #connection = new Set<ConnectionListener>();
  #watcher: EtcdWatch | null = null;

  /** `limit`: read only the first entries (1: the head). */
  constructor(etcd: EtcdClient, prefix: string, limit?: number) {
    super();
    this.#etcd = etcd;
    this.#prefix = prefix;
    this.#limit = limit;
  }

  protected readEntries(): Promise<EtcdQueueEntry[]> {
    return this.#read();
  }

  onConnection(listener: ConnectionListener): () => void {
    this.#connection.add(listener);
    return () => this.#connection.delete(listener);
  }

  protected release(): void {
    this.#connection.clear();
    this.#watcher?.cancel();
    this.#watcher = null;
  }

  readonly #changed = (): void => this.changed();

  async #read(): Promise<EtcdQueueEntry[]> {
    const response = await this.#etcd.kv.range({
      key: Buffer.from(this.#prefix, 'utf8'),
      range_end: prefixEnd(this.#prefix),
      sort_target: 'Create',
      sort_order: 'Ascend',
      ...(this.#limit !== undefined && { limit: this.#limit }),
    });
    if (!this.closed && this.#watcher === null) this.#watch(int64(response.header.revision, 'revision') + 1n);
    return response.kvs.map(entryOf);
  }

  #watch(from: bigint): void {
    const watch = watchRange(this.#etcd, Buffer.from(this.#prefix, 'utf8'), prefixEnd(this.#prefix), from, false, {
      put: this.#changed,
      deleted: this.#changed,
      disconnected: (error) => {
        for (const listener of [...this.#connection]) listener('disconnected', `lost the watch on etcd (${error.message}); reconnecting`);
      },
      resumed: () => {
        for (const listener of [...this.#connection]) listener('reconnected', 'watching etcd again');
        this.#changed();
      },
      // etcd can no longer say what changed since `from` (its history compacted past it): the next
      // read reads the queue anew and watches on from there.
      lost: () => {
        if (this.#watcher === watch) this.#watcher = null;
        this.#changed();
      },
    });
    this.#watcher = watch;
  }
}
