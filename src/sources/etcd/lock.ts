/**
 * A fair lock over etcd whose every grant carries a fencing token: the
 * create revision of our own key in the lock's queue.
 *
 *   const etcd = new Etcd3({ hosts: '127.0.0.1:2379' });
 *   const lock = await acquireLock(etcd, 'jobs/reindex');
 *   await withFence(db, 'jobs/reindex', lock.token, work);   // the resource checks the token
 *   await lock.release();
 *
 * Queue and token: ./queue.ts. The lease every grant hangs on: ./session.ts.
 */
import { type AcquireOptions, type Lock, type LockStatus, type LockObserver, type TryAcquireOptions } from '../../index.js';
import { lockGrant, traceAcquire } from '../../extend.js';
import type { EtcdClient, EtcdRequestOp, EtcdTxnResponse } from './client.js';
import { HeldKey } from './held-key.js';
import { checkClient, checkName } from './input.js';
import { joinAndWait } from './join.js';
import { EtcdQueueObserver, type ConnectionListener } from './observer.js';
import { LOCKS_ROOT, queuePrefix, readQueue, type EtcdQueueEntry, type QueueKey } from './queue.js';
import type { Lease } from './session.js';
import { etcdSourceIds } from './source-id.js';

/** A lock granted by etcd: the core's Lock, with our key and lease. */
export interface EtcdLock extends Lock {
  /** Our key in the lock's queue (its create revision is the token). */
  readonly key: string;
  /** The lease the key hangs on: the client's session. */
  readonly lease: bigint;
  /**
   * Apply `ops` (etcd txn operations) only while this lock is held: one txn
   * comparing our key's create revision. Resolves to their responses;
   * LockLostError (LOCK_LOST), nothing written, when not held (by our clock,
   * before any request, or by the compare). Use it for state kept in etcd itself.
   */
  ifHeld(ops: readonly EtcdRequestOp[]): Promise<EtcdTxnResponse['responses']>;
}

/** A held lock of any kind (plain, read, write): the core's held lock over our key. */
export class HeldLock extends lockGrant<EtcdRequestOp, EtcdTxnResponse['responses'], typeof HeldKey>('etcd', HeldKey) implements EtcdLock {
  constructor(etcd: EtcdClient, lease: Lease, name: string, node: QueueKey, revision: bigint, marginMs: number, kind: 'lock' | 'read' | 'write' = 'lock') {
    super(etcd, lease, kind, name, node, revision, marginMs);
  }
}

const leaveGrant = (lock: HeldLock): Promise<void> => lock.release();

/** Wait for the lock (fair: in the order of arrival) and return it. */
export function acquireLock(etcd: EtcdClient, name: string, options: AcquireOptions = {}): Promise<EtcdLock> {
  const build = (lease: Lease, node: QueueKey, revision: bigint, marginMs: number): HeldLock => new HeldLock(etcd, lease, name, node, revision, marginMs);
  // A waiting join ends in a grant or an error, never null.
  return traceAcquire('etcd', name, 'wait', () => etcdSourceIds.afterGrant(etcd, joinAndWait(etcd, { kind: 'lock', root: LOCKS_ROOT, name, mode: 'wait', options, ownerField: 'owner', build }), leaveGrant, options) as Promise<HeldLock>);
}

/** Take the lock if nobody holds it or waits for it; null otherwise (leaving nothing behind). */
export function tryAcquireLock(etcd: EtcdClient, name: string, options: TryAcquireOptions = {}): Promise<EtcdLock | null> {
  const build = (lease: Lease, node: QueueKey, revision: bigint, marginMs: number): HeldLock => new HeldLock(etcd, lease, name, node, revision, marginMs);
  return traceAcquire('etcd', name, 'try', () => etcdSourceIds.afterGrant(etcd, joinAndWait(etcd, { kind: 'lock', root: LOCKS_ROOT, name, mode: 'try', options, ownerField: 'owner', build }), leaveGrant, options));
}

/** The lock's queue in grant order: the first entry holds, the rest wait. One range request. */
export async function lockStatus(etcd: EtcdClient, name: string): Promise<LockStatus<EtcdQueueEntry>> {
  checkClient(etcd);
  checkName(name);
  const { entries } = await readQueue(etcd, LOCKS_ROOT, name);
  return { name, holder: entries[0] ?? null, waiters: entries.slice(1) };
}

/**
 * A lock's queue from a cache kept fresh by a watch: who holds it, who
 * waits, and a call whenever that may have changed (`fencekeeper status
 * --watch`, a resource admitting only the current holder's token).
 */
/** observeLock's answer: the core's LockObserver over etcd's queue entries, told of the watch's connection too. */
export interface EtcdLockObserver extends LockObserver<EtcdQueueEntry> {
  /** Told when the watch loses its connection and when it is back (changes meanwhile are reported after). */
  onConnection(listener: ConnectionListener): () => void;
}

/**
 * Watches an etcd lock's queue from outside it: the holder and the waiters
 * from a cache kept fresh by a watch; close() stops.
 */
export function observeLock(etcd: EtcdClient, name: string): EtcdLockObserver {
  checkClient(etcd);
  checkName(name);
  const queue = new EtcdQueueObserver(etcd, queuePrefix(LOCKS_ROOT, name));
  return {
    holder: async () => (await queue.entries())[0] ?? null,
    queue: () => queue.entries(),
    onChange: (listener) => queue.onChange(listener),
    onConnection: (listener) => queue.onConnection(listener),
    close: () => queue.close(),
  };
}
