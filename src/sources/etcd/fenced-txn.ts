/**
 * Writes to etcd itself that succeed only while the lock (or leadership) is
 * held: `lock.ifHeld(ops)`, `leadership.ifLeader(ops)`, etcd's counterpart of
 * the ZooKeeper ones (src/sources/zookeeper/recipes/fenced-multi.ts).
 *
 *   await lock.ifHeld([{ request_put: { key: Buffer.from('jobs/state'), value: Buffer.from('done') } }]);
 *
 * The ops are the success branch of one txn whose compare is our own key's
 * create revision (the token): etcd applies them all only if our key still
 * exists as the one we created, and none once it is gone (deleted, or taken
 * with its lease when the lease expired), whatever our clock says. A missing
 * key compares with create revision 0, and a key made again by anyone else
 * has a later one: both refuse. Nodes only join behind ours, so while our key
 * exists we are still at the head.
 *
 * The contract:
 *   - ops: etcd's own txn operations (the KV service's RequestOp:
 *     request_put, request_delete_range, request_range), at least one, none
 *     on our own key (deleting it would be a release the holding never hears of).
 *   - result: the txn's responses to those ops, in order.
 *   - refused: LockLostError (LOCK_LOST), nothing written: before any request
 *     when `held` is already false by our step-down clock (reason: why it
 *     ended), and when etcd's compare fails (reason node_deleted: our key is
 *     gone; the holding ends at once).
 *   - anything else the txn call throws (a lost connection: the txn may or
 *     may not have been applied, all or nothing) is passed on, not retried:
 *     the ops need not be idempotent.
 */
import { InvalidArgumentError, LockLostError, type LossReason } from '../../index.js';
import type { EtcdClient, EtcdRequestOp, EtcdTxnResponse } from './client.js';

/** What a fenced txn needs of the held key. */
export interface FencedKey {
  readonly key: string;
  readonly token: bigint;
  readonly held: boolean;
  readonly signal: AbortSignal;
  /** Our key was found gone: end the holding now. */
  lost(): void;
}

export async function fencedTxn(etcd: EtcdClient, holder: FencedKey, lock: string, what: string, ops: readonly EtcdRequestOp[]): Promise<EtcdTxnResponse['responses']> {
  if (!Array.isArray(ops) || ops.length === 0) throw new InvalidArgumentError(`${what}() needs a non-empty array of etcd txn operations`);
  for (const op of ops) {
    if (op === null || typeof op !== 'object') throw new InvalidArgumentError(`${what}(): each operation must be an etcd RequestOp object`);
    const target = op.request_put?.key ?? op.request_delete_range?.key;
    if (target !== undefined && Buffer.from(target).toString('utf8') === holder.key) {
      throw new InvalidArgumentError(`${what}(): ${holder.key} is the lock's own queue key; release the lock instead of writing it`);
    }
  }
  if (!holder.held) throw notHeld(lock, what, reasonOf(holder.signal));
  const response = await etcd.kv.txn({
    compare: [{ key: Buffer.from(holder.key), target: 'Create', result: 'Equal', create_revision: holder.token.toString() }],
    success: [...ops],
    failure: [],
  });
  if (!response.succeeded) {
    holder.lost();
    throw notHeld(lock, what, 'node_deleted');
  }
  return response.responses;
}

function notHeld(lock: string, what: string, reason: LossReason): LockLostError {
  return new LockLostError(lock, reason, `${lock} is not held (${reason}): ${what}() wrote nothing`);
}

function reasonOf(signal: AbortSignal): LossReason {
  const reason: unknown = signal.reason;
  return reason instanceof LockLostError ? reason.reason : 'deadline';
}
