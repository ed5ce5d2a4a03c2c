/**
 * Everything that ends a wait in a fair queue early, whichever source keeps
 * the queue: the caller's signal, its timeout, and what the source adds (its
 * session's or lease's end). The join races its steps against it and,
 * stopped, leaves the queue before the caller hears of it.
 *
 * A process may wait for many locks at once on one client, often with one
 * signal for all of them (a shutdown signal) and one timeout. So nothing here
 * is made per wait that one per client or per signal can serve: one 'abort'
 * listener per signal (however many waits share it), one timer per client
 * (a WaitGroup) for every wait's timeout, and the session's end told to the
 * group once. Adding and removing a listener per wait would also trip Node's
 * MaxListenersExceeded warning as soon as eleven waits share a signal.
 */
import { performance } from 'node:perf_hooks';
import { LockTimeoutError } from './errors.js';

/** The longest delay setTimeout keeps (it fires a longer one at once). */
const MAX_TIMER_MS = 0x7fffffff;

/**
 * One client's waits (a source keeps one per client): their timeouts share
 * one timer, and the client's end stops them all at once (stopAll).
 */
export class WaitGroup {
  readonly #all = new Set<QueueStopper>();
  readonly #timed = new Set<QueueStopper>();
  #timer: NodeJS.Timeout | null = null;
  #armedAt = Infinity;

  /** End every wait of this client with `reason` (its session expired, it was closed). */
  stopAll(reason: unknown): void {
    for (const stopper of [...this.#all]) stopper.stop(reason);
  }

  /** @internal */
  add(stopper: QueueStopper): void {
    this.#all.add(stopper);
    if (stopper.timesOutAt !== Infinity) {
      this.#timed.add(stopper);
      if (stopper.timesOutAt < this.#armedAt) this.#arm(stopper.timesOutAt);
    }
  }

  /** @internal */
  delete(stopper: QueueStopper): void {
    this.#all.delete(stopper);
    if (stopper.timesOutAt === Infinity) return;
    this.#timed.delete(stopper);
    // The timer stays armed: it fires once, finds nothing due and re-arms (or stops) then.
    if (this.#timed.size === 0 && this.#timer !== null) {
      clearTimeout(this.#timer);
      this.#timer = null;
      this.#armedAt = Infinity;
    }
  }

  #arm(at: number): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#armedAt = at;
    this.#timer = setTimeout(this.#fire, Math.min(Math.max(0, at - performance.now()), MAX_TIMER_MS));
    this.#timer.unref();
  }

  readonly #fire = (): void => {
    this.#timer = null;
    this.#armedAt = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const s of [...this.#timed]) {
      if (s.timesOutAt <= now) s.timeOut();
      else if (s.timesOutAt < next) next = s.timesOutAt;
    }
    if (next !== Infinity && this.#timed.size > 0) this.#arm(next);
  };
}

/** The waits each caller's signal ends, told by one 'abort' listener per signal. */
const bySignal = new WeakMap<AbortSignal, Set<QueueStopper>>();

function onSignal(signal: AbortSignal, stopper: QueueStopper): void {
  let set = bySignal.get(signal);
  if (set === undefined) {
    const stoppers = new Set<QueueStopper>();
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

/** An object told of a wait's stop (QueueStopper.tell): a closure's job without a closure per wait. */
export interface StopReceiver {
  /** The wait was stopped with `reason` (called once). */
  stopped(reason: unknown): void;
}

type StopListener = ((reason: unknown) => void) | StopReceiver;

/**
 * One wait's stop: rejects whatever is raced against it with the first
 * reason that arrives (the caller's abort reason, LockTimeoutError, or what
 * the source stops it with). dispose() when the wait is over, however it ended.
 */
export class QueueStopper {
  /** performance.now() at which the caller's timeout ends the wait (Infinity: none). */
  readonly timesOutAt: number;
  #reason: unknown = null;
  #stopped: Promise<never> | null = null;
  #rejectStopped: ((reason: unknown) => void) | null = null;
  // Made on the first listener, and one listener is kept as it is: a waiting
  // acquire has at most one, and an empty Set costs some 130 bytes per wait.
  #listeners: StopListener | Set<StopListener> | null = null;
  readonly #group: WaitGroup;
  readonly #name: string;
  readonly #signal: AbortSignal | undefined;
  readonly #timeoutMs: number | undefined;
  #unfollow: (() => void) | null = null;

  /** `group`: the client's waits; `name`: the lock a timeout names; `signal`, `timeoutMs`: the caller's (checked already). */
  constructor(group: WaitGroup, name: string, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#group = group;
    this.#name = name;
    this.#signal = signal;
    this.#timeoutMs = timeoutMs;
    this.timesOutAt = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs;
    group.add(this);
    if (signal !== undefined) {
      if (signal.aborted) this.stop(signal.reason);
      else onSignal(signal, this);
    }
  }

  /** A promise that rejects when the wait is stopped (made when first asked for). */
  get stopped(): Promise<never> {
    if (this.#stopped === null) {
      this.#stopped = this.#reason !== null ? Promise.reject(this.#reason) : new Promise<never>((_, reject) => (this.#rejectStopped = reject));
      this.#stopped.catch(() => undefined);
    }
    return this.#stopped;
  }

  /**
   * `work`'s outcome, or the stop's reason if the wait is stopped first: one
   * promise and a listener (a Promise.race against `stopped` costs three).
   * `work` is left to settle on its own.
   */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.#reason !== null) {
      work.catch(() => undefined);
      return Promise.reject(this.#reason);
    }
    return new Promise<T>((resolve, reject) => {
      this.#listen(reject);
      work.then(
        (value) => {
          this.#unlisten(reject);
          resolve(value);
        },
        (error: unknown) => {
          this.#unlisten(reject);
          reject(error);
        },
      );
    });
  }

  /** Call `listener` with the reason when stopped (at once if stopped already). Returns the function that removes it. */
  onStop(listener: (reason: unknown) => void): () => void {
    if (this.#reason !== null) {
      listener(this.#reason);
      return () => undefined;
    }
    this.#listen(listener);
    return () => this.#unlisten(listener);
  }

  /**
   * Tell `receiver` of the stop (receiver.stopped(reason), at once if stopped
   * already): onStop for an object, without a closure per wait. A waiting
   * acquire's waiter listens so (thousands may wait at once). Undone by
   * forget(receiver).
   */
  tell(receiver: StopReceiver): void {
    if (this.#reason !== null) receiver.stopped(this.#reason);
    else this.#listen(receiver);
  }

  /** Stop telling `receiver` (see tell). */
  forget(receiver: StopReceiver): void {
    this.#unlisten(receiver);
  }

  #listen(listener: StopListener): void {
    const listeners = this.#listeners;
    if (listeners === null) this.#listeners = listener;
    else if (listeners instanceof Set) listeners.add(listener);
    else if (listeners !== listener) this.#listeners = new Set([listeners, listener]);
  }

  #unlisten(listener: StopListener): void {
    const listeners = this.#listeners;
    if (listeners === listener) this.#listeners = null;
    else if (listeners instanceof Set) listeners.delete(listener);
  }

  /**
   * Stop also when something of the source's ends (a lease): `subscribe`
   * calls its argument then, and returns what unsubscribes (called by dispose()).
   */
  follow(subscribe: (stop: (reason: unknown) => void) => () => void): void {
    this.#unfollow?.();
    this.#unfollow = subscribe((reason) => this.stop(reason));
  }

  /** End the wait with `reason` (the first one wins). */
  stop(reason: unknown): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('stopped');
    this.#rejectStopped?.(this.#reason);
    const listeners = this.#listeners;
    this.#listeners = null;
    if (listeners === null) return;
    for (const listener of listeners instanceof Set ? [...listeners] : [listeners]) {
      if (typeof listener === 'function') listener(this.#reason);
      else listener.stopped(this.#reason);
    }
  }

  /** The caller's timeout ran out (called by the group's timer). */
  timeOut(): void {
    this.stop(new LockTimeoutError(this.#name, this.#timeoutMs ?? 0));
  }

  get isStopped(): boolean {
    return this.#reason !== null;
  }

  /** Throw if a stop arrived (the wait may have finished in the same tick). */
  check(): void {
    if (this.#reason !== null) throw this.#reason;
  }

  /** The wait is over, however it ended: leave the group, the signal's set and what follow() subscribed to. */
  dispose(): void {
    this.#group.delete(this);
    this.#unfollow?.();
    this.#unfollow = null;
    // The signal's listener stays until it aborts or the signal is collected:
    // removing and re-adding it would cost every acquire that shares it.
    if (this.#signal !== undefined) bySignal.get(this.#signal)?.delete(this);
  }
}
