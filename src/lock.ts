/**
 * What a lock and a leadership are, whichever token source granted them
 * (ZooKeeper here; a Redis key, a Redlock quorum or an etcd lease the same way).
 *
 * A holder can only ever know that it *held* the lock when the grant arrived.
 * Whether it still does is a statement about the source's view: a session the
 * server expires, a key whose TTL runs out, a lease nobody renewed. So every
 * grant carries two things:
 *
 *   - `held` and `signal`, the holder's own step-down by its own clock (see
 *     ./step-down.ts): false / aborted as soon as the source *may* have ended
 *     the grant, before anyone else can be granted it;
 *   - `token`, for the case the holder did not stop in time (paused in a long
 *     GC, frozen by SIGSTOP, its packets delayed): the resource compares it
 *     with the largest it has seen and refuses the stale write.
 *
 * A source adds what only it has (ZooKeeper: the queue node's `path`); code
 * that must work with any source uses these interfaces alone.
 *
 * Tokens compare only within one lock's history at one source, so both also
 * carry a `sequencer`: the kind of grant, the name, the
 * source's stable identity and the token. A fence bound to a lock
 * (bindFence) admits only sequencers of that lock.
 */
import { hostname } from 'node:os';
import type { Sequencer } from './sequencer.js';
import type { FencingToken } from './token.js';

/**
 * A held lock, whichever source granted it. `token` goes with every write to
 * the resource, which refuses tokens older than the largest it has seen;
 * `held` and `signal` step down by the holder's own clock as soon as the
 * source may have ended the grant; `release()` gives it back. Locks are not
 * reentrant: a second acquire of the same name queues behind this grant.
 */
export interface Lock {
  readonly name: string;
  /** Larger for every later grant of this lock (ZooKeeper: of any lock of the ensemble). */
  readonly token: FencingToken;
  /**
   * Aborts with a LockLostError (its `reason` says why: 'deadline', 'session_expired', 'released', …) when the lock can no
   * longer be assumed held: at the step-down deadline, when the source reports
   * the grant gone, and on release.
   */
  readonly signal: AbortSignal;
  /**
   * Compared synchronously with the step-down deadline on the monotonic clock:
   * code that resumes after a long pause reads false at once, before any timer
   * has had a chance to run.
   */
  readonly held: boolean;
  /**
   * The step-down instant on the performance.now() clock: `held` turns false
   * there unless an acknowledged renewal (a heartbeat, a TTL extension, a
   * lease keepalive) moves it later first. For work that must end before it
   * (a supervised command's lease, an outside call's own deadline).
   */
  readonly deadline: number;
  /** `{ kind: 'lock', name, source, token }`: pass it where a token goes to a bound fence. */
  readonly sequencer: Sequencer;
  /** Give the lock back and abort the signal (reason 'released'). Idempotent. */
  release(): Promise<void>;
  /**
   * `await using lock = await source.acquireLock(name)`: the lock is
   * released (as release()) when the block is left, by its end, a return or
   * a throw. Every grant of fencekeeper's sources has it; a Lock made by
   * hand (a source of your own) adds `[Symbol.asyncDispose]() { return
   * this.release(); }`, or extends QueueGrant from fencekeeper/extend. Needs
   * no `lib` setting beyond @types/node (Node 20.19 has the symbol).
   */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A won election, whichever source ran it: `epoch` grows with every later
 * leader and is fenced on like a lock's token; `held` and `signal` step down
 * as a lock's do; `resign()` hands leadership on.
 */
export interface Leadership {
  readonly name: string;
  /** Larger for every later leader of this election: fence downstream writes with it, as with a lock's token. */
  readonly epoch: FencingToken;
  /** Aborts with LockLostError when this process must stop acting as leader. */
  readonly signal: AbortSignal;
  /** As Lock.held. */
  readonly held: boolean;
  /** As Lock.deadline. */
  readonly deadline: number;
  /** `{ kind: 'election', name, source, token: epoch }`, as Lock.sequencer. */
  readonly sequencer: Sequencer;
  /** Step down (the next candidate is elected) and abort the signal. Idempotent. */
  resign(): Promise<void>;
  /** `await using leader = await source.campaign(name)`: resigns (as resign()) when the block is left, however it is left. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What every source accepts when asked for a lock. A source's own settings (a TTL, a key prefix) belong to the source itself. */
export interface AcquireOptions {
  /** Give up waiting when this aborts (rejects with its reason, leaving nothing behind). */
  readonly signal?: AbortSignal;
  /** Give up waiting after this long (LockTimeoutError, leaving nothing behind). */
  readonly timeoutMs?: number;
  /**
   * How long before the earliest instant the source may end the grant (a
   * session's or lease's expiry, a key's TTL) the holder steps down. Default:
   * a quarter of that timeout.
   */
  readonly safetyMarginMs?: number;
  /** Who holds it, as operators see it (lockStatus, `fencekeeper status`). Default: hostname:pid. */
  readonly owner?: string;
}

/**
 * AcquireOptions.owner's and CampaignOptions.id's default, hostname:pid: the
 * same for every source, so operators see one name per process whichever
 * lock service they look in. Computed once: os.hostname() is a system call,
 * and acquire is a hot path.
 */
export const DEFAULT_OWNER = `${hostname()}:${process.pid}`;

/** tryAcquireLock never waits, so it takes no timeout. */
export type TryAcquireOptions = Omit<AcquireOptions, 'timeoutMs'>;

/** What every source accepts when standing for election (campaign). */
export interface CampaignOptions {
  /** Stop campaigning (rejects with its reason, leaving nothing behind). */
  readonly signal?: AbortSignal;
  /** This candidate's id, visible to observers. Default: hostname:pid. */
  readonly id?: string;
  /** As AcquireOptions.safetyMarginMs. */
  readonly safetyMarginMs?: number;
}

/**
 * One of the N permits of a semaphore (LockSource.acquirePermit): a Lock on
 * one slot of `[0, permits)`. At most `permits` are held at once per name.
 * Its token is taken when it claims its slot (not when it joined the queue),
 * so per slot the tokens of successive holders strictly increase; its
 * sequencer is `{ kind: 'permit', name: '<name>#<slot>' }`, so a resource
 * fenced per slot refuses a stale holder of that slot, and one slot's holder
 * cannot advance another slot's fence.
 */
export interface Permit extends Lock {
  /** The semaphore's name, as passed to acquirePermit (Lock.name is the same). */
  readonly name: string;
  /** Which slot this permit holds, in `[0, permits)`. */
  readonly slot: number;
  /** How many permits the semaphore has (every holder and waiter of one name must agree). */
  readonly permits: number;
}

/** acquirePermit's options: the semaphore's size and what every acquire accepts. */
export interface PermitOptions extends AcquireOptions {
  /**
   * How many permits the semaphore has: an integer from 1 to 1024. Every
   * caller of one name must pass the same number while any of them holds or
   * waits: another number is refused (PermitsMismatchError).
   */
  readonly permits: number;
}

/** tryAcquirePermit never waits, so it takes no timeout. */
export type TryPermitOptions = Omit<PermitOptions, 'timeoutMs'>;
