/**
 * The fair queue under a lock's (or election's) key prefix, as etcd's own
 * concurrency.Mutex keeps it, with one key per join instead of one per lease:
 * every lock of a process hangs on one lease, so two acquires of one lock
 * from one process must not share a key.
 *
 *   <root><name>/#<lease id>-<slot>    value {"lease","join","owner"}, attached to our lease
 *
 * The slot is the smallest number no other join of this lease holds in this
 * queue at the moment: two acquires of one lock from one process get two
 * keys, and a key name is used again once its join has left. etcd keeps a
 * deleted key in its index until the history is compacted, and a range
 * visits every such key in it: a fresh name per join would make every later
 * read of a busy queue slower, a reused name costs nothing.
 *
 * The holder is the key with the smallest create revision. Every other
 * joiner watches only the key with the largest create revision below its
 * own (its predecessor) and looks again when that key is deleted: the
 * predecessor may have been a waiter that gave up, so its deletion wakes one
 * waiter and says nothing yet about the turn. A release therefore wakes
 * exactly one waiter, not the queue.
 *
 * The fencing token is our key's create revision: etcd's revision counter
 * only grows (Raft replicates it; a new leader continues it), so every later
 * grant of the lock, and of every lock of the cluster, has a larger one.
 */
import { randomBytes } from 'node:crypto';
import { ProtocolError, type FencingToken, type LockStatusEntry } from '../../index.js';
import { int64, type EtcdClient, type EtcdCompare, type EtcdKeyValue, type EtcdRangeRequest, type EtcdTxnResponse } from './client.js';
import { repeated } from './retry.js';
import type { Lease } from './session.js';
import { noteClusterId } from './source-id.js';
import { watchRange, type EtcdWatch } from './watches.js';

export const LOCKS_ROOT = 'fencekeeper/locks/';
export const ELECTIONS_ROOT = 'fencekeeper/elections/';

/** A queue's key prefix: every key of this lock, and no key of another (see checkName). */
export function queuePrefix(root: string, name: string): string {
  return `${root}${name}/#`;
}

/** The end of the key range that starts with `prefix` (etcd's range_end for a prefix). */
export function prefixEnd(prefix: string): Buffer {
  const end = Buffer.from(prefix, 'utf8');
  for (let i = end.length - 1; i >= 0; i--) {
    if ((end[i] as number) < 0xff) {
      end[i] = (end[i] as number) + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}

/**
 * Random per process, counted per join, carried in the key's value: a put
 * whose reply was lost is told apart from an earlier join's key of the same
 * name by it, without asking the kernel for entropy on each acquire.
 */
const PROCESS_ID = randomBytes(6).toString('hex');
let joins = 0;
function nextJoinId(): string {
  joins = (joins + 1) % 0x100000000;
  return `${PROCESS_ID}${joins.toString(16).padStart(8, '0')}`;
}

/** The slots each lease's joins hold, by queue prefix. */
const slotsInUse = new WeakMap<Lease, Map<string, Set<number>>>();

function takeSlot(lease: Lease, prefix: string): number {
  let byPrefix = slotsInUse.get(lease);
  if (byPrefix === undefined) slotsInUse.set(lease, (byPrefix = new Map()));
  let used = byPrefix.get(prefix);
  if (used === undefined) byPrefix.set(prefix, (used = new Set()));
  let slot = 0;
  while (used.has(slot)) slot++;
  used.add(slot);
  return slot;
}

/** The key of this slot is gone for sure (deleted, or never written): the next join may use its name. */
export function freeSlot(lease: Lease, slot: { readonly prefix: string; readonly slot: number }): void {
  const byPrefix = slotsInUse.get(lease);
  const used = byPrefix?.get(slot.prefix);
  used?.delete(slot.slot);
  if (used?.size === 0) byPrefix!.delete(slot.prefix);
}

/** Our key in a queue. */
export interface QueueKey {
  readonly key: string;
  /** `key` as requests carry it. */
  readonly keyBytes: Buffer;
  readonly prefix: string;
  readonly queue: QueueRequests;
  readonly slot: number;
  readonly join: string;
  /** Our key's create revision: the token. */
  readonly token: FencingToken;
}

/** A key in the queue as operators see it: the holder (the first entry), a waiter, a leader. */
export interface EtcdQueueEntry extends LockStatusEntry {
  /** The key. */
  readonly key: string;
  /** Its create revision: the token of that grant. */
  readonly token: FencingToken;
  readonly owner: string;
  /** The lease the key hangs on (the holder's process). */
  readonly lease: bigint;
}

interface KeyValue {
  readonly lease: string;
  readonly join: string;
  readonly owner: string;
}

export function entryOf(kv: EtcdKeyValue): EtcdQueueEntry {
  let owner = '';
  try {
    const value = JSON.parse(kv.value.toString('utf8')) as Partial<KeyValue>;
    if (typeof value.owner === 'string') owner = value.owner;
  } catch {
    // Not written by us: shown without an owner.
  }
  return { key: kv.key.toString('utf8'), token: int64(kv.create_revision, 'create revision'), owner, lease: int64(kv.lease, 'lease id') };
}

/**
 * The parts of a queue's requests that every join of it sends alike, made
 * once per queue: acquire is a hot path, and a join would otherwise encode
 * the prefix twice and build the same objects anew. Shared by every request
 * that reads them (nothing writes to them: etcd3 only encodes them).
 */
export interface QueueRequests {
  /** The queue's key prefix (queuePrefix). */
  readonly text: string;
  readonly prefix: Buffer;
  readonly end: Buffer;
  /** No key in the queue: over a range, a comparison holds for every key in it; an empty range compares as a missing key (revision 0). */
  readonly empty: EtcdCompare;
  /** The two newest keys of the queue, keys and revisions only (the values stay on the server). */
  readonly newest: EtcdRangeRequest;
}

/** Queues joined lately, per root (a process that joins ever new names keeps the newest this many). */
const QUEUES_KEPT = 256;
/** By root, then by name: a caller's name string is looked up as it is (its hash kept), not joined to its root anew. */
const queueRequestsByName = new Map<string, Map<string, QueueRequests>>();

export function queueRequests(root: string, name: string): QueueRequests {
  let byName = queueRequestsByName.get(root);
  if (byName === undefined) queueRequestsByName.set(root, (byName = new Map()));
  let requests = byName.get(name);
  if (requests === undefined) {
    if (byName.size >= QUEUES_KEPT) byName.delete(byName.keys().next().value as string);
    requests = makeRequests(queuePrefix(root, name));
    byName.set(name, requests);
  }
  return requests;
}

/** Requests over any key prefix (a read-write lock's write keys, a semaphore's queue), kept as queueRequests keeps them. */
const requestsByPrefix = new Map<string, QueueRequests>();

export function prefixRequests(prefix: string): QueueRequests {
  let requests = requestsByPrefix.get(prefix);
  if (requests === undefined) {
    if (requestsByPrefix.size >= QUEUES_KEPT * 4) requestsByPrefix.delete(requestsByPrefix.keys().next().value as string);
    requests = makeRequests(prefix);
    requestsByPrefix.set(prefix, requests);
  }
  return requests;
}

function makeRequests(prefix: string): QueueRequests {
  const start = Buffer.from(prefix, 'utf8');
  const end = prefixEnd(prefix);
  return Object.freeze({
    text: prefix,
    prefix: start,
    end,
    empty: Object.freeze({ key: start, range_end: end, target: 'Create' as const, result: 'Equal' as const, create_revision: '0' }),
    newest: Object.freeze({ key: start, range_end: end, sort_target: 'Create' as const, sort_order: 'Descend' as const, limit: 2, keys_only: true }),
  });
}

/**
 * Our place in the queue now: the key we wait for (null: our turn), or
 * false when our own key is gone. A plain queue's is `look` (our immediate
 * predecessor); a reader of a read-write lock looks only at the write keys.
 */
export type Look = (etcd: EtcdClient, lease: Lease, node: QueueKey, givenUp: () => boolean) => Promise<{ predecessor: string | null | false; revision: bigint }>;

/**
 * What a join waits for, when it is not the plain queue's immediate
 * predecessor (a read-write lock's reader waits only for write keys).
 */
export interface JoinRule {
  /** Our key's name after the queue's prefix and before our lease ('r', 'w'; '' for a plain queue). */
  readonly tag: string;
  /** The keys that hold us back: when none exists as we join, our turn is now. Their newest is what we wait for. */
  readonly blockers: QueueRequests;
  readonly look: Look;
  /** More comparisons the join's transaction makes (all must hold for our key to be put). */
  readonly guards?: readonly EtcdCompare[];
  /** Called when the join's transaction failed and `guards` is set: throws when a guard is what failed. */
  readonly guardFailed?: (etcd: EtcdClient, lease: Lease, givenUp: () => boolean) => Promise<void>;
}

/** One join's key and value, fixed before its transaction is sent (so a failed one can still be cleaned up). */
export interface JoinPlan {
  readonly prefix: string;
  readonly queue: QueueRequests;
  readonly slot: number;
  readonly key: string;
  readonly keyBytes: Buffer;
  readonly joinId: string;
  readonly value: Buffer;
  readonly rule: JoinRule | null;
}

export function planJoin(lease: Lease, root: string, name: string, owner: string): JoinPlan {
  return planJoinIn(lease, queueRequests(root, name), owner, null);
}

/** planJoin for a queue under any prefix, our key tagged and our turn decided by `rule` (null: the plain queue's). */
export function planJoinIn(lease: Lease, queue: QueueRequests, owner: string, rule: JoinRule | null): JoinPlan {
  const prefix = queue.text;
  const joinId = nextJoinId();
  const slot = takeSlot(lease, prefix);
  const key = rule === null ? `${prefix}${lease.idHex}-${slot}` : `${prefix}${rule.tag}${lease.idHex}-${slot}`;
  // JSON.stringify({ lease, join, owner }) as it spells it, written out (a fifth of its cost): the lease
  // id is decimal digits and the join id hex digits, which JSON needs no escape for; the owner is escaped.
  const value = Buffer.from(`{"lease":"${lease.idText}","join":"${joinId}","owner":${JSON.stringify(owner)}}`, 'utf8');
  return { prefix, queue, slot, key, keyBytes: Buffer.from(key, 'utf8'), joinId, value, rule };
}

/**
 * A key of ours that no join holds: a put of an earlier join whose reply was
 * lost, repeated and adopted (or abandoned), and then applied once more by a
 * member that had it queued. It would block the queue for as long as the
 * lease lives. Deleted only as the revision we saw, so a newer put is kept.
 */
async function removeStray(etcd: EtcdClient, lease: Lease, kv: EtcdKeyValue, givenUp: () => boolean): Promise<void> {
  const key = kv.key;
  await repeated(
    () =>
      etcd.kv.txn({
        compare: [{ key, target: 'Mod', result: 'Equal', mod_revision: kv.mod_revision }],
        success: [{ request_delete_range: { key } }],
        failure: [],
      }),
    lease,
    givenUp,
  );
}

/** The join id a key's value carries (null: not written by a join). */
export function joinOf(kv: EtcdKeyValue): string | null {
  try {
    const join = (JSON.parse(kv.value.toString('utf8')) as Partial<KeyValue>).join;
    return typeof join === 'string' ? join : null;
  } catch {
    return null;
  }
}

export interface Joined {
  readonly node: QueueKey;
  /** How this join looks at its place again (JoinRule.look, or the plain queue's). */
  readonly look: Look;
  /** The key with the largest create revision below ours (null: we hold). */
  readonly predecessor: string | null;
  /** The revision the queue was read at: a watch from the next one misses nothing. */
  readonly revision: bigint;
}

/**
 * Join the queue in one transaction: put our key with the lease if it does
 * not exist yet, and in a transaction nested after the put, read the two
 * newest keys of the queue (ours and our predecessor) unless the queue was
 * empty (we hold: nothing to read back). The put is in the request once:
 * uncontended, request and reply are the floor's put-if-absent with the
 * lease, plus the nested comparison and its empty reply.
 *
 * etcd evaluates every comparison of a transaction, the nested ones too,
 * against the store as it was before the transaction (the applier picks the
 * whole path of branches first: compareToPath in etcdserver/apply.go, 3.3 and
 * later), so the nested comparison sees the queue without our key. Were it
 * evaluated after the put, it would always fail and the join would read the
 * queue back and find no predecessor: the same answer, one range later.
 *
 * The comparison on our key makes the put safe to repeat: a transaction
 * whose reply was lost (and which etcd3 or we send again) finds our key
 * instead of adding a second one, and adopts it when its value names our
 * lease and this join. That key is read by a range of its own, sent only
 * when the comparison failed: a read in the failure branch would go out
 * with every join (encoded, sent and checked by etcd) for a case that needs
 * a lost reply.
 */
export async function join(etcd: EtcdClient, lease: Lease, plan: JoinPlan, givenUp: () => boolean): Promise<Joined> {
  const { prefix, queue, slot, key, joinId, keyBytes, value, rule } = plan;
  const blockers = rule === null ? queue : rule.blockers;
  const lookAgain = rule === null ? look : rule.look;
  const absent = { key: keyBytes, target: 'Create' as const, result: 'Equal' as const, create_revision: '0' };
  const txn = {
    compare: rule?.guards === undefined ? [absent] : [absent, ...rule.guards],
    success: [{ request_put: { key: keyBytes, value, lease: lease.idText } }, { request_txn: { compare: [blockers.empty], success: [], failure: [{ request_range: blockers.newest }] } }],
    failure: [],
  };
  const ours: EtcdRangeRequest = { key: keyBytes };
  let found: EtcdKeyValue | undefined;
  for (let attempt = 0; ; attempt++) {
    const response = await repeated(() => etcd.kv.txn(txn), lease, givenUp);
    noteClusterId(etcd, response.header);
    if (response.succeeded) {
      // Our key is put: its create revision is the transaction's (the only write in it).
      const token = int64(response.header.revision, 'revision');
      const inner = response.responses[1]?.response_txn;
      if (inner === undefined || inner === null) throw new ProtocolError(`etcd's transaction reply lacks its nested transaction (etcd before 3.3?)`);
      const node = { key, keyBytes, prefix, queue, slot, join: joinId, token };
      // The queue was empty: our key is the only one, and holds.
      if (inner.succeeded) return { node, look: lookAgain, predecessor: null, revision: token };
      return { node, look: lookAgain, predecessor: predecessorIn(rangeAt(inner, 0).kvs, node), revision: token };
    }
    // A guard of the rule failed (it throws then), or our key's name is taken.
    if (rule?.guardFailed !== undefined) await rule.guardFailed(etcd, lease, givenUp);
    // Our key's name is taken: by this join's own put (its reply lost), or by a stray of an earlier join.
    found = (await repeated(() => etcd.kv.range(ours), lease, givenUp)).kvs[0];
    if (found !== undefined && joinOf(found) === joinId) break;
    if (attempt >= 3) throw new ProtocolError(`the key ${key} was put again by an earlier join ${attempt + 1} times`);
    // Gone again since the comparison (a stray deleted meanwhile): put ours anew.
    if (found !== undefined) await removeStray(etcd, lease, found, givenUp);
  }
  const node = { key, keyBytes, prefix, queue, slot, join: joinId, token: int64(found.create_revision, 'create revision') };
  const { predecessor, revision } = await lookAgain(etcd, lease, node, givenUp);
  if (predecessor === false) throw new ProtocolError(`our adopted key ${key} vanished`);
  return { node, look: lookAgain, predecessor, revision };
}

/**
 * Take the lock only if nobody holds it or waits for it: one transaction that
 * puts our key only while the queue is empty. A repeat of it (a lost reply)
 * finds our key and adopts it: it was put into an empty queue, so it holds.
 * Null: the queue was not empty, and nothing was written.
 */
export async function joinIfEmpty(etcd: EtcdClient, lease: Lease, plan: JoinPlan, givenUp: () => boolean): Promise<Joined | null> {
  const { prefix, queue, slot, key, joinId, keyBytes, value, rule } = plan;
  const lookAgain = rule === null ? look : rule.look;
  const txn = {
    compare: rule === null ? [queue.empty] : [rule.blockers.empty, ...(rule.guards ?? [])],
    success: [{ request_put: { key: keyBytes, value, lease: lease.idText } }],
    failure: [{ request_range: { key: keyBytes } }],
  };
  const response = await repeated(() => etcd.kv.txn(txn), lease, givenUp);
  noteClusterId(etcd, response.header);
  if (response.succeeded) {
    const token = int64(response.header.revision, 'revision');
    return { node: { key, keyBytes, prefix, queue, slot, join: joinId, token }, look: lookAgain, predecessor: null, revision: token };
  }
  const found = rangeAt(response, 0).kvs[0];
  if (found === undefined) {
    // Busy, and nothing of ours was written: the slot's name is free again.
    freeSlot(lease, plan);
    // Or a guard of the rule failed: it throws.
    await rule?.guardFailed?.(etcd, lease, givenUp);
    return null;
  }
  if (joinOf(found) !== joinId) {
    // An earlier join's put, applied late; gone, it may have been all that made the queue busy.
    await removeStray(etcd, lease, found, givenUp);
    freeSlot(lease, plan);
    return null;
  }
  const token = int64(found.create_revision, 'create revision');
  return { node: { key, keyBytes, prefix, queue, slot, join: joinId, token }, look: lookAgain, predecessor: null, revision: int64(response.header.revision, 'revision') };
}

/**
 * Our place in the queue now: the predecessor's key (null: ours is the
 * oldest, we hold), or false when our own key is gone. One range request:
 * the two newest keys created no later than ours.
 */
export async function look(etcd: EtcdClient, lease: Lease, node: QueueKey, givenUp: () => boolean): Promise<{ predecessor: string | null | false; revision: bigint }> {
  // The queue's two newest keys, created no later than ours.
  const request: EtcdRangeRequest = { ...node.queue.newest, max_create_revision: node.token.toString() };
  const response = await repeated(() => etcd.kv.range(request), lease, givenUp);
  const revision = int64(response.header.revision, 'revision');
  const first = response.kvs[0];
  if (first === undefined || first.key.toString('utf8') !== node.key) return { predecessor: false, revision };
  return { predecessor: predecessorIn(response.kvs, node), revision };
}

export function predecessorIn(newest: readonly EtcdKeyValue[], node: QueueKey): string | null {
  for (const kv of newest) {
    if (kv.key.toString('utf8') !== node.key && int64(kv.create_revision, 'create revision') < node.token) return kv.key.toString('utf8');
  }
  return null;
}

export function rangeAt(response: Pick<EtcdTxnResponse, 'responses'>, index: number): { readonly kvs: readonly EtcdKeyValue[] } {
  const range = response.responses[index]?.response_range;
  if (range === undefined) throw new ProtocolError(`etcd's transaction reply lacks its range #${index}`);
  return { kvs: range.kvs ?? [] };
}

/**
 * Wait until our key is the oldest: watch the predecessor's key, and look
 * again when it goes. `stop` rejects when the caller gives up (abort,
 * timeout, lease loss); the caller then deletes our key.
 *
 * The watch starts from the store's revision when etcd creates it, not from
 * the revision the queue was read at: etcd keeps a watch that starts in the
 * past apart ("unsynced") and catches it up only every 100 ms
 * (syncWatchersLoop in mvcc/watchable_store.go), so a predecessor deleted in
 * its first 100 ms was reported up to 100 ms late, measured here: 90 ms p50
 * from the delete's reply to the event, against 5 ms for a watch from the
 * present. That was every handoff of two processes taking turns. A change
 * between our read and the watch's start is seen by looking again: when
 * etcd says the watch starts past the revision we read at, one range tells
 * whether our predecessor is still the key we watch (ZooKeeper's order:
 * set the watch, then read). A broken Watch stream creates the watch again
 * from the revision it had reached (./watches.ts), so a deletion while it
 * was down is still reported; a watch etcd can no longer resume (its history
 * compacted past that revision) ends, and the queue is read again instead.
 */
export async function waitForTurn(
  etcd: EtcdClient,
  lease: Lease,
  joined: Joined,
  stop: Promise<never>,
  givenUp: () => boolean,
): Promise<{ outcome: 'turn' | 'gone'; revision: bigint }> {
  let { predecessor, revision } = joined;
  for (;;) {
    if (predecessor === null) return { outcome: 'turn', revision };
    const watched = predecessor;
    const readAt = revision;
    let watch: EtcdWatch | null = null;
    const gone = new Promise<void>((resolve) => {
      watch = watchRange(etcd, Buffer.from(watched, 'utf8'), undefined, readAt + 1n, true, {
        deleted: () => resolve(),
        // etcd cannot report it (compacted past the revision it had to resume from, or refused):
        // whether the predecessor is still there is read instead, below.
        lost: () => resolve(),
        created: (at) => {
          if (at <= readAt) return;
          joined.look(etcd, lease, joined.node, givenUp).then(
            (now) => {
              if (now.predecessor !== watched) resolve();
            },
            () => resolve(),
          );
        },
      });
    });
    try {
      await Promise.race([gone, stop]);
    } finally {
      (watch as EtcdWatch | null)?.cancel();
    }
    const now = await Promise.race([joined.look(etcd, lease, joined.node, givenUp), stop]);
    revision = now.revision;
    if (now.predecessor === false) return { outcome: 'gone', revision };
    predecessor = now.predecessor;
  }
}

/**
 * Delete our key, repeated across lost replies while the lease lives. Ends
 * when the lease does, answered or not: etcd deletes a lease's keys with it
 * (a member that stopped answering must not hold a release up forever).
 */
export async function leave(etcd: EtcdClient, lease: Lease, node: { readonly keyBytes: Buffer; readonly prefix: string; readonly slot: number }): Promise<void> {
  const key = node.keyBytes;
  const deleting = repeated(() => etcd.kv.deleteRange({ key }), lease).then(() => freeSlot(lease, node));
  try {
    await untilLeaseEnds(deleting, lease);
  } catch (error) {
    if (lease.endedReason === null) throw error;
  }
}

/** `work`, or nothing once the lease has ended (the work goes on in the background). */
export function untilLeaseEnds<T>(work: Promise<T>, lease: Lease): Promise<T | undefined> {
  if (lease.endedReason !== null) {
    work.catch(() => undefined);
    return Promise.resolve(undefined);
  }
  return new Promise<T | undefined>((resolve, reject) => {
    const stop = lease.onEnd(() => resolve(undefined));
    work.then(
      (value) => {
        stop();
        resolve(value);
      },
      (error: unknown) => {
        stop();
        reject(error);
      },
    );
  });
}

/** The queue in grant order: the first entry holds, the rest wait. One range request. */
export async function readQueue(etcd: EtcdClient, root: string, name: string): Promise<{ entries: EtcdQueueEntry[]; revision: bigint }> {
  const prefix = queuePrefix(root, name);
  const response = await etcd.kv.range({ key: Buffer.from(prefix, 'utf8'), range_end: prefixEnd(prefix), sort_target: 'Create', sort_order: 'Ascend' });
  return { entries: response.kvs.map(entryOf), revision: int64(response.header.revision, 'revision') };
}
