// A granted Redis or Redlock lock: its step-down holding, the watchdog that
// renews it at a third of the TTL, and its release.
//
// This is on the path of every acquire and release, so a grant is one object
// of a class (its methods and getters on the prototype, not an object literal
// with getters and closures made per grant), its holding, and its watchdog
// tick: an entry on the shared list of timeouts of its length (src/shared/redis/deadlines.ts),
// started again after each renewal, not a Node timer per grant.
import { type FencingToken, type Lock, type Sequencer, type SourceIdentity } from '../../index.js';
import { StepDownClock, grantSequencer, traceRelease, type Holding } from '../../extend.js';
import { Deadline, deadlines } from '../../shared/redis/deadlines.js';

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

/** What the grants of one client (Redlock: of one set, by its first client) share. */
export interface ClientGrants {
  readonly clock: StepDownClock;
  /** 'redis' or 'redlock': the source kind diagnostics name the grants by. */
  readonly kind: string;
}

const shared = new WeakMap<object, ClientGrants>();

/** The grants' shared parts of `owner` (a client, or the first client of a Redlock set); `name` is 'Redis' or 'Redlock'. */
export function grantsOf(owner: object, name: string): ClientGrants {
  let grants = shared.get(owner);
  if (grants === undefined) {
    const kind = name.toLowerCase();
    grants = Object.freeze({ clock: new StepDownClock({ name, grant: 'lock key', kind }), kind });
    shared.set(owner, grants);
  }
  return grants;
}

/** A grant's watchdog tick: its renewal, a third of the TTL after the grant and after each renewal's answer. */
class RenewalDue extends Deadline {
  readonly #renew: () => void;

  constructor(renew: () => void) {
    super();
    this.#renew = renew;
  }

  override expired(): void {
    this.#renew();
  }
}

/** One grant: the Lock a holder gets. Made by holdGrant, frozen there. */
class HeldGrant implements Lock {
  readonly name: string;
  readonly token: FencingToken;
  readonly #key: GrantKey;
  readonly #kind: string;
  readonly #holding: Holding;
  /** The watchdog: due a third of the TTL after the grant, and after each renewal's answer (started again, not made again). */
  readonly #watchdog: RenewalDue;
  readonly #every: number;
  #validUntil: number;
  #released: Promise<void> | null = null;
  #bound: Sequencer | null = null;

  constructor(parts: GrantParts, key: GrantKey) {
    this.name = parts.name;
    this.token = parts.token;
    this.#key = key;
    this.#kind = parts.grants.kind;
    this.#validUntil = parts.validUntil;
    // The watchdog stops when the holding ends, by its onEnd (not an abort
    // listener: a lock whose signal nobody reads never makes one).
    this.#holding = parts.grants.clock.hold({
      lock: parts.name,
      marginMs: parts.marginMs,
      deadline: () => this.#validUntil,
      token: parts.token,
      onEnd: () => this.#watchdog.cancel(),
    });
    this.#every = Math.max(1, Math.floor(parts.ttlMs / 3));
    this.#watchdog = new RenewalDue(() => void this.#renew());
    deadlines(this.#every).start(this.#watchdog);
  }

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
    deadlines(this.#every).start(this.#watchdog);
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

  /** The holding ends first (held false, signal aborted), then the compare-and-delete: the key's release never fails (single.ts, redlock.ts). */
  readonly #releaseKey = (): Promise<void> => {
    this.#holding.lose('released');
    return this.#key.release();
  };

  release(): Promise<void> {
    return (this.#released ??= traceRelease(this.#kind, this.name, this.token, this.#releaseKey));
  }

  /** `await using`: leaving the scope releases, as release(). */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/** A granted lock: held (step-down clock and watchdog) until released or lost. */
export function holdGrant(parts: GrantParts, key: GrantKey): RedisLock {
  return Object.freeze(new HeldGrant(parts, key));
}
