/**
 * The step-down clock: when a holder must stop acting on its grant, by its own
 * monotonic clock, whatever source granted it.
 *
 * Every source ends a grant some fixed time after it last heard from the
 * holder: ZooKeeper expires a session it has not heard from for the
 * negotiated timeout, Redis drops a key whose TTL was not extended, etcd
 * revokes a lease without keepalives. The source heard from us no earlier
 * than the moment we *sent* the last request it acknowledged, so the grant
 * cannot end before
 *
 *     deadline = (monotonic send time of the last acknowledged heartbeat or renewal)
 *              + (session timeout, TTL or lease TTL as the server granted it)
 *
 * and a holding steps down `marginMs` before that. The send time, not the
 * time the reply arrived: a reply delayed by seconds says the server heard
 * us when we sent, not when we listened, and a deadline counted from the
 * arrival would run past the server's expiry by that delay.
 *
 * A Holding is read synchronously (`held` compares performance.now() with
 * the deadline, so code resuming after a long GC pause or a SIGSTOP reads
 * false before any timer has run) and its `signal` aborts with LockLostError
 * at the deadline, on a loss the source reports, and on release.
 *
 * One StepDownClock per session, lease or client, shared by all its holdings:
 * one timer at the earliest of their deadlines, re-armed as acknowledgements
 * move them on (one heartbeat per process, not a loop per lock).
 *
 * How a source plugs in its own deadline and its own loss events:
 *
 *   - ZooKeeper: one clock per client; every holding's deadline is
 *     `() => zk.sessionDeadline` (the session is shared); the client's
 *     'expired' and 'closed' states call `clock.end(...)`; a watch on our own
 *     node calls `holding.lose('node_deleted')`.
 *   - Redis: one clock per client (or per set of Redlock clients); each lock
 *     has its own TTL, so each holding's deadline is its own renewal's
 *     `() => lastRenewalSentAt + ttlMs` (Redlock: minus the drift allowance),
 *     moved on by the watchdog; a renewal the server refuses calls
 *     `holding.lose('renewal_failed')`.
 *   - etcd: one clock per lease (one lease per process); every holding's
 *     deadline is `() => lastKeepaliveSentAt + grantedTtlMs`; a lease that
 *     expires or is revoked calls `clock.end('session_expired')`; a watch on
 *     our key calls `holding.lose('node_deleted')`.
 *
 * A deadline may only move later (acknowledgements only get newer); the
 * clock re-reads every deadline each time its timer fires.
 *
 * Every source's grants begin and end here, so this is where operators are
 * told: fencekeeper:lock:held when a holding begins, fencekeeper:lock:lost
 * (with the reason the holder saw: the step-down deadline, an expiry the
 * source reported, ...) or fencekeeper:lock:released when it ends, with how
 * long it was held (./diagnostics.ts).
 */
import { performance } from 'node:perf_hooks';
import { lockEndedObserved, publishLockEnded, publishLockHeld } from './diagnostics.js';
import { InvalidArgumentError, LockLostError, type LossReason } from './errors.js';
import type { FencingToken } from './token.js';

/** What a source tells its clock about itself. */
export interface StepDownSource {
  /** The source as messages name it: 'ZooKeeper', 'Redis', 'etcd'. */
  readonly name: string;
  /** What carries the grants and may expire: 'session', 'lock key', 'lease'. */
  readonly grant: string;
  /** The LockSource kind diagnostics name it by ('zookeeper', 'redis', 'redlock', 'etcd'). Default: `name` in lower case. */
  readonly kind?: string;
  /**
   * Optional: whether the source already knows that every grant is gone (a
   * session seen expired, a closed client), checked by every `held` read so
   * no holding outlives a state change whose event has not been delivered yet.
   */
  ended?(): LossReason | null;
  /**
   * Optional: why the source cannot be heard from now, if it knows (a
   * ZooKeeper client's last connection error while no server has its
   * session: a certificate that does not verify, a refused port). Read when
   * a holding ends other than by a release or a deletion, and carried as
   * the LockLostError's cause, so the loss does not hide what led to it.
   */
  cause?(): Error | null;
}

/**
 * What StepDownClock.hold needs to know about one grant: its lock's name, its
 * safety margin, and the function giving the earliest instant the source may end it.
 */
export interface HoldingOptions {
  /** The lock's name as LockLostError.lock carries it. */
  readonly lock: string;
  /** Step down this long before the deadline (see safetyMargin). */
  readonly marginMs: number;
  /**
   * The earliest instant on the performance.now() clock at which the source
   * may end this grant: send time of the last acknowledged renewal + timeout.
   * Called on every `held` read and timer tick: keep it a field read.
   */
  readonly deadline: () => number;
  /** The grant's token, for diagnostics (fencekeeper:lock:held, :lost, :released). */
  readonly token?: FencingToken;
  /**
   * Called once when the holding ends, with the reason, before its signal
   * aborts: what a source must stop then (a renewal timer) without making
   * the signal for it.
   */
  readonly onEnd?: (reason: LossReason) => void;
}

/**
 * The step-down clock of a lock source: each grant's `held` turns false, and
 * its `signal` aborts, a safety margin before the earliest instant the source
 * may end the grant (by the holder's own monotonic clock), at once on a loss
 * the source reports, and on release. A source of your own makes one per
 * client and feeds it its deadline and loss events; one timer serves every grant.
 */
export class StepDownClock {
  readonly #source: StepDownSource;
  readonly #holdings = new Set<Holding>();
  #timer: NodeJS.Timeout | null = null;
  /** The instant the timer is armed for (Infinity: not armed). */
  #armedFor = Infinity;

  constructor(source: StepDownSource) {
    this.#source = source;
  }

  /** A new holding on this clock, held until its deadline, a loss or release. */
  hold(options: HoldingOptions): Holding {
    const holding = new Holding(this.#source, options, () => this.#forget(holding));
    this.#holdings.add(holding);
    // Deadlines only move later: a timer already armed at or before this
    // holding's deadline wakes in time for it (and re-reads every deadline then).
    if (holding.deadline < this.#armedFor) this.#arm();
    return holding;
  }

  /** The session, lease or client behind every current holding ended: end them all. */
  end(reason: LossReason, detail?: string): void {
    for (const h of [...this.#holdings]) h.lose(reason, detail);
  }

  #forget(holding: Holding): void {
    this.#holdings.delete(holding);
    if (this.#holdings.size === 0 && this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
      this.#armedFor = Infinity;
    }
  }

  /** Wake at the earliest deadline; by then it has usually moved on (a newer acknowledgement), so re-arm. */
  #arm(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#armedFor = Infinity;
    if (this.#holdings.size === 0) return;
    let earliest = Infinity;
    for (const h of this.#holdings) earliest = Math.min(earliest, h.deadline);
    this.#armedFor = earliest;
    // (setTimeout fires at once for anything past 2^31 - 1 ms)
    this.#timer = setTimeout(this.#check, Math.min(Math.max(0, earliest - performance.now()) + 1, 0x7fffffff));
    this.#timer.unref();
  }

  readonly #check = (): void => {
    this.#timer = null;
    this.#armedFor = Infinity;
    // `held` performs the comparison and aborts the ones past their deadline.
    for (const h of [...this.#holdings]) void h.held;
    this.#arm();
  };
}

/** How a holding ended; its error is made when first needed. */
interface Ended {
  readonly reason: LossReason;
  readonly detail: string | undefined;
  /** StepDownSource.cause at the end, if any. */
  readonly cause: Error | null;
  error: LockLostError | null;
}

/** One grant's step-down: made by StepDownClock.hold. */
export class Holding {
  /**
   * Made when someone first reads `signal` (an AbortController and its
   * signal are an EventTarget each: on a lock that is acquired, used and
   * released without a look at its signal they cost more than the rest of
   * the holding). Aborted at once if the holding has ended by then.
   */
  #controller: AbortController | null = null;
  /** How it ended (null: it has not). */
  #ended: Ended | null = null;
  readonly #source: StepDownSource;
  readonly #lock: string;
  readonly #marginMs: number;
  readonly #deadline: () => number;
  readonly #onEnd: () => void;
  readonly #onLoss: ((reason: LossReason) => void) | undefined;
  readonly #token: FencingToken | undefined;
  readonly #since = performance.now();

  /** @internal StepDownClock.hold makes holdings. */
  constructor(source: StepDownSource, options: HoldingOptions, onEnd: () => void) {
    this.#source = source;
    this.#lock = options.lock;
    this.#marginMs = options.marginMs;
    this.#deadline = options.deadline;
    this.#onEnd = onEnd;
    this.#onLoss = options.onEnd;
    this.#token = options.token;
    publishLockHeld(this.#kind(), this.#lock, this.#token);
  }

  /** Aborts with LockLostError when the grant can no longer be assumed held. */
  get signal(): AbortSignal {
    if (this.#controller === null) {
      this.#controller = new AbortController();
      if (this.#ended !== null) this.#controller.abort(this.#errorOf(this.#ended));
    }
    return this.#controller.signal;
  }

  /** Whether the holding has ended (`held` false for good), without reading the clock or the source. */
  get ended(): boolean {
    return this.#ended !== null;
  }

  /** The step-down instant on the performance.now() clock. */
  get deadline(): number {
    return this.#deadline() - this.#marginMs;
  }

  get held(): boolean {
    if (this.#ended !== null) return false;
    const ended = this.#source.ended?.() ?? null;
    if (ended !== null) {
      this.lose(ended);
      return false;
    }
    if (performance.now() >= this.deadline) {
      this.lose('deadline');
      return false;
    }
    return true;
  }

  /**
   * End the holding (idempotent: the first reason wins). `detail` replaces
   * the default explanation. A loss reported after the step-down deadline
   * has passed is a loss at the deadline: a process resuming from a long
   * pause may hear of the expiry (its client's own verdict, the server's
   * answer) before its step-down timer has had a turn, but the deadline came
   * first and is what ended the holding. `at`: when the loss happened on
   * the performance.now() clock, for a source that applies a loss it
   * recorded earlier (default: now).
   */
  lose(reason: LossReason, detail?: string, at: number = performance.now()): void {
    if (this.#ended !== null) return;
    if (reason !== 'released' && reason !== 'deadline' && at >= this.deadline) {
      reason = 'deadline';
      detail = undefined;
    }
    const cause = reason === 'released' || reason === 'node_deleted' ? null : (this.#source.cause?.() ?? null);
    const ended: Ended = { reason, detail, cause, error: null };
    this.#ended = ended;
    this.#onEnd();
    this.#onLoss?.(reason);
    // A loss other than a release gets its error now, its stack showing where it was noticed.
    // A release's is made only for a reader (a subscriber, the signal): a lock released
    // without either never builds one.
    if (reason !== 'released') this.#errorOf(ended);
    // Published before the abort: a subscriber counts the loss before any
    // abort listener (which may release, exit, or start again) has run.
    if (lockEndedObserved(reason)) publishLockEnded(this.#kind(), this.#lock, this.#token, reason, performance.now() - this.#since, this.#errorOf(ended));
    this.#controller?.abort(this.#errorOf(ended));
  }

  #errorOf(ended: Ended): LockLostError {
    if (ended.error !== null) return ended.error;
    const lock = this.#lock;
    // A release is the normal end of a holding, not a fault: its reason carries no stack (capturing one costs more than the release).
    const stackLimit = Error.stackTraceLimit;
    if (ended.reason === 'released') Error.stackTraceLimit = 0;
    try {
      const { cause } = ended;
      ended.error = new LockLostError(
        lock,
        ended.reason,
        `lock ${lock} lost: ${ended.detail ?? this.#explain(ended.reason)}${cause === null ? '' : ` (last connection error: ${cause.message})`}`,
        cause === null ? undefined : { cause },
      );
    } finally {
      Error.stackTraceLimit = stackLimit;
    }
    return ended.error;
  }

  #kind(): string {
    return this.#source.kind ?? this.#source.name.toLowerCase();
  }

  #explain(reason: LossReason): string {
    const { name, grant } = this.#source;
    switch (reason) {
      case 'deadline':
        return `no reply from ${name} in time: the ${grant} may expire at any moment (stepped down ${this.#marginMs} ms before the earliest expiry)`;
      case 'session_expired':
        return `the ${name} ${grant} expired`;
      case 'node_deleted':
        return 'its record was deleted';
      case 'renewal_failed':
        return `${name} refused a renewal: the ${grant} is no longer ours`;
      case 'closed':
        return `the ${name} client was closed`;
      case 'released':
        return 'released';
    }
  }
}

/**
 * The safety margin for a grant that lives `timeoutMs` after its last
 * acknowledged renewal, for a source that renews (pings, extends, keeps
 * alive) after a third of that time: default a quarter of it. A margin at or
 * above two thirds would step a healthy holder down between two renewals.
 */
export function safetyMargin(timeoutMs: number, requested: number | undefined): number {
  if (requested === undefined) return Math.round(timeoutMs / 4);
  if (typeof requested !== 'number' || !Number.isFinite(requested) || requested < 0 || requested >= (timeoutMs * 2) / 3) {
    throw new InvalidArgumentError(`safetyMarginMs must be in [0, ${Math.floor((timeoutMs * 2) / 3)}) for a ${timeoutMs} ms timeout, got ${String(requested)}`);
  }
  return requested;
}
