/**
 * A token source bound to its client: what code that works with any source
 * (the CLI, the demo, a scoped `withLock`, a comparison of sources) takes
 * instead of a client.
 *
 *   const source = zookeeperSource(zk);       // or a Redis / Redlock / etcd source
 *   const lock = await source.acquireLock('jobs/reindex', { timeoutMs: 5000 });
 *   try { await withFence(db, 'jobs/reindex', lock.token, work); } finally { await lock.release(); }
 *
 * A source is bound to exactly one client, or to one set of clients that act
 * as one source (Redlock's independent nodes); its own settings (a TTL, a
 * key prefix) are fixed when it is made, so the methods take only the options
 * every source understands. Grants from two sources never compare: tokens are
 * ordered within one source's history only.
 *
 * To implement one: hand out Lock / Leadership (./lock.ts) whose `held` and
 * `signal` come from a StepDownClock (./step-down.ts) fed with the source's
 * own deadline; validate every argument before the first request; leave
 * nothing behind (no key, no node) on any way out but a grant.
 */
import type { AcquireOptions, CampaignOptions, Leadership, Lock, Permit, PermitOptions, TryAcquireOptions, TryPermitOptions } from './lock.js';
import type { SourceIdentity } from './sequencer.js';
import type { FencingToken } from './token.js';

/**
 * A token source bound to its client (zookeeperSource(zk), etcdSource(etcd),
 * redisSource(redis)): code that takes a LockSource works with any of them.
 * Every grant it hands out is a Lock or Leadership with a fencing token.
 */
export interface LockSource {
  /** Which kind of source this is: 'zookeeper', 'redis', 'redlock', 'etcd' ('memory': memorySource() of fencekeeper/testing). Stable: code may branch on it. */
  readonly kind: string;
  /** For people (logs, `fencekeeper status`): where the source is, never its credentials. */
  readonly description: string;
  /** Wait for the lock (in the order of arrival where the source queues waiters) and return it. */
  acquireLock(name: string, options?: AcquireOptions): Promise<Lock>;
  /** Take the lock only if it is free at once; null otherwise, leaving nothing behind. */
  tryAcquireLock(name: string, options?: TryAcquireOptions): Promise<Lock | null>;
  /**
   * A read lock: held together with every other read lock of the name, never
   * with its write lock. Read, write and plain locks of one name are separate
   * namespaces (sequencer kinds 'read', 'write', 'lock'). Granted in arrival
   * order: a waiting writer holds back readers that arrive after it, so a
   * writer never starves. Readers held together may carry tokens in any
   * order, so a reader checks a fence without advancing it (`{ advance:
   * false }`). Present on the queueing sources (ZooKeeper, etcd, PostgreSQL,
   * memorySource); absent on Redis.
   */
  acquireReadLock?(name: string, options?: AcquireOptions): Promise<Lock>;
  /** acquireReadLock only if it can be granted at once; null otherwise, leaving nothing behind. */
  tryAcquireReadLock?(name: string, options?: TryAcquireOptions): Promise<Lock | null>;
  /**
   * The write lock of a read-write pair: held alone, with no reader and no
   * other writer. Its token is larger than every grant of the name before
   * it, read or write, so a fence it advanced refuses every earlier reader
   * and writer.
   */
  acquireWriteLock?(name: string, options?: AcquireOptions): Promise<Lock>;
  /** acquireWriteLock only if it can be granted at once; null otherwise, leaving nothing behind. */
  tryAcquireWriteLock?(name: string, options?: TryAcquireOptions): Promise<Lock | null>;
  /**
   * One of `options.permits` permits of a semaphore, waiting in arrival
   * order: at most that many are held at once. The Permit holds one slot;
   * its token and sequencer (`<name>#<slot>`) fence that slot's resource.
   */
  acquirePermit?(name: string, options: PermitOptions): Promise<Permit>;
  /** acquirePermit only if a slot is free at once; null otherwise, leaving nothing behind. */
  tryAcquirePermit?(name: string, options: TryPermitOptions): Promise<Permit | null>;
  /** Stand for election; resolves when elected. Absent on a source without elections. */
  campaign?(name: string, options?: CampaignOptions): Promise<Leadership>;
  /** The holder and the waiters of a lock, for operators. Absent where a source cannot list them. */
  lockStatus?(name: string): Promise<LockStatus>;
  /**
   * A lock's queue watched from outside it, answered from a cache the
   * source keeps fresh (a resource checking each request's token against
   * the holder, `fencekeeper status --watch`). Every source that queues its
   * waiters has it (ZooKeeper, etcd); absent where there is no queue to watch.
   */
  observeLock?(name: string): LockObserver;
  /** The identity its sequencers carry (kind and id): what a sequencer presented to a resource must name. */
  identity?(): Promise<SourceIdentity>;
}

/**
 * The one observer contract of a queueing source's lock (LockSource.observeLock):
 * the holder and the whole queue, read from a cache a watch keeps fresh,
 * onChange when they may have changed, close to stop.
 */
export interface LockObserver<Entry extends LockStatusEntry = LockStatusEntry> extends SourceObserver {
  /** The holder (null: free), from the cache while the queue has not changed. */
  holder(): Promise<Entry | null>;
  /** The whole queue in grant order, from the cache while it has not changed. */
  queue(): Promise<Entry[]>;
}

/** One grant or waiter in a lock's queue, as its source reports it. Sources add their own fields. */
export interface LockStatusEntry {
  readonly token: FencingToken;
  /** AcquireOptions.owner of that acquire. */
  readonly owner: string;
}

/**
 * What every observer of a lock or an election has, whatever its source
 * (observeLock, observeLeader): reads answered from a cache that the source
 * keeps fresh, a call when what it watches may have changed, and a stop.
 */
export interface SourceObserver {
  /** Called (with no arguments) whenever what it watches may have changed. Returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
  /** Stop caching and notifying; its reads still answer, with a fresh read each time. */
  close(): void;
}

/**
 * A lock's queue as an operator sees it (lockStatus, `fencekeeper status`):
 * the holder and the waiters, each with its token and owner.
 */
export interface LockStatus<Entry extends LockStatusEntry = LockStatusEntry> {
  readonly name: string;
  readonly holder: Entry | null;
  /** In the order they will be granted. */
  readonly waiters: readonly Entry[];
}
