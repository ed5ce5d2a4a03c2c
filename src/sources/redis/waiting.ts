// Waiting for a lock: an attempt, then sleep until a release wakes us, the
// holder's key may have expired (its TTL as the refusing server reported
// it: a lock that ends without a release is noticed then), the caller's
// timeout, or its signal. Never a tight loop. A release that wakes us has
// reserved the lock for us (./scripts.ts): the attempt that follows the wake
// takes it, whoever else asks meanwhile.
import { LockTimeoutError } from '../../index.js';
import type { RedisClient } from '../../shared/redis/client.js';
import { now } from '../../shared/redis/deadlines.js';
import type { CheckedOptions } from './options.js';
import { queuePlace, wakeChannel, type WakeTicket } from './wake.js';

export type Attempt<T> = { readonly granted: T } | { readonly retryInMs: number };

/**
 * Run `attempt` until it grants. `entry` is the waiter entry the attempt's
 * scripts put in the waiter list of each client ('' in try mode). Try mode
 * makes one attempt and returns null when it does not grant.
 */
export async function acquireLoop<T>(
  clients: readonly RedisClient[],
  name: string,
  options: CheckedOptions,
  mode: 'wait' | 'try',
  attempt: (entries: readonly string[]) => Promise<Attempt<T>>,
  giveBack: (granted: T) => Promise<void>,
): Promise<T | null> {
  options.signal?.throwIfAborted();
  // First without a place in the queue: an uncontended acquire costs no subscriber.
  const first = await attempt(clients.map(() => ''));
  if ('granted' in first) return keepGrant(options.signal, first.granted, giveBack);
  if (mode === 'try') return null;
  return waitAfterRefusal(clients, name, options, attempt, giveBack);
}

/** A grant that arrives after the caller gave up (its signal aborted) is given back at once. */
export async function keepGrant<T>(signal: AbortSignal | undefined, granted: T, giveBack: (granted: T) => Promise<void>): Promise<T> {
  if (signal?.aborted) {
    await giveBack(granted);
    signal.throwIfAborted();
  }
  return granted;
}

/**
 * How long a release reserves the lock for the waiter it wakes: the wake's
 * delivery and the waiter's attempt, each within the node timeout; never
 * past the TTL. A waiter that does not come in time (paused, or its process
 * gone while its subscriber connection still stands) holds the lock up no
 * longer: the reservation ends by itself and the lock is free.
 */
export function handoffMsOf(options: CheckedOptions): number {
  return Math.min(options.ttlMs, 2 * options.nodeTimeoutMs);
}

/**
 * After a first attempt (without a place in the queue) was refused: join the
 * wake channel of every client, and attempt again at each wake, at the
 * holder's TTL, until it grants, the timeout or the signal.
 */
export async function waitAfterRefusal<T>(
  clients: readonly RedisClient[],
  name: string,
  options: CheckedOptions,
  attempt: (entries: readonly string[]) => Promise<Attempt<T>>,
  giveBack: (granted: T) => Promise<void>,
): Promise<T> {
  const { signal, timeoutMs } = options;
  const deadline = timeoutMs === undefined ? Infinity : now() + timeoutMs;
  let woken = false;
  let wake: (() => void) | null = null;
  const poke = (): void => {
    woken = true;
    const w = wake;
    wake = null;
    w?.();
  };
  signal?.addEventListener('abort', poke);
  const tickets: WakeTicket[] = [];
  try {
    const handoff = handoffMsOf(options);
    // All at once (a paused node costs its timeout once, not once per node after it);
    // every ticket taken is left again in `finally`, whatever failed beside it.
    const joined = await Promise.allSettled(clients.map((client) => wakeChannel(client).join(name, poke, options.nodeTimeoutMs, handoff)));
    for (const j of joined) if (j.status === 'fulfilled') tickets.push(j.value);
    for (const j of joined) if (j.status === 'rejected') throw j.reason;
    // One place on every node, so they all wake the same waiter first (./scripts.ts); taken now, as the
    // attempt that lists us is sent, so this process's places follow the order its attempts arrive in.
    const place = queuePlace();
    const entries = tickets.map((t) => t.enter(place));
    // Subscribed now: the next attempt puts us in the waiter list, so a release after it wakes us.
    for (;;) {
      signal?.throwIfAborted();
      woken = false;
      const result = await attempt(entries);
      if ('granted' in result) return keepGrant(signal, result.granted, giveBack);
      signal?.throwIfAborted();
      const left = deadline - now();
      if (left <= 0) throw new LockTimeoutError(name, timeoutMs ?? 0);
      if (woken) continue; // a release came while the attempt was under way
      const sleep = Math.min(left, Math.max(1, result.retryInMs));
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, sleep);
        timer.unref();
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = null;
    }
  } finally {
    signal?.removeEventListener('abort', poke);
    for (const t of tickets) t.leave();
  }
}
