/**
 * Everything that ends a wait in the queue early, as one promise that
 * rejects: the caller's signal, its timeout, the session's expiry, the
 * client's close. The waiter races its steps against it and, stopped,
 * removes its node (./queue.ts abandon).
 *
 * A process may wait for many locks at once on one session, often with one
 * signal for all of them (a shutdown signal) and one timeout. So nothing here
 * is made per wait that one per client or per signal can serve: one 'state'
 * listener per client, one 'abort' listener per signal (however many waits
 * share it), and one timer per client for every wait's timeout. Adding and
 * removing a listener per wait would also trip Node's MaxListenersExceeded
 * warning as soon as eleven waits share a client or a signal.
 */
import { performance } from 'node:perf_hooks';
import { ClientClosedError, LockTimeoutError, SessionExpiredError } from '../../../errors.js';
import type { ClientState, ZooKeeperClient } from '../client.js';
import { perClient } from './per-client.js';

/** One client's waits: the session's end stops them all; their timeouts share one timer. */
class ClientWaits {
  readonly all = new Set<Stopper>();
  readonly timed = new Set<Stopper>();
  #timer: NodeJS.Timeout | null = null;
  #armedAt = Infinity;

  constructor(zk: ZooKeeperClient) {
    zk.on('state', (state: ClientState) => {
      if (state === 'expired') for (const s of [...this.all]) s.stop(new SessionExpiredError());
      else if (state === 'closed') for (const s of [...this.all]) s.stop(new ClientClosedError());
    });
  }

  addTimed(stopper: Stopper): void {
    this.timed.add(stopper);
    if (stopper.timesOutAt < this.#armedAt) this.#arm(stopper.timesOutAt);
  }

  deleteTimed(stopper: Stopper): void {
    this.timed.delete(stopper);
    // The timer stays armed: it fires once, finds nothing due and re-arms (or stops) then.
    if (this.timed.size === 0 && this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
      this.#armedAt = Infinity;
    }
  }

  #arm(at: number): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#armedAt = at;
    // (setTimeout fires at once for anything past 2^31 - 1 ms)
    this.#timer = setTimeout(this.#fire, Math.min(Math.max(0, at - performance.now()), 0x7fffffff));
    this.#timer.unref();
  }

  readonly #fire = (): void => {
    this.#timer = null;
    this.#armedAt = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const s of [...this.timed]) {
      if (s.timesOutAt <= now) s.timeOut();
      else if (s.timesOutAt < next) next = s.timesOutAt;
    }
    if (next !== Infinity && this.timed.size > 0) this.#arm(next);
  };
}

const waitsOf = perClient((zk) => new ClientWaits(zk));

/** The waits each caller's signal ends, told by one 'abort' listener per signal. */
const bySignal = new WeakMap<AbortSignal, Set<Stopper>>();

function onSignal(signal: AbortSignal, stopper: Stopper): void {
  let set = bySignal.get(signal);
  if (set === undefined) {
    const stoppers = new Set<Stopper>();
    set = stoppers;
    bySignal.set(signal, stoppers);
    signal.addEventListener(
      'abort',
      () => {
        bySignal.delete(signal);
        for (const s of [...stoppers]) s.stop(signal.reason);
      },
      { once: true },
    );
  }
  set.add(stopper);
}

export class Stopper {
  readonly stopped: Promise<never>;
  /** performance.now() at which the caller's timeout ends the wait (Infinity: none). */
  readonly timesOutAt: number;
  #reason: unknown = null;
  #reject!: (reason: unknown) => void;
  readonly #waits: ClientWaits;
  readonly #name: string;
  readonly #signal: AbortSignal | undefined;
  readonly #timeoutMs: number | undefined;

  constructor(zk: ZooKeeperClient, name: string, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#name = name;
    this.#signal = signal;
    this.#timeoutMs = timeoutMs;
    this.stopped = new Promise<never>((_, reject) => {
      this.#reject = reject;
    });
    this.stopped.catch(() => undefined);
    this.#waits = waitsOf(zk);
    this.#waits.all.add(this);
    if (signal !== undefined) onSignal(signal, this);
    this.timesOutAt = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs;
    if (timeoutMs !== undefined) this.#waits.addTimed(this);
  }

  /** End the wait with `reason` (the first one wins). */
  stop(reason: unknown): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('stopped');
    this.#reject(this.#reason);
  }

  /** The caller's timeout ran out (called by the client's timer). */
  timeOut(): void {
    this.stop(new LockTimeoutError(this.#name, this.#timeoutMs ?? 0));
  }

  /** Throw if a stop arrived (the wait may have finished in the same tick). */
  check(): void {
    if (this.#reason !== null) throw this.#reason;
  }

  dispose(): void {
    this.#waits.all.delete(this);
    if (this.#timeoutMs !== undefined) this.#waits.deleteTimed(this);
    const signal = this.#signal;
    if (signal !== undefined) {
      const set = bySignal.get(signal);
      set?.delete(this);
      // The signal's listener stays until it aborts or the signal is collected:
      // removing and re-adding it would cost every acquire that shares it.
    }
  }
}
