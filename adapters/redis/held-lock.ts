// A granted Redis or Redlock lock: its step-down holding, the watchdog that
// renews it at a third of the TTL, and its release.
import { StepDownClock, grantSequencer, traceRelease, type FencingToken, type Holding, type Lock, type Sequencer, type SourceIdentity } from '../../src/index.js';

/** What one renewal found: extended (the new earliest expiry), refused (the key is not ours), or no answer. */
export type Renewal = { readonly validUntil: number } | 'refused' | 'unknown';

export interface GrantParts {
  readonly name: string;
  readonly token: FencingToken;
  readonly clock: StepDownClock;
  readonly marginMs: number;
  readonly ttlMs: number;
  /** The earliest instant the grant may end: send time of the acquire + TTL (Redlock: less the drift allowance). */
  readonly validUntil: number;
  /** Extend the key's TTL; the send time of the request it reports is measured by the callee. */
  renew(): Promise<Renewal>;
  /** Compare-and-delete wherever the key may be. */
  release(): Promise<void>;
  /** The source's identity, known by the time the grant is handed out (read when the holder first asks for its sequencer). */
  identity(): SourceIdentity | undefined;
}

/** What fencekeeper/redis hands out: the core's Lock. */
export type RedisLock = Lock;

const clocks = new WeakMap<object, StepDownClock>();
const kinds = new WeakMap<StepDownClock, string>();

/** 'redis' or 'redlock': the source kind diagnostics name a clock's grants by. */
function kindOf(clock: StepDownClock): string {
  return kinds.get(clock) ?? 'redis';
}

/** One step-down clock per client (Redlock: per first client of the set), shared by its holdings. */
export function clockFor(owner: object, name: string): StepDownClock {
  let clock = clocks.get(owner);
  if (clock === undefined) {
    clock = new StepDownClock({ name, grant: 'lock key' });
    clocks.set(owner, clock);
    kinds.set(clock, name.toLowerCase());
  }
  return clock;
}

export function holdGrant(parts: GrantParts): RedisLock {
  let validUntil = parts.validUntil;
  let timer: NodeJS.Timeout | null = null;
  let released: Promise<void> | null = null;
  let bound: Sequencer | null = null;
  const every = Math.max(1, Math.floor(parts.ttlMs / 3));
  // The watchdog stops when the holding ends, by its onEnd (not an abort
  // listener: a lock whose signal nobody reads never makes one).
  const holding: Holding = parts.clock.hold({
    lock: parts.name,
    marginMs: parts.marginMs,
    deadline: () => validUntil,
    token: parts.token,
    onEnd: () => {
      if (timer !== null) clearTimeout(timer);
      timer = null;
    },
  });

  const tick = async (): Promise<void> => {
    timer = null;
    if (holding.ended) return;
    const renewal = await parts.renew().catch((): Renewal => 'unknown');
    if (holding.ended) return;
    if (renewal === 'refused') {
      holding.lose('renewal_failed');
      return;
    }
    // A renewal without an answer is tried again at the next tick; the step-down deadline ends the holding if none gets through.
    if (renewal !== 'unknown' && renewal.validUntil > validUntil) validUntil = renewal.validUntil;
    schedule();
  };
  const schedule = (): void => {
    timer = setTimeout(() => void tick(), every);
    timer.unref();
  };
  schedule();

  return Object.freeze({
    name: parts.name,
    token: parts.token,
    get signal() {
      return holding.signal;
    },
    get held() {
      return holding.held;
    },
    get deadline() {
      return holding.deadline;
    },
    get sequencer() {
      return (bound ??= grantSequencer('lock', parts.name, parts.identity(), parts.token));
    },
    release(): Promise<void> {
      released ??= traceRelease(kindOf(parts.clock), parts.name, parts.token, async () => {
        holding.lose('released');
        await parts.release();
      });
      return released;
    },
  });
}
