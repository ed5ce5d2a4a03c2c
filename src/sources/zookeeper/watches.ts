import { EventType } from './protocol.js';

/** What a watch notification reports: a node created, deleted, its data or its children changed. */
export type WatchEventType = 'created' | 'deleted' | 'dataChanged' | 'childrenChanged';
/** A watch notification: what happened (WatchEventType) and the node's path. */
export interface WatchEvent { readonly type: WatchEventType; readonly path: string }
/** A one-shot watch callback, called with the WatchEvent. */
export type Watcher = (event: WatchEvent) => void;

/** Which table a watch lives in, as ZooKeeper's server keeps them (ZKWatchManager). */
export type WatchKind = 'data' | 'exist' | 'child';

const EVENT_NAMES: ReadonlyMap<number, WatchEventType> = new Map([
  [EventType.nodeCreated, 'created'],
  [EventType.nodeDeleted, 'deleted'],
  [EventType.nodeDataChanged, 'dataChanged'],
  [EventType.nodeChildrenChanged, 'childrenChanged'],
]);

/**
 * The client's one-shot watches, by kind and (client-side, un-chrooted) path.
 * A watch is registered when the reply to the request that set it arrives,
 * and removed when an event that triggers it is delivered: ZooKeeper's server
 * forgets a watch once it has fired, so the client does too. The tables are
 * what `setWatches` sends after a reconnect.
 */
export class WatchRegistry {
  // One watcher per path is the common case (a lock's holder watches its own node, a
  // waiter its predecessor: one path each), so a path's entry is that watcher itself
  // until a second one comes; only then a Set. A Set of one costs about 150 bytes more
  // per watched path (the Set and its hash table), at 100,000 locks 15 MB.
  readonly #tables: Record<WatchKind, Map<string, Watcher | Set<Watcher>>> = {
    data: new Map(),
    exist: new Map(),
    child: new Map(),
  };

  add(kind: WatchKind, path: string, watcher: Watcher): void {
    const table = this.#tables[kind];
    const entry = table.get(path);
    if (entry === undefined) table.set(path, watcher);
    else if (entry instanceof Set) entry.add(watcher);
    else if (entry !== watcher) table.set(path, new Set([entry, watcher]));
  }

  paths(kind: WatchKind): string[] {
    return [...this.#tables[kind].keys()];
  }

  get size(): number {
    return this.#tables.data.size + this.#tables.exist.size + this.#tables.child.size;
  }

  /**
   * The watchers an event triggers, removed from the tables (ZooKeeper's
   * materialize rules): created/dataChanged fire data and exist watches,
   * deleted fires data, exist and child watches, childrenChanged fires child
   * watches. A watcher set on several tables for one path is called once.
   */
  take(type: number, path: string): { event: WatchEvent; watchers: Watcher[] } | null {
    const name = EVENT_NAMES.get(type);
    if (name === undefined) return null;
    const kinds: WatchKind[] =
      name === 'childrenChanged' ? ['child'] : name === 'deleted' ? ['data', 'exist', 'child'] : ['data', 'exist'];
    const watchers = new Set<Watcher>();
    for (const kind of kinds) {
      const entry = this.#tables[kind].get(path);
      if (entry === undefined) continue;
      this.#tables[kind].delete(path);
      if (entry instanceof Set) for (const w of entry) watchers.add(w);
      else watchers.add(entry);
    }
    return { event: { type: name, path }, watchers: [...watchers] };
  }

  clear(): void {
    for (const table of Object.values(this.#tables)) table.clear();
  }
}
