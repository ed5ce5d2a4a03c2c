/**
 * A fair distributed lock whose every grant carries a fencing token.
 *
 *   const lock = await acquireLock(zk, 'jobs/reindex');
 *   await withFence(db, 'jobs/reindex', lock.token, work);   // the resource checks the token
 *   await lock.release();
 *
 * The lock tells a holder when to stop (lock.signal, lock.held); the token
 * lets the resource refuse a holder that did not stop in time. Queue and
 * token semantics: ./queue.ts. Holding and step-down: ./holding.ts.
 */
import { traceAcquire } from '../../../diagnostics.js';
import { isCode } from '../../../errors.js';
import type { Lock } from '../../../lock.js';
import type { ZooKeeperAcquireOptions, ZooKeeperTryAcquireOptions } from './acl-options.js';
import type { LockObserver, LockStatus } from '../../../lock-source.js';
import { lockGrant } from '../../../queue-grant.js';
import type { MultiOp, MultiResult, ZooKeeperClient } from '../client.js';
import { joinPath } from '../paths.js';
import { listChildren } from './connection-loss.js';
import { leaveCleanly } from './lock-delay.js';
import { HeldNode } from './held-node.js';
import { joinAndWait } from './join.js';
import { ZooKeeperQueueObserver } from './observer.js';
import { zookeeperSourceIds } from './source-id.js';
import { readEntry, type QueueEntry, type QueueNode } from './queue.js';
import { queueParent, sortQueue } from './queue-order.js';

export const LOCKS_ROOT = '/fencekeeper/locks';

/** A lock granted by ZooKeeper: the core's Lock, and the queue node behind it. */
export interface ZooKeeperLock extends Lock {
  /** Our queue node's path (its czxid is the token). */
  readonly path: string;
  /**
   * Apply `ops` (the client's multi operations) only while this lock is
   * held, in one multi with a check of our queue node: all or nothing, and
   * nothing once the node is gone. Resolves to the ops' results; refused
   * with LockLostError (LOCK_LOST), writing nothing, when the lock is not
   * held (by our clock, before any I/O, or by the server). Use it for state
   * kept in ZooKeeper itself.
   */
  ifHeld(ops: readonly MultiOp[]): Promise<MultiResult[]>;
}

/** A held lock of any kind (plain, read, write): the core's held lock over our queue node. */
export class HeldLock extends lockGrant<MultiOp, MultiResult[], typeof HeldNode>('zookeeper', HeldNode) implements ZooKeeperLock {
  constructor(zk: ZooKeeperClient, name: string, node: QueueNode, marginMs: number, kind: 'lock' | 'read' | 'write' = 'lock') {
    super(zk, kind, name, node, marginMs);
  }
}

const leaveGrant = (lock: HeldLock): Promise<void> => lock.release();

/** A lock taken with lockDelayMs: its release marks itself clean, in the multi that deletes its node (./lock-delay.ts). */
class DelayedLock extends HeldLock {
  protected override leaveNode(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
    return leaveCleanly(zk, node);
  }
}

/**
 * The holder of our node, made once joinAndWait has validated the options
 * (lockDelayMs 0 is off). One function for every acquire, not a closure
 * each: a waiting acquire keeps it.
 */
function buildLock(node: QueueNode, marginMs: number, zk: ZooKeeperClient, join: { readonly name: string; readonly options: ZooKeeperTryAcquireOptions }): HeldLock {
  return join.options.lockDelayMs ? new DelayedLock(zk, join.name, node, marginMs) : new HeldLock(zk, join.name, node, marginMs);
}

/** The options of an acquire that passes none: one object, never written to, for every such acquire. */
const NO_OPTIONS: ZooKeeperTryAcquireOptions = Object.freeze({});

/**
 * Wait for the lock (fair: in the order of arrival) and return it. With
 * `lockDelayMs`, a grant that follows an unclean end (the previous holder's
 * session expired, its node was deleted) waits that long first, so a
 * resource that cannot check tokens is not written while the old holder may
 * still finish a write; every participant of the lock must pass the same option.
 */
export function acquireLock(zk: ZooKeeperClient, name: string, options: ZooKeeperAcquireOptions = NO_OPTIONS): Promise<ZooKeeperLock> {
  const build = buildLock;
  // In 'wait' mode the join never answers null.
  return traceAcquire('zookeeper', name, 'wait', () => zookeeperSourceIds.afterGrant(zk, joinAndWait(zk, { kind: 'lock', root: LOCKS_ROOT, name, mode: 'wait', options, build }), leaveGrant, options) as Promise<HeldLock>);
}

/**
 * Take the lock if nobody holds it or waits for it; null otherwise (leaving
 * nothing behind). With `lockDelayMs`, a free lock whose previous holder
 * ended uncleanly is taken after that delay (our node keeps its place meanwhile).
 */
export function tryAcquireLock(zk: ZooKeeperClient, name: string, options: ZooKeeperTryAcquireOptions = NO_OPTIONS): Promise<ZooKeeperLock | null> {
  const build = buildLock;
  return traceAcquire('zookeeper', name, 'try', () => zookeeperSourceIds.afterGrant(zk, joinAndWait(zk, { kind: 'lock', root: LOCKS_ROOT, name, mode: 'try', options, build }), leaveGrant, options));
}

/**
 * The lock's queue in grant order: the first entry holds, the rest wait.
 * For operators (`fencekeeper status`); costs one read per entry.
 */
export async function lockStatus(zk: ZooKeeperClient, name: string): Promise<LockStatus<QueueEntry>> {
  const parent = queueParent(LOCKS_ROOT, name);
  let children: string[];
  try {
    children = await listChildren(zk, parent);
  } catch (error) {
    if (isCode(error, 'ZK_NONODE')) return { name, holder: null, waiters: [] };
    throw error;
  }
  const entries = await Promise.all(sortQueue(children).map((child) => readEntry(zk, joinPath(parent, child))));
  const queue = entries.filter((e): e is QueueEntry => e !== null); // null: left meanwhile
  return { name, holder: queue[0] ?? null, waiters: queue.slice(1) };
}

/**
 * Who holds a lock, from a cache kept fresh by a watch: a resource uses it
 * to admit only the current holder's token (verifyWithZooKeeper).
 */
/** observeLock's answer: the core's LockObserver over ZooKeeper's queue entries. */
export type ZooKeeperLockObserver = LockObserver<QueueEntry>;

/**
 * Watches a lock's queue from outside it: the holder and the waiters from a
 * cache kept fresh by a watch; close() stops.
 */
export function observeLock(zk: ZooKeeperClient, name: string): ZooKeeperLockObserver {
  const queue = new ZooKeeperQueueObserver(zk, queueParent(LOCKS_ROOT, name));
  return {
    holder: () => queue.head(),
    queue: () => queue.entries(),
    onChange: (listener) => queue.onChange(listener),
    close: () => queue.close(),
  };
}
