/**
 * A queue watched from outside it (an election's leader, a lock's holder,
 * `fencekeeper status --watch`): its entries, answered from a cache that a
 * watch on the queue's key prefix invalidates, so repeated reads cost no
 * request while nothing changes. The watch starts at the revision after the
 * first read, so no change after that read is missed; etcd3 resumes it from
 * its last revision after a reconnect (read again then, once, anyway).
 */
import { int64, type EtcdClient, type EtcdWatcher } from './client.js';
import { entryOf, prefixEnd, type EtcdQueueEntry } from './queue.js';

export type ConnectionListener = (state: 'disconnected' | 'reconnected', detail: string) => void;

export class QueueObserver {
  readonly #etcd: EtcdClient;
  readonly #prefix: string;
  readonly #limit: number | undefined;
  readonly #listeners = new Set<() => void>();
  readonly #connection = new Set<ConnectionListener>();
  #cached: Promise<EtcdQueueEntry[]> | null = null;
  #watcher: EtcdWatcher | null = null;
  #closed = false;

  /** `limit`: read only the first entries (1: the head). */
  constructor(etcd: EtcdClient, prefix: string, limit?: number) {
    this.#etcd = etcd;
    this.#prefix = prefix;
    this.#limit = limit;
  }

  entries(): Promise<EtcdQueueEntry[]> {
    if (this.#closed) return this.#read();
    if (this.#cached === null) {
      const reading = this.#read();
      this.#cached = reading;
      reading.catch(() => {
        if (this.#cached === reading) this.#cached = null;
      });
    }
    return this.#cached;
  }

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  onConnection(listener: ConnectionListener): () => void {
    this.#connection.add(listener);
    return () => this.#connection.delete(listener);
  }

  close(): void {
    this.#closed = true;
    this.#cached = null;
    this.#listeners.clear();
    this.#connection.clear();
    void this.#watcher?.cancel().catch(() => undefined);
    this.#watcher = null;
  }

  readonly #changed = (): void => {
    this.#cached = null;
    for (const listener of [...this.#listeners]) listener();
  };

  async #read(): Promise<EtcdQueueEntry[]> {
    const response = await this.#etcd.kv.range({
      key: Buffer.from(this.#prefix, 'utf8'),
      range_end: prefixEnd(this.#prefix),
      sort_target: 'Create',
      sort_order: 'Ascend',
      ...(this.#limit !== undefined && { limit: this.#limit }),
    });
    if (!this.#closed && this.#watcher === null) this.#watch(int64(response.header.revision, 'revision') + 1n);
    return response.kvs.map(entryOf);
  }

  #watch(from: bigint): void {
    const watcher = this.#etcd.watch().prefix(this.#prefix).startRevision(from.toString()).watcher();
    watcher.on('put', this.#changed);
    watcher.on('delete', this.#changed);
    watcher.on('error', this.#changed);
    let connected = false;
    watcher.on('disconnected', (error) => {
      for (const listener of [...this.#connection]) listener('disconnected', `lost the watch on etcd (${error.message}); reconnecting`);
    });
    watcher.on('connected', () => {
      if (connected) {
        for (const listener of [...this.#connection]) listener('reconnected', 'watching etcd again');
        this.#changed();
      }
      connected = true;
    });
    this.#watcher = watcher;
  }
}
