/**
 * Join a queue and wait for our turn: the core's fair-queue join
 * (joinQueue of fencekeeper/extend) over etcd's keys under a prefix, for
 * the lock, the read-write lock, the semaphore and the election. Every way
 * out but a grant deletes our key before the caller hears of it (a key put
 * by a transaction whose reply was lost too: its name is this join's own,
 * so deleting it is always safe).
 */
import { LockLostError, type SequencerKind } from '../../index.js';
import { DEFAULT_OWNER, WaitGroup, joinQueue, safetyMargin, type QueueJoinSteps, type QueueStopper } from '../../extend.js';
import type { EtcdClient } from './client.js';
import { checkName, checkWaitOptions } from './input.js';
import { join, joinIfEmpty, leave, planJoin, untilLeaseEnds, waitForTurn, type JoinPlan, type Joined, type QueueKey } from './queue.js';
import { etcdSession, type EtcdSession, type Lease } from './session.js';

export interface JoinRequest<T> {
  /** The grant's kind (a plain, read or write lock, a permit, a leadership). */
  readonly kind: SequencerKind;
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
  /**
   * Before joining: the grant taken at once without a queue key (a
   * semaphore's free slot while nobody waits), or null to join (a 'try'
   * then returns null). Its key is deleted if the caller gave up meanwhile.
   */
  readonly fastPath?: (lease: Lease, plan: JoinPlan, givenUp: () => boolean) => Promise<Claimed | null>;
  /**
   * At our turn: the key that is the grant (a semaphore's slot, claimed
   * with our queue key's deletion). Default: our queue key itself.
   * `waiting()` is called before it waits for a slot (the self-wait warning).
   */
  readonly claim?: (lease: Lease, joined: Joined, plan: JoinPlan, stop: Promise<never>, givenUp: () => boolean, waiting: () => void) => Promise<Claimed>;
}

/** A granted key that is not our queue key (a semaphore's slot), and a revision at which it was seen. */
export interface Claimed {
  readonly node: QueueKey;
  readonly revision: bigint;
}

/** Each client's waits: their timeouts share one timer. */
const waitsOf = new WeakMap<EtcdClient, WaitGroup>();

function waitsFor(etcd: EtcdClient): WaitGroup {
  let waits = waitsOf.get(etcd);
  if (waits === undefined) waitsOf.set(etcd, (waits = new WaitGroup()));
  return waits;
}

/** One join's steps, and the state they share: the lease, the plan, the revision our turn was seen at. */
class EtcdJoin<T extends { readonly held: boolean }> implements QueueJoinSteps<Joined, Joined, Claimed, T> {
  readonly kind: SequencerKind;
  readonly name: string;
  readonly mode: 'wait' | 'try';
  readonly client: EtcdClient;
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  /** The lease's end stops the join: the stopper follows it from the start. */
  readonly stopperFirst = true;
  readonly #request: JoinRequest<T>;
  readonly #session: EtcdSession;
  readonly #owner: string;
  readonly #safetyMarginMs: number | undefined;
  #stopper: QueueStopper | null = null;
  #lease: Lease | null = null;
  #plan: JoinPlan | null = null;
  #revision = 0n;
  readonly shortcut?: QueueJoinSteps<Joined, Joined, Claimed, T>['shortcut'];
  readonly claim?: QueueJoinSteps<Joined, Joined, Claimed, T>['claim'];
  readonly #givenUp = (): boolean => this.#stopper?.isStopped === true;

  constructor(etcd: EtcdClient, request: JoinRequest<T>, session: EtcdSession, options: { signal?: AbortSignal | undefined; timeoutMs?: number | undefined; owner?: string | undefined; safetyMarginMs?: number | undefined }) {
    this.kind = request.kind;
    this.name = request.name;
    this.mode = request.mode;
    this.client = etcd;
    this.signal = options.signal;
    this.timeoutMs = options.timeoutMs;
    this.#request = request;
    this.#session = session;
    this.#owner = options.owner ?? DEFAULT_OWNER;
    this.#safetyMarginMs = options.safetyMarginMs;
    const { fastPath, claim } = request;
    if (fastPath !== undefined) {
      this.shortcut = async (stopper) => {
        const lease = await this.#ready(stopper);
        return fastPath(lease, this.#plan as JoinPlan, this.#givenUp);
      };
    }
    if (claim !== undefined) {
      this.claim = (joined, stopper, waiting) => claim(this.#lease as Lease, joined, this.#plan as JoinPlan, stopper.stopped, this.#givenUp, waiting);
    }
  }

  get waits(): WaitGroup {
    return waitsFor(this.client);
  }

  /** The lease (a live one as it is: a race with the stopper would cost an await on every acquire), and our plan on it. */
  #ready(stopper: QueueStopper): Lease | Promise<Lease> {
    if (this.#lease !== null) return this.#lease;
    this.#stopper = stopper;
    const live = this.#session.live;
    return live !== null ? this.#use(live, stopper) : stopper.race(this.#session.lease()).then((lease) => this.#use(lease, stopper));
  }

  #use(lease: Lease, stopper: QueueStopper): Lease {
    this.#lease = lease;
    stopper.follow((stop) => lease.onEnd(stop));
    const request = this.#request;
    this.#plan = request.plan === undefined ? planJoin(lease, request.root, request.name, this.#owner) : request.plan(lease, this.#owner);
    return lease;
  }

  enter(stopper: QueueStopper | null): Promise<Joined | null> {
    const ready = this.#ready(stopper as QueueStopper);
    return ready instanceof Promise ? ready.then((lease) => this.#join(lease)) : this.#join(ready);
  }

  #join(lease: Lease): Promise<Joined | null> {
    const plan = this.#plan as JoinPlan;
    return this.mode === 'try' ? joinIfEmpty(this.client, lease, plan, this.#givenUp) : join(this.client, lease, plan, this.#givenUp);
  }

  /** No predecessor (a try's join, or an empty queue): our turn now, without a wait to set up. */
  place(joined: Joined): 'turn' | Joined {
    this.#revision = joined.revision;
    return joined.predecessor === null ? 'turn' : joined;
  }

  async waitForTurn(joined: Joined, _wait: Joined, stopper: QueueStopper): Promise<'turn' | 'gone'> {
    const { outcome, revision } = await waitForTurn(this.client, this.#lease as Lease, joined, stopper.stopped, this.#givenUp);
    this.#revision = revision;
    return outcome;
  }

  lost(joined: Joined): Error {
    return new LockLostError(this.name, 'node_deleted', `lock ${this.name}: our queue key ${joined.node.key} was deleted while waiting`);
  }

  build(joined: Joined | null, claimed: Claimed | null): T {
    const lease = this.#lease as Lease;
    const granted = claimed ?? { node: (joined as Joined).node, revision: this.#revision };
    return this.#request.build(lease, granted.node, granted.revision, safetyMargin(lease.ttlMs, this.#safetyMarginMs), this.#owner);
  }

  abandon(joining: Promise<Joined | null>): Promise<void> {
    const lease = this.#lease;
    const plan = this.#plan;
    if (lease === null || plan === null) return joining.then(ignore, ignore);
    return abandon(this.client, lease, joining, plan);
  }

  unclaim(claiming: Promise<Claimed | null>): Promise<void> {
    const lease = this.#lease;
    return lease === null ? claiming.then(ignore, ignore) : unclaim(this.client, lease, claiming);
  }
}

const ignore = (): void => undefined;

/** Check every argument (a bad one rejects, nothing sent), then join and wait (null only in 'try' mode). */
export function joinAndWait<T extends { readonly held: boolean }>(etcd: EtcdClient, request: JoinRequest<T>): Promise<T | null> {
  let steps: EtcdJoin<T>;
  try {
    steps = checked(etcd, request);
  } catch (error) {
    return Promise.reject(error);
  }
  return joinQueue(steps);
}

function checked<T extends { readonly held: boolean }>(etcd: EtcdClient, request: JoinRequest<T>): EtcdJoin<T> {
  const session = etcdSession(etcd);
  checkName(request.name);
  const options = checkWaitOptions(request.options, request.mode === 'wait', request.ownerField);
  // The lease is granted at least the TTL asked for: a margin that fits it fits the grant.
  if (options.safetyMarginMs !== undefined) safetyMargin(session.requestedTtlSeconds * 1000, options.safetyMarginMs);
  options.signal?.throwIfAborted();
  return new EtcdJoin(etcd, request, session, options);
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

/** Delete the key a claim took after its caller gave up (once the claim has settled; nothing if it took none). */
async function unclaim(etcd: EtcdClient, lease: Lease, claiming: Promise<Claimed | null>): Promise<void> {
  const claimed = await untilLeaseEnds(claiming, lease).catch(() => undefined);
  if (claimed === undefined || claimed === null) return;
  await leave(etcd, lease, claimed.node).catch(() => undefined);
}
