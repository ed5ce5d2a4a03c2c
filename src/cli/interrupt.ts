/**
 * An operator's SIGINT or SIGTERM before a command holds anything: while it
 * connects to the lock service, and while it waits for the lock. Without a
 * listener of ours, Node's default handling ends the process by the signal
 * at once, with none of our clean-up: a connect to a paused node can last up
 * to one TTL, and an acquire reply that lands after it would leave a grant
 * behind until it expires. With one, the signal aborts `signal`, which the
 * connect and the acquire take: the command stops, gives back whatever came
 * too late (the sources' acquire does so for a grant that arrives after its
 * signal aborted) and exits 128 + the signal's number.
 *
 * Listening starts before the first connect and ends when the lock is held,
 * handed over (`handOver`) to the supervisor (../supervise.ts), which takes
 * the signals on to hand them to the command.
 */
import { ExitCode } from './exit-codes.js';
import type { LockService, LockServiceAddress } from './lock-service.js';
import { err } from './output.js';

const NUMBERS = { SIGINT: 2, SIGTERM: 15 } as const;
type Interrupting = keyof typeof NUMBERS;

export interface Interruption {
  /** Aborts at the first SIGINT or SIGTERM. */
  readonly signal: AbortSignal;
  /** The first signal that arrived, or null. */
  readonly by: Interrupting | null;
  /** 128 + the first signal's number (valid once `by` is set). */
  readonly exitCode: number;
  /** Stop listening; idempotent. */
  end(): void;
  /**
   * Call `next`, which starts listening for these signals itself, and only
   * then stop listening; returns what `next` returned. Node keeps a
   * signal's watcher only while some listener for it is registered: ending
   * first and listening again, even in the same tick, would drop a signal
   * the process has already caught but whose listener call the event loop
   * has not made yet, and the command would go on as if it had never come.
   * Listening in both places for that moment, the signal goes to `next`'s
   * listener. Ends the listening even when `next` throws.
   */
  handOver<T>(next: () => T): T;
}

export function listenForInterrupt(): Interruption {
  const controller = new AbortController();
  let by: Interrupting | null = null;
  const on = (name: Interrupting) => (): void => {
    // A second signal while we clean up changes nothing: the first one decides.
    if (by !== null) return;
    by = name;
    controller.abort(new Error(`interrupted by ${name}`));
  };
  const onInt = on('SIGINT');
  const onTerm = on('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  return {
    signal: controller.signal,
    get by() {
      return by;
    },
    get exitCode() {
      return ExitCode.signalBase + (by === null ? 0 : NUMBERS[by]);
    },
    end() {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
    },
    handOver(next) {
      try {
        return next();
      } finally {
        this.end();
      }
    },
  };
}

/**
 * `address.connect()`, given up at the interruption: null then (the reason
 * printed on stderr, and a connection that completed anyway closed again),
 * the caller exits with `interruption.exitCode`. A connect that fails on its
 * own, or is given up at `deadline`, ends the listening before its error is
 * thrown on.
 */
export async function connectUnlessInterrupted(address: LockServiceAddress, interruption: Interruption, deadline?: AbortSignal): Promise<LockService | null> {
  let service: LockService | undefined;
  try {
    // `deadline` (run's --timeout) gives the attempt up the same way; its rejection is thrown on.
    service = await address.connect(deadline === undefined ? interruption.signal : AbortSignal.any([interruption.signal, deadline]));
  } catch (error) {
    if (interruption.by === null) {
      interruption.end();
      throw error;
    }
  }
  // Not interrupted: connect resolved (a rejection was thrown above).
  if (interruption.by === null && service !== undefined) return service;
  await service?.close().catch(() => undefined);
  err(`interrupted by ${interruption.by} while connecting to ${address.description}; nothing was acquired`);
  return null;
}
