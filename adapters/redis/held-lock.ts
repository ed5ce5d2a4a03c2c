// A granted Redis or Redlock lock: its step-down holding, the watchdog that
// renews it at a third of the TTL, and its release.
//
// This is on the path of every acquire and release, so a grant costs one
// object of a class (its methods and getters on the prototype, not closures
// made per grant) and its holding, and no timer of its own: the step-down
// clock and the watchdog each keep one timer per client for all its grants.
import { StepDownClock, grantSequencer, traceRelease, type FencingToken, type Holding, type Lock, type LossReason, type Sequencer, type SourceIdentity } from '../../src/index.js';
import { now } from './client.js';

/** What one renewal found: extended (the new earliest expiry), refused (the key is not ours), or no answer. */
export type Renewal = { readonly validUntil: number } | 'refused' | 'unknown';

/** What fencekeeper/redis hands out: the core's Lock. */
export type RedisLock = Lock;

/** A grant's source-specific part: how its key is renewed and released, and the source's identity. */
export interface GrantKey {
  /** Extend the key's TTL; the send time of the request it reports is measured by the callee. */
  renew(): Promise<Renewal>;
  /** Compare-and-delete wherever the key may be. */
  release(): Promise<void>;
  /** The source's identity, known by the time the grant is handed out (read when the holder first asks for its sequencer). */
  identity(): SourceIdentity | undefined;
}

/** What a grant needs besides its key. */
export interface GrantParts {
  readonly name: string;
  readonly token: FencingToken;
  readonly grants: ClientGrants;
  readonly marginMs: number;
  readonly ttlMs: number;
  /** The earliest instant the grant may end: send time of the acquire + TTL (Redlock: less the drift allowance). */
  readonly validUntil: number;
}

/**
 * What the grants of one client (Redlock: of one set, by its first client)
 * share: the step-down clock, the watchdog, the kind diagnostics name them by.
 */
export interface ClientGrants {
  readonly clock: StepDownClock;
  readonly watchdog: Watchdog;
  readonly kind: string;
}

const shared = new WeakMap<object, ClientGrants>();

/** The grants' shared parts of `owner` (a client, or the first client of a Redlock set); `name` is 'Redis' or 'Redlock'. */
export function grantsOf(owner: object, name: string): ClientGrants {
  let grants = shared.get(owner);
  if (grants === undefined) {
    const kind = name.toLowerCase();
    grants = Object.freeze({ clock: new StepDownClock({ name, grant: 'lock key', kind }), watchdog: new Watchdog(), kind });
    shared.set(owner, grants);
  }
  return grants;
}

/** The watchdog's due renewal: runs one grant's renewal (module-private access to HeldGrant, set in its static block). */
let renewDue: (grant: HeldGrant) => void;

/**
 * One timer for the renewals of every grant of a client, armed at the
 * earliest one due. A grant that ends leaves it armed: the timer is unref'd
 * and finds nothing due when it fires (as the step-down clock's, ../../src/step-down.ts),
 * so a loop of acquire and release creates no timer per grant.
 */
export class Watchdog {
  /** Each waiting grant and when its next renewal is due (performance.now()). A grant whose renewal is under way is not in it. */
  readonly #due = new Map<HeldGrant, number>();
  #timer: NodeJS.Timeout | null = null;
  /** The instant the timer is armed for (Infinity: not armed). */
  #armedFor = Infinity;

  /** Renew `grant` at `at`. */
  schedule(grant: HeldGrant, at: number): void {
    this.#due.set(grant, at);
    if (at < this.#armedFor) this.#arm(at);
  }

  /** No more renewals of `grant` (it ended). */
  cancel(grant: HeldGrant): void {
    this.#due.delete(grant);
  }

  #arm(at: number): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#armedFor = at;
    this.#timer = setTimeout(this.#fire, Math.max(0, at - now()));
    this.#timer.unref();
  }

  readonly #fire = (): void => {
    this.#timer = null;
    this.#armedFor = Infinity;
    // A timer may fire a fraction of a millisecond before the instant on
    // performance.now() (timers count whole milliseconds): due within 1 ms is due.
    const t = now() + 1;
    let next = Infinity;
    for (const [grant, at] of this.#due) {
      if (at <= t) {
        this.#due.delete(grant);
        renewDue(grant);
      } else if (at < next) next = at;
    }
    if (next < this.#armedFor) this.#arm(next);
  };
}

/** One grant: the Lock a holder gets. Made by holdGrant, frozen there. */
class HeldGrant implements Lock {
  readonly name: string;
  readonly token: FencingToken;
  readonly #key: GrantKey;
  readonly #grants: ClientGrants;
  readonly #every: number;
  readonly #holding: Holding;
  #validUntil: number;
  #released: Promise<void> | null = null;
  #bound: Sequencer | null = null;

  static {
    renewDue = (grant) => void grant.#renew();
  }

  constructor(parts: GrantParts, key: GrantKey) {
    this.name = parts.name;
    this.token = parts.token;
    this.#key = key;
    this.#grants = parts.grants;
    this.#validUntil = parts.validUntil;
    this.#every = Math.max(1, Math.floor(parts.ttlMs / 3));
    // The watchdog stops when the holding ends, by its onEnd (not an abort
    // listener: a lock whose signal nobody reads never makes one).
    this.#holding = parts.grants.clock.hold({
      lock: parts.name,
      marginMs: parts.marginMs,
      deadline: this.#deadline,
      token: parts.token,
      onEnd: this.#stopRenewing,
    });
    parts.grants.watchdog.schedule(this, now() + this.#every);
  }

  readonly #deadline = (): number => this.#validUntil;

  readonly #stopRenewing = (_reason: LossReason): void => {
    this.#grants.watchdog.cancel(this);
  };

  async #renew(): Promise<void> {
    if (this.#holding.ended) return;
    const renewal = await this.#key.renew().catch((): Renewal => 'unknown');
    if (this.#holding.ended) return;
    if (renewal === 'refused') {
      this.#holding.lose('renewal_failed');
      return;
    }
    // A renewal without an answer is tried again at the next tick; the step-down deadline ends the holding if none gets through.
    if (renewal !== 'unknown' && renewal.validUntil > this.#validUntil) this.#validUntil = renewal.validUntil;
    this.#grants.watchdog.schedule(this, now() + this.#every);
  }

  get signal(): AbortSignal {
    return this.#holding.signal;
  }

  get held(): boolean {
    return this.#holding.held;
  }

  get deadline(): number {
    return this.#holding.deadline;
  }

  get sequencer(): Sequencer {
    return (this.#bound ??= grantSequencer('lock', this.name, this.#key.identity(), this.token));
  }

  release(): Promise<void> {
    return (this.#released ??= traceRelease(this.#grants.kind, this.name, this.token, this.#releaseKey));
  }

  readonly #releaseKey = async (): Promise<void> => {
    this.#holding.lose('released');
    await this.#key.release();
  };
}

/** A granted lock: held (step-down clock and watchdog) until released or lost. */
export function holdGrant(parts: GrantParts, key: GrantKey): RedisLock {
  return Object.freeze(new HeldGrant(parts, key));
}
