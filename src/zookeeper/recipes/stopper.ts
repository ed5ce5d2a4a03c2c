/**
 * Everything that ends a wait in the queue early, as one promise that
 * rejects: the caller's signal, its timeout, the session's expiry, the
 * client's close. The waiter races its steps against it and, stopped,
 * removes its node (./queue.ts abandon).
 */
import { ClientClosedError, LockTimeoutError, SessionExpiredError } from '../../errors.js';
import type { ClientState, ZooKeeperClient } from '../client.js';

/**
 * The waits of each client, told of its session's end through one 'state'
 * listener per client: a process may wait for many locks on one session, and
 * a listener per wait would be added and removed on every acquire.
 */
const waits = new WeakMap<ZooKeeperClient, Set<Stopper>>();

function waitsOf(zk: ZooKeeperClient): Set<Stopper> {
  let set = waits.get(zk);
  if (set === undefined) {
    const stoppers = new Set<Stopper>();
    zk.on('state', (state: ClientState) => {
      if (state === 'expired') for (const s of [...stoppers]) s.stop(new SessionExpiredError());
      else if (state === 'closed') for (const s of [...stoppers]) s.stop(new ClientClosedError());
    });
    waits.set(zk, stoppers);
    set = stoppers;
  }
  return set;
}

export class Stopper {
  readonly stopped: Promise<never>;
  #reason: unknown = null;
  #reject!: (reason: unknown) => void;
  readonly #zk: ZooKeeperClient;
  readonly #signal: AbortSignal | undefined;
  readonly #timer: NodeJS.Timeout | null;

  constructor(zk: ZooKeeperClient, name: string, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#zk = zk;
    this.#signal = signal;
    this.stopped = new Promise<never>((_, reject) => {
      this.#reject = reject;
    });
    this.stopped.catch(() => undefined);
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    waitsOf(zk).add(this);
    this.#timer =
      timeoutMs === undefined
        ? null
        : setTimeout(() => this.stop(new LockTimeoutError(name, timeoutMs)), timeoutMs);
  }

  readonly #onAbort = (): void => this.stop(this.#signal?.reason);

  /** End the wait with `reason` (the first one wins). */
  stop(reason: unknown): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('stopped');
    this.#reject(this.#reason);
  }

  /** Throw if a stop arrived (the wait may have finished in the same tick). */
  check(): void {
    if (this.#reason !== null) throw this.#reason;
  }

  dispose(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
    waitsOf(this.#zk).delete(this);
  }
}
