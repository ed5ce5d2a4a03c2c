/**
 * A fair semaphore over etcd: N permits per name, each a fenced slot.
 *
 *   const permit = await acquirePermit(etcd, 'exports', { permits: 3 });
 *   // permit.slot in [0, 3); permit.sequencer names 'exports#<slot>'
 *   await permit.release();
 *
 * Keys, all attached to the client's lease, the number of permits in their
 * names (so callers that disagree on it never share a queue):
 *
 *   fencekeeper/semaphores/<name>/#<N>.q<lease id>-<n>   a waiter, in arrival order (create revision)
 *   fencekeeper/semaphores/<name>/#<N>.s<slot>           a held slot, slot in [0, N)
 *
 * - Nobody waiting and a slot free: one transaction puts the slot's key
 *   (comparing the queue empty and the slot absent). No queue key.
 * - Otherwise we join the queue (the plain queue's join, ./queue.ts); a
 *   waiter watches only its predecessor. At the head, we claim a free slot in
 *   one transaction that puts its key and deletes our queue key (so our
 *   successor becomes the head, woken by that one deletion). With every slot
 *   taken, the head watches the slot keys for a deletion (a release, or a
 *   holder's lease ending) and claims then.
 *
 * The token is the slot key's create revision, taken when the slot is
 * claimed: each holder of a slot creates its key anew, so per slot the
 * tokens strictly increase across holders, crashes and lease expiry. A
 * permit's sequencer is `{ kind: 'permit', name: '<name>#<slot>' }`.
 *
 * Every join and every take compares that no key of another N exists under
 * the name (two range comparisons): a caller with another `permits` is
 * refused with PermitsMismatchError while anyone holds or waits.
 */
import { InvalidArgumentError, LockLostError, PermitsMismatchError, type FencingToken, type Permit, type PermitOptions, type TryPermitOptions } from '../../index.js';
import { lockGrant, traceAcquire } from '../../extend.js';
import { int64, type EtcdClient, type EtcdCompare, type EtcdKeyValue, type EtcdRequestOp, type EtcdTxnResponse } from './client.js';
import { HeldKey } from './held-key.js';
import { checkName } from './input.js';
import { joinAndWait, type Claimed } from './join.js';
import { freeSlot, joinOf, look, planJoinIn, prefixEnd, prefixRequests, queuePrefix, rangeAt, type JoinPlan, type JoinRule, type Joined, type QueueKey, type QueueRequests } from './queue.js';
import { repeated } from './retry.js';
import type { Lease } from './session.js';
import { etcdSourceIds, noteClusterId } from './source-id.js';
import { watchRange, type EtcdWatch } from './watches.js';

export const SEMAPHORES_ROOT = 'fencekeeper/semaphores/';

/** The most permits a semaphore may have (PermitOptions.permits). */
export const MAX_PERMITS = 1024;

/** A permit granted by etcd: the core's Permit, with its slot key and lease. */
export interface EtcdPermit extends Permit {
  /** The slot's key (its create revision is the token). */
  readonly key: string;
  /** The lease the key hangs on: the client's session. */
  readonly lease: bigint;
  /** Apply `ops` (etcd txn operations) only while this permit is held: one txn comparing our slot key's create revision (LockLostError, nothing written, when not held). */
  ifHeld(ops: readonly EtcdRequestOp[]): Promise<EtcdTxnResponse['responses']>;
}

class HeldPermit extends lockGrant<EtcdRequestOp, EtcdTxnResponse['responses'], typeof HeldKey>('etcd', HeldKey) implements EtcdPermit {
  readonly slot: number;
  readonly permits: number;

  constructor(etcd: EtcdClient, lease: Lease, name: string, slot: number, permits: number, node: QueueKey, revision: bigint, marginMs: number) {
    // The sequencer (and a loss) names the slot, not the semaphore: each slot is fenced on its own.
    super(etcd, lease, 'permit', name, node, revision, marginMs, `${name}#${slot}`);
    this.slot = slot;
    this.permits = permits;
  }

  override toJSON(): Record<string, unknown> {
    return { ...super.toJSON(), slot: this.slot, permits: this.permits };
  }
}

/** One semaphore's requests for one N, made once per (name, N). */
interface Semaphore {
  readonly name: string;
  readonly permits: number;
  /** The waiters' queue (`#<N>.q`). */
  readonly queue: QueueRequests;
  /** Every slot key (`#<N>.s`), values included. */
  readonly slots: QueueRequests;
  /** No key of another N under the name. */
  readonly guards: readonly EtcdCompare[];
  /** The two ranges of another N's keys, one key each. */
  readonly others: readonly EtcdRequestOp[];
  readonly rule: JoinRule;
}

const KEPT = 256;
const semaphores = new Map<string, Semaphore>();

function semaphoreOf(name: string, permits: number): Semaphore {
  const id = `${permits}:${name}`;
  let semaphore = semaphores.get(id);
  if (semaphore === undefined) {
    if (semaphores.size >= KEPT) semaphores.delete(semaphores.keys().next().value as string);
    const base = queuePrefix(SEMAPHORES_ROOT, name);
    const ours = `${base}${permits}.`;
    const below = { key: Buffer.from(base, 'utf8'), range_end: Buffer.from(ours, 'utf8') };
    const above = { key: prefixEnd(ours), range_end: prefixEnd(base) };
    const guards = [below, above].map((range) => Object.freeze({ ...range, target: 'Create' as const, result: 'Equal' as const, create_revision: '0' }));
    const others = [below, above].map((range) => ({ request_range: { ...range, limit: 1, keys_only: true } }));
    const queue = prefixRequests(`${ours}q`);
    const slots = prefixRequests(`${ours}s`);
    const guardFailed = async (etcd: EtcdClient, lease: Lease, givenUp: () => boolean): Promise<void> => {
      const response = await repeated(() => etcd.kv.txn({ compare: [], success: [...others], failure: [] }), lease, givenUp);
      mismatch(semaphore!, response);
    };
    semaphore = Object.freeze({ name, permits, queue, slots, guards, others, rule: Object.freeze({ tag: '', blockers: queue, look, guards, guardFailed }) });
    semaphores.set(id, semaphore);
  }
  return semaphore;
}

/** Throws PermitsMismatchError when the responses at `from` (the two `others` ranges) found a key of another N. */
function mismatch(semaphore: Semaphore, response: Pick<EtcdTxnResponse, 'responses'>, from = 0): void {
  for (const index of [from, from + 1]) {
    const kv = rangeAt(response, index).kvs[0];
    if (kv === undefined) continue;
    const rest = kv.key.toString('utf8').slice(queuePrefix(SEMAPHORES_ROOT, semaphore.name).length);
    const inUse = Number.parseInt(rest, 10);
    throw new PermitsMismatchError(semaphore.name, semaphore.permits, Number.isNaN(inUse) ? -1 : inUse);
  }
}

function slotKey(semaphore: Semaphore, slot: number): string {
  return `${semaphore.slots.text}${slot}`;
}

function slotOf(semaphore: Semaphore, kv: EtcdKeyValue): number {
  return slotOfKey(semaphore, kv.key.toString('utf8'));
}

function slotOfKey(semaphore: Semaphore, key: string): number {
  return Number.parseInt(key.slice(semaphore.slots.text.length), 10);
}

/** The lowest slot in [0, N) no key in `taken` holds, -1 if none. */
function freeIn(semaphore: Semaphore, taken: readonly EtcdKeyValue[]): number {
  const used = new Set(taken.map((kv) => slotOf(semaphore, kv)));
  for (let slot = 0; slot < semaphore.permits; slot++) if (!used.has(slot)) return slot;
  return -1;
}

/** A granted slot's key as the held permit keeps it (its naming slot unused: slot keys are named by their slot). */
function slotNode(semaphore: Semaphore, slot: number, joinId: string, token: FencingToken): QueueKey {
  const key = slotKey(semaphore, slot);
  return { key, keyBytes: Buffer.from(key, 'utf8'), prefix: semaphore.slots.text, queue: semaphore.queue, slot: -1, join: joinId, token };
}

/**
 * Take a free slot while nobody waits, in one transaction per attempt: put
 * the slot's key if the queue is empty, the slot absent and no key of
 * another N exists. When the slot we tried was taken, the failure branch's
 * reads name a free one (tried next) or show every slot taken (null).
 */
async function takeIfFree(etcd: EtcdClient, lease: Lease, semaphore: Semaphore, plan: JoinPlan, givenUp: () => boolean): Promise<Claimed | null> {
  // The lowest slot first: a miss costs one more transaction, whose failure branch names a free slot.
  let slot = 0;
  for (;;) {
    const key = Buffer.from(slotKey(semaphore, slot), 'utf8');
    const response = await repeated(
      () =>
        etcd.kv.txn({
          compare: [semaphore.queue.empty, ...semaphore.guards, { key, target: 'Create', result: 'Equal', create_revision: '0' }],
          success: [{ request_put: { key, value: plan.value, lease: lease.idText } }],
          failure: [...semaphore.others, { request_range: { key: semaphore.queue.prefix, range_end: semaphore.queue.end, limit: 1, keys_only: true } }, { request_range: { key: semaphore.slots.prefix, range_end: semaphore.slots.end } }],
        }),
      lease,
      givenUp,
    );
    noteClusterId(etcd, response.header);
    const revision = int64(response.header.revision, 'revision');
    if (response.succeeded) return { node: slotNode(semaphore, slot, plan.joinId, revision), revision };
    mismatch(semaphore, response);
    const taken = rangeAt(response, 3).kvs;
    // Our own put, its reply lost and the request repeated: adopt it.
    const ours = taken.find((kv) => joinOf(kv) === plan.joinId);
    if (ours !== undefined) return { node: slotNode(semaphore, slotOf(semaphore, ours), plan.joinId, int64(ours.create_revision, 'create revision')), revision };
    if (rangeAt(response, 2).kvs.length > 0) return null;
    slot = freeIn(semaphore, taken);
    if (slot < 0) return null;
  }
}

/**
 * At the head of the queue: claim a free slot in one transaction that puts
 * its key and deletes our queue key (comparing that our queue key is still
 * ours and the slot absent). With every slot taken, watch the slot keys from
 * the revision read and try again when one is deleted.
 */
async function claimAtHead(etcd: EtcdClient, lease: Lease, semaphore: Semaphore, joined: Joined, plan: JoinPlan, stop: Promise<never>, givenUp: () => boolean, waiting: () => void): Promise<Claimed> {
  const node = joined.node;
  const ours = { key: node.keyBytes, target: 'Create' as const, result: 'Equal' as const, create_revision: node.token.toString() };
  // The lowest slot first: a miss costs one more transaction, whose failure branch names a free slot.
  let slot = 0;
  for (;;) {
    const key = Buffer.from(slotKey(semaphore, slot), 'utf8');
    const response = await repeated(
      () =>
        etcd.kv.txn({
          compare: [ours, { key, target: 'Create', result: 'Equal', create_revision: '0' }],
          // The slot key carries our queue key's value (lease, join, owner): a lost reply's claim is found by its join.
          success: [{ request_put: { key, value: plan.value, lease: lease.idText } }, { request_delete_range: { key: node.keyBytes } }],
          failure: [{ request_range: { key: node.keyBytes, keys_only: true } }, { request_range: { key: semaphore.slots.prefix, range_end: semaphore.slots.end } }],
        }),
      lease,
      givenUp,
    );
    const revision = int64(response.header.revision, 'revision');
    if (response.succeeded) {
      freeSlot(lease, node);
      return { node: slotNode(semaphore, slot, node.join, revision), revision };
    }
    const taken = rangeAt(response, 1).kvs;
    const mine = taken.find((kv) => joinOf(kv) === node.join);
    if (mine !== undefined) {
      freeSlot(lease, node);
      return { node: slotNode(semaphore, slotOf(semaphore, mine), node.join, int64(mine.create_revision, 'create revision')), revision };
    }
    if (rangeAt(response, 0).kvs.length === 0) throw new LockLostError(semaphore.name, 'node_deleted', `semaphore ${semaphore.name}: our queue key ${node.key} was deleted while waiting`);
    slot = freeIn(semaphore, taken);
    if (slot >= 0) continue;
    waiting();
    slot = await slotDeleted(etcd, semaphore, revision, stop);
  }
}

/** Resolves with the slot of the first slot key deleted after `revision` (a watch on the slot keys). */
async function slotDeleted(etcd: EtcdClient, semaphore: Semaphore, revision: bigint, stop: Promise<never>): Promise<number> {
  let watch: EtcdWatch | null = null;
  const deleted = new Promise<number>((resolve) => {
    watch = watchRange(etcd, semaphore.slots.prefix, semaphore.slots.end, revision + 1n, false, {
      deleted: (kv) => resolve(slotOf(semaphore, kv)),
      // A watch etcd cannot serve (a compacted revision): look again, from the lowest slot.
      lost: () => resolve(0),
    });
  });
  try {
    const slot = await Promise.race([deleted, stop]);
    return Number.isInteger(slot) && slot >= 0 && slot < semaphore.permits ? slot : 0;
  } finally {
    (watch as EtcdWatch | null)?.cancel();
  }
}

function checkPermits(options: unknown): number {
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('acquirePermit needs options with permits: { permits: N }');
  const permits = (options as { permits?: unknown }).permits;
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
    throw new InvalidArgumentError(`permits must be an integer from 1 to ${MAX_PERMITS}, got ${String(permits)}`);
  }
  return permits;
}

/** Async, so a bad argument rejects (before any request) rather than throwing. */
async function acquire(etcd: EtcdClient, name: string, wait: 'wait' | 'try', options: unknown): Promise<EtcdPermit | null> {
  const permits = checkPermits(options);
  checkName(name);
  const semaphore = semaphoreOf(name, permits);
  const build = (lease: Lease, node: QueueKey, revision: bigint, marginMs: number): HeldPermit =>
    new HeldPermit(etcd, lease, name, slotOfKey(semaphore, node.key), permits, node, revision, marginMs);
  return traceAcquire('etcd', name, wait, () =>
    etcdSourceIds.afterGrant(
      etcd,
      joinAndWait(etcd, {
        kind: 'permit',
        root: SEMAPHORES_ROOT,
        name,
        mode: wait,
        options,
        ownerField: 'owner',
        build,
        plan: (lease, owner) => planJoinIn(lease, semaphore.queue, owner, semaphore.rule),
        fastPath: (lease, plan, givenUp) => takeIfFree(etcd, lease, semaphore, plan, givenUp),
        claim: (lease, joined, plan, stop, givenUp, waiting) => claimAtHead(etcd, lease, semaphore, joined, plan, stop, givenUp, waiting),
      }),
      (permit) => permit.release(),
      options,
    ),
  );
}

/**
 * Wait for one of `options.permits` permits of the semaphore `name`, in the
 * order of arrival: at most that many are held at once. The Permit holds a
 * slot in [0, permits); its token is the create revision of the slot's key,
 * taken when it claimed the slot, so per slot the tokens of successive
 * holders strictly increase; its sequencer names `<name>#<slot>`. Another
 * `permits` than the holders' and waiters' of the name: PermitsMismatchError.
 * Gives up (leaving no key) on `signal` or `timeoutMs`.
 */
export function acquirePermit(etcd: EtcdClient, name: string, options: PermitOptions): Promise<EtcdPermit> {
  return acquire(etcd, name, 'wait', options) as Promise<EtcdPermit>;
}

/** One permit of the semaphore `name` only if nobody waits and a slot is free; null otherwise (leaving nothing behind). */
export function tryAcquirePermit(etcd: EtcdClient, name: string, options: TryPermitOptions): Promise<EtcdPermit | null> {
  return acquire(etcd, name, 'try', options);
}
