/**
 * A fair read-write lock whose every grant carries a fencing token:
 * readers share, a writer excludes everyone, in arrival order.
 *
 *   const read = await acquireReadLock(zk, 'reports/daily');     // with other readers
 *   const write = await acquireWriteLock(zk, 'reports/daily');   // alone
 *
 * One queue per name under /fencekeeper/rwlocks (apart from the plain locks
 * of /fencekeeper/locks: a read, a write and a plain lock of one name are
 * three different locks, their sequencers of kind 'read', 'write', 'lock').
 * Readers create `<guid>-read-<seq>`, writers `<guid>-write-<seq>`; who
 * holds and what each waits for: ./rw-order.ts. The join, the lost-create
 * adoption, the waiting, the step-down and leaving are the lock's
 * (./join.ts, ./queue.ts, ./held-node.ts).
 *
 * The token is our node's czxid. A writer holds only once every node ahead
 * of it is gone, and nodes are created in arrival order, so its token is
 * larger than that of every grant before it, read or write: a fence it
 * advanced refuses every earlier holder. A reader's token is larger than
 * every writer's before it; readers held together carry theirs in any order,
 * so a reader checks a fence without advancing it.
 */
import { traceAcquire } from '../../../diagnostics.js';
import { InvalidArgumentError } from '../../../errors.js';
import type { ZooKeeperClient } from '../client.js';
import type { ZooKeeperRwAcquireOptions, ZooKeeperRwTryAcquireOptions } from './acl-options.js';
import { joinAndWait } from './join.js';
import { HeldLock, type ZooKeeperLock } from './lock.js';
import type { QueueNode } from './queue.js';
import type { SequencerKind } from '../../../sequencer.js';
import { READ_MARKER, WRITE_MARKER, readerPosition, writerPosition } from './rw-order.js';
import { zookeeperSourceIds } from './source-id.js';

export const RW_LOCKS_ROOT = '/fencekeeper/rwlocks';

type RwKind = 'read' | 'write';

// A read or write lock is the plain lock's held lock of kind 'read' / 'write' (its sequencer's kind).
const leaveGrant = (lock: HeldLock): Promise<void> => lock.release();

/** The holder of a read or write lock's node: one function for every acquire (a waiting acquire keeps it). */
function buildRwLock(node: QueueNode, marginMs: number, zk: ZooKeeperClient, join: { readonly kind: SequencerKind; readonly name: string }): HeldLock {
  return new HeldLock(zk, join.name, node, marginMs, join.kind as RwKind);
}

function join(zk: ZooKeeperClient, kind: RwKind, name: string, mode: 'wait' | 'try', options: ZooKeeperRwAcquireOptions): Promise<HeldLock | null> {
  // Lock-delay marks a release in the lock's parent (./lock-delay.ts): a plain lock's, refused here rather than ignored.
  if (options !== null && typeof options === 'object' && (options as { lockDelayMs?: unknown }).lockDelayMs !== undefined) {
    return Promise.reject(new InvalidArgumentError('lockDelayMs applies to plain locks (acquireLock) only, not to read or write locks'));
  }
  const granting = joinAndWait(zk, {
    kind,
    root: RW_LOCKS_ROOT,
    name,
    mode,
    options,
    build: buildRwLock,
    marker: kind === 'read' ? READ_MARKER : WRITE_MARKER,
    position: kind === 'read' ? readerPosition : writerPosition,
  });
  return zookeeperSourceIds.afterGrant(zk, granting, leaveGrant, options);
}

/**
 * Wait for the read lock of `name` and return it: held together with every
 * other reader, never with a writer. Granted in arrival order: behind a
 * waiting writer a reader waits too, so writers never starve. Its token is
 * larger than every earlier writer's; readers held together carry tokens in
 * any order, so check a fence with it without advancing the fence.
 */
export function acquireReadLock(zk: ZooKeeperClient, name: string, options: ZooKeeperRwAcquireOptions = {}): Promise<ZooKeeperLock> {
  return traceAcquire('zookeeper', name, 'wait', () => join(zk, 'read', name, 'wait', options) as Promise<HeldLock>);
}

/** The read lock of `name` if no writer holds or waits for it; null otherwise (leaving nothing behind). */
export function tryAcquireReadLock(zk: ZooKeeperClient, name: string, options: ZooKeeperRwTryAcquireOptions = {}): Promise<ZooKeeperLock | null> {
  return traceAcquire('zookeeper', name, 'try', () => join(zk, 'read', name, 'try', options));
}

/**
 * Wait for the write lock of `name` and return it: held alone, with no
 * reader and no other writer, in arrival order. Its token is larger than
 * that of every grant of the name before it, read or write, so a fence it
 * advanced refuses every earlier holder.
 */
export function acquireWriteLock(zk: ZooKeeperClient, name: string, options: ZooKeeperRwAcquireOptions = {}): Promise<ZooKeeperLock> {
  return traceAcquire('zookeeper', name, 'wait', () => join(zk, 'write', name, 'wait', options) as Promise<HeldLock>);
}

/** The write lock of `name` if nobody holds or waits for it, reader or writer; null otherwise (leaving nothing behind). */
export function tryAcquireWriteLock(zk: ZooKeeperClient, name: string, options: ZooKeeperRwTryAcquireOptions = {}): Promise<ZooKeeperLock | null> {
  return traceAcquire('zookeeper', name, 'try', () => join(zk, 'write', name, 'try', options));
}
