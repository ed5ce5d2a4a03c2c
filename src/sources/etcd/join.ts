/**
 * Join a queue and wait for our turn: the acquire path shared by the lock
 * and the election. Every way out but a grant deletes our key before the
 * caller hears of it (a key put by a transaction whose reply was lost too:
 * its name is this join's own, so deleting it is always safe).
 */
import { LockLostError, LockTimeoutError } from '../../index.js';
import { DEFAULT_OWNER, safetyMargin } from '../../extend.js';
import type { EtcdClient } from './client.js';
import { checkName, checkWaitOptions } from './input.js';
import { join, joinIfEmpty, leave, planJoin, untilLeaseEnds, waitForTurn, type JoinPlan, type Joined, type QueueKey } from './queue.js';
import { etcdSession, type Lease } from './session.js';


export interface JoinRequest<T> {
  readonly root: string;
  readonly name: string;
  /** 'wait' for our turn, or 'try': take it only if the queue is empty (else null). */
  readonly mode: 'wait' | 'try';
  readonly options: unknown;
  /** 'owner' for a lock, 'id' for a campaign. */
  readonly ownerField: 'owner' | 'id';
  readonly build: (lease: Lease, node: QueueKey, revision: bigint, marginMs: number, owner: string) => T;
  /** Our key and how our turn is decided, when not the plain queue's under `root` (a read-write lock's, a semaphore's). */
  readonly plan?: (lease: Lease, owner: string) => JoinPlan;
}

export async function joinAndWait<T>(etcd: EtcdClient, request: JoinRequest<T>): Promise<T | null> {
  const { root, name, mode } = request;
  const session = etcdSession(etcd);
  checkName(name);
  const options = checkWaitOptions(request.options, mode === 'wait', request.ownerField);
  // The lease is granted at least the TTL asked for: a margin that fits it fits the grant.
  if (options.safetyMarginMs !== undefined) safetyMargin(session.requestedTtlSeconds * 1000, options.safetyMarginMs);
  options.signal?.throwIfAborted();
  const owner = options.owner ?? DEFAULT_OWNER;

  const stopper = new Stopper(name, options.signal, options.timeoutMs);
  let leaseOf: Lease | null = null;
  let plan: JoinPlan | null = null;
  let joining: Promise<Joined | null> | null = null;
  let handedOver = false;
  try {
    // A live lease is taken as it is: a race with the stopper would cost an await on every acquire.
    const lease = session.live ?? (await stopper.race(session.lease()));
    leaseOf = lease;
    stopper.watch(lease);
    plan = request.plan === undefined ? planJoin(lease, root, name, owner) : request.plan(lease, owner);
    const givenUp = (): boolean => stopper.isStopped;
    joining = mode === 'try' ? joinIfEmpty(etcd, lease, plan, givenUp) : join(etcd, lease, plan, givenUp);
    const joined = await stopper.race(joining);
    if (joined === null) return null;
    // No predecessor (a try's join, or an empty queue): our turn now, without a wait to set up.
    const { outcome, revision } = joined.predecessor === null ? { outcome: 'turn' as const, revision: joined.revision } : await waitForTurn(etcd, lease, joined, stopper.stopped, givenUp);
    stopper.check();
    if (outcome === 'gone') {
      throw new LockLostError(name, 'node_deleted', `lock ${name}: our queue key ${joined.node.key} was deleted while waiting`);
    }
    const marginMs = safetyMargin(lease.ttlMs, options.safetyMarginMs);
    const holder = request.build(lease, joined.node, revision, marginMs, owner);
    handedOver = true;
    return holder;
  } finally {
    stopper.dispose();
    if (!handedOver && joining !== null && plan !== null && leaseOf !== null) await abandon(etcd, leaseOf, joining, plan);
  }
}

/**
 * Delete what the join put, once its transaction has settled. One that
 * failed may still have been applied (its reply lost), and one that found
 * the queue busy put nothing; the key's name is this join's own, so the
 * delete goes out in every case but the busy one. A delete that cannot reach
 * etcd is left to the lease, which takes the key with it when it ends: a
 * caller's timeout or abort returns at the latest then.
 */
async function abandon(etcd: EtcdClient, lease: Lease, joining: Promise<Joined | null>, plan: JoinPlan): Promise<void> {
  // A transaction a silent member holds settles at the latest when the lease ends (and its keys with it).
  const joined = await untilLeaseEnds(joining, lease).catch(() => undefined);
  if (joined === null) return;
  await leave(etcd, lease, plan).catch(() => undefined);
}

/** The longest delay setTimeout keeps. */
const MAX_TIMER_MS = 0x7fffffff;

/**
 * Everything that ends a wait early (the caller's signal, its timeout, the
 * lease's end), as the rejection of whatever is raced against it.
 */
class Stopper {
  #reason: unknown = null;
  /** Rejects the pending race (a no-op once that has settled). */
  #rejectRace: ((reason: unknown) => void) | null = null;
  #stopped: Promise<never> | null = null;
  #rejectStopped: ((reason: unknown) => void) | null = null;
  readonly #signal: AbortSignal | undefined;
  #timer: NodeJS.Timeout | null;
  #unwatch: (() => void) | null = null;

  constructor(name: string, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#signal = signal;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    this.#timer = timeoutMs === undefined ? null : this.#startTimer(name, timeoutMs);
  }

  #startTimer(name: string, timeoutMs: number): NodeJS.Timeout {
    const timedOut = (): void => this.stop(new LockTimeoutError(name, timeoutMs));
    return timeoutMs <= MAX_TIMER_MS ? setTimeout(timedOut, timeoutMs) : this.#longTimer(performance.now() + timeoutMs, timedOut);
  }

  /** A timeout longer than a timer keeps (setTimeout fires a longer one after 1 ms): armed again until `at`. */
  #longTimer(at: number, timedOut: () => void): NodeJS.Timeout {
    return setTimeout(() => {
      const left = at - performance.now();
      if (left <= 0) timedOut();
      else this.#timer = this.#longTimer(at, timedOut);
    }, Math.min(Math.max(1, Math.ceil(at - performance.now())), MAX_TIMER_MS));
  }

  readonly #onAbort = (): void => this.stop(this.#signal?.reason);

  /**
   * `work`'s outcome, or the stop's reason if the wait is stopped first: one
   * promise (a Promise.race against a standing `stopped` costs three, and
   * acquire is a hot path). `work` is left to settle on its own.
   */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.#reason !== null) {
      work.catch(() => undefined);
      return Promise.reject(this.#reason);
    }
    return new Promise<T>((resolve, reject) => {
      this.#rejectRace = reject;
      work.then(resolve, reject);
    });
  }

  /** A promise that rejects when the wait is stopped (made when first asked for: only a waiter's turn needs one). */
  get stopped(): Promise<never> {
    if (this.#stopped === null) {
      this.#stopped = this.#reason !== null ? Promise.reject(this.#reason) : new Promise<never>((_, reject) => (this.#rejectStopped = reject));
      this.#stopped.catch(() => undefined);
    }
    return this.#stopped;
  }

  /** Stop when the lease ends too. */
  watch(lease: Lease): void {
    this.#unwatch = lease.onEnd((error) => this.stop(error));
  }

  stop(reason: unknown): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('stopped');
    this.#rejectRace?.(this.#reason);
    this.#rejectStopped?.(this.#reason);
  }

  get isStopped(): boolean {
    return this.#reason !== null;
  }

  check(): void {
    if (this.#reason !== null) throw this.#reason;
  }

  dispose(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#unwatch?.();
  }
}
