/**
 * A fair read-write lock over etcd: readers share it, a writer holds it
 * alone, granted in the order of arrival, every grant fenced by its key's
 * create revision.
 *
 *   const read = await acquireReadLock(etcd, 'catalog');    // with other readers
 *   const write = await acquireWriteLock(etcd, 'catalog');  // alone, after every earlier reader and writer
 *
 * One queue per name, apart from the plain lock's (and so a separate lock):
 *
 *   fencekeeper/rwlocks/<name>/#r<lease id>-<slot>    a reader
 *   fencekeeper/rwlocks/<name>/#w<lease id>-<slot>    a writer
 *
 * both attached to the client's lease, ordered by create revision. The kind
 * is the first letter after '#', so the write keys alone are one prefix
 * (`#w`), read in one range.
 *
 *   - A reader holds when no write key older than its own exists. It waits
 *     only for the newest such write key, and looks again when that key is
 *     deleted (the writer released, or gave up waiting).
 *   - A writer holds when no key older than its own exists, of either kind.
 *     It waits only for its immediate predecessor, as a plain lock's waiter.
 *
 * So a waiting writer holds back every reader that joined after it (no
 * writer starves), and a release wakes only those waiting for that key: a
 * writer's release wakes the readers granted by it (each wake-up a grant)
 * or the next writer; a reader's release wakes at most the writer right
 * behind it.
 *
 * The token is the key's create revision, so a writer's token is larger than
 * every grant before it (every older key is gone when it holds) and every
 * grant after a writer's has a larger one than that writer. Readers held
 * together carry tokens in any order: a reader checks a fence without
 * advancing it.
 */
import { type AcquireOptions, type TryAcquireOptions } from '../../index.js';
import { traceAcquire } from '../../extend.js';
import { int64, type EtcdClient } from './client.js';
import { checkClient, checkName } from './input.js';
import { joinAndWait } from './join.js';
import { HeldLock, type EtcdLock } from './lock.js';
import { look, planJoinIn, prefixRequests, queueRequests, rangeAt, readQueue, type EtcdQueueEntry, type JoinPlan, type JoinRule, type Look, type QueueKey, type QueueRequests } from './queue.js';
import { repeated } from './retry.js';
import type { Lease } from './session.js';
import { etcdSourceIds } from './source-id.js';

export const RW_LOCKS_ROOT = 'fencekeeper/rwlocks/';

type Mode = 'read' | 'write';

/**
 * A reader's place: whether our key still exists, and the newest write key
 * older than it. One transaction (our key compared, the write keys ranged).
 */
function readerLook(writes: QueueRequests): Look {
  return async (etcd, lease, node, givenUp) => {
    const revisionText = node.token.toString();
    const response = await repeated(
      () =>
        etcd.kv.txn({
          compare: [{ key: node.keyBytes, target: 'Create', result: 'Equal', create_revision: revisionText }],
          success: [{ request_range: { ...writes.newest, limit: 1, max_create_revision: revisionText } }],
          failure: [],
        }),
      lease,
      givenUp,
    );
    const revision = int64(response.header.revision, 'revision');
    if (!response.succeeded) return { predecessor: false, revision };
    const newest = rangeAt(response, 0).kvs[0];
    return { predecessor: newest === undefined ? null : newest.key.toString('utf8'), revision };
  };
}

/** The rules of one name's queue, made once per name (acquire is a hot path). */
interface RwRules {
  readonly queue: QueueRequests;
  readonly read: JoinRule;
  readonly write: JoinRule;
}

const RULES_KEPT = 256;
const rulesByName = new Map<string, RwRules>();

function rulesOf(name: string): RwRules {
  let rules = rulesByName.get(name);
  if (rules === undefined) {
    if (rulesByName.size >= RULES_KEPT) rulesByName.delete(rulesByName.keys().next().value as string);
    const queue = queueRequests(RW_LOCKS_ROOT, name);
    const writes = prefixRequests(`${queue.text}w`);
    rules = Object.freeze({
      queue,
      read: Object.freeze({ tag: 'r', blockers: writes, look: readerLook(writes) }),
      write: Object.freeze({ tag: 'w', blockers: queue, look }),
    });
    rulesByName.set(name, rules);
  }
  return rules;
}

async function acquire(etcd: EtcdClient, mode: Mode, name: string, wait: 'wait' | 'try', options: unknown): Promise<EtcdLock | null> {
  // Checked here, before rulesOf, so a bad name is refused (a rejection) before anything is cached or sent.
  checkName(name);
  // A read or write lock is the plain lock's held lock of kind 'read' / 'write' (its sequencer's kind).
  const build = (lease: Lease, node: QueueKey, revision: bigint, marginMs: number): HeldLock => new HeldLock(etcd, lease, name, node, revision, marginMs, mode);
  const plan = (lease: Lease, owner: string): JoinPlan => {
    const rules = rulesOf(name);
    return planJoinIn(lease, rules.queue, owner, rules[mode]);
  };
  return traceAcquire('etcd', name, wait, () =>
    etcdSourceIds.afterGrant(etcd, joinAndWait(etcd, { kind: mode, root: RW_LOCKS_ROOT, name, mode: wait, options, ownerField: 'owner', build, plan }), (lock) => lock.release(), options),
  );
}

/**
 * Wait for a read lock of `name` (held together with other readers, never
 * with a writer), in the order of arrival: a writer that joined earlier is
 * granted first. Its token is its key's create revision; readers held
 * together carry tokens in any order, so check a fence with it without
 * advancing it. Gives up (leaving no key) on `signal` or `timeoutMs`.
 */
export function acquireReadLock(etcd: EtcdClient, name: string, options: AcquireOptions = {}): Promise<EtcdLock> {
  // A waiting join ends in a grant or an error, never null.
  return acquire(etcd, 'read', name, 'wait', options) as Promise<EtcdLock>;
}

/** A read lock of `name` only if no writer holds it or waits for it; null otherwise (leaving nothing behind). */
export function tryAcquireReadLock(etcd: EtcdClient, name: string, options: TryAcquireOptions = {}): Promise<EtcdLock | null> {
  return acquire(etcd, 'read', name, 'try', options);
}

/**
 * Wait for the write lock of `name` (held alone: no reader, no other
 * writer), in the order of arrival. Its token is larger than every grant of
 * the name before it, read or write. Gives up (leaving no key) on `signal`
 * or `timeoutMs`.
 */
export function acquireWriteLock(etcd: EtcdClient, name: string, options: AcquireOptions = {}): Promise<EtcdLock> {
  return acquire(etcd, 'write', name, 'wait', options) as Promise<EtcdLock>;
}

/** The write lock of `name` only if nobody holds or waits for it, reader or writer; null otherwise (leaving nothing behind). */
export function tryAcquireWriteLock(etcd: EtcdClient, name: string, options: TryAcquireOptions = {}): Promise<EtcdLock | null> {
  return acquire(etcd, 'write', name, 'try', options);
}

/** One key of a read-write lock's queue: the entry as lockStatus shows it, and whether it reads or writes. */
export interface EtcdRwQueueEntry extends EtcdQueueEntry {
  readonly mode: 'read' | 'write';
}

/**
 * A read-write lock's queue in arrival order (one range request): `holders`
 * are the grants now (one writer, or the readers before the first writer),
 * `waiters` the rest in the order they will be granted.
 */
export async function rwLockStatus(etcd: EtcdClient, name: string): Promise<{ name: string; holders: EtcdRwQueueEntry[]; waiters: EtcdRwQueueEntry[] }> {
  checkClient(etcd);
  checkName(name);
  const { entries } = await readQueue(etcd, RW_LOCKS_ROOT, name);
  const tagAt = queueRequests(RW_LOCKS_ROOT, name).text.length;
  const all = entries.map((entry): EtcdRwQueueEntry => ({ ...entry, mode: entry.key.charAt(tagAt) === 'w' ? 'write' : 'read' }));
  let granted = 0;
  if (all[0]?.mode === 'write') granted = 1;
  else while (granted < all.length && all[granted]!.mode === 'read') granted++;
  return { name, holders: all.slice(0, granted), waiters: all.slice(granted) };
}
