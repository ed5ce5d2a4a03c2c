/**
 * A queue watched from outside it (an election's leader, a lock's holder,
 * `fencekeeper status --watch`): the core's QueueObserver over etcd, its
 * cache invalidated by a watch on the queue's key prefix, so repeated reads
 * cost no request while nothing changes. The watch starts at the revision
 * after the first read, so no change after that read is missed; etcd3
 * resumes it from its last revision after a reconnect (read again then,
 * once, anyway).
 */
import { QueueObserver } from '../../extend.js';
import { int64, type EtcdClient, type EtcdWatcher } from './client.js';
import { entryOf, prefixEnd, type EtcdQueueEntry } from './queue.js';

export type ConnectionListener = (state: 'disconnected' | 'reconnected', detail: string) => void;

export class EtcdQueueObserver extends QueueObserver<EtcdQueueEntry> {
  readonly #etcd: EtcdClient;
  readonly #prefix: string;
  readonly #limit: number | undefined;
  readonly #connection = new Set<ConnectionListener>();
  #watcher: EtcdWatcher | null = null;

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
    void this.#watcher?.cancel().catch(() => undefined);
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
