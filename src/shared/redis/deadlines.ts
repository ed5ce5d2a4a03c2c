// Timeouts of one length, many at a time, on one timer: the node timeout of
// every command (./client.ts) and the watchdog tick of every grant
// (src/sources/redis/held-lock.ts). Shared by the Redis family: the lock
// source and the Redis fences (adapters/redis/).
//
// An uncontended acquire + release starts and cancels three of them; a
// setTimeout each would make, insert, unref and cancel three Node timers per
// cycle (and a timer list each, created and dropped again whenever it was the
// only one of its length). Timeouts of one length expire in the order they
// started, so a list of them in that order needs one timer only, armed at its
// oldest entry's deadline. A cancelled entry leaves the list at once but
// leaves the timer armed: when it fires it finds nothing due, arms itself at
// the next entry's deadline, or, with the list empty, stays disarmed until an
// entry starts.
import { performance } from 'node:perf_hooks';

// The object itself, read once: a module loader that hands out a built-in
// module through a Proxy (vite-node does) would otherwise run the Proxy's
// trap on every read of the clock.
const clock = performance;

/** The monotonic clock every deadline of this entry is measured on. */
export const now = (): number => clock.now();

/** One pending timeout: `expired` runs at its deadline unless it is cancelled first. */
export abstract class Deadline {
  /** Its deadline on the performance.now() clock, while it is in a list. */
  at = 0;
  /** The list it waits in (null: not started, expired or cancelled). */
  list: Deadlines | null = null;
  prev: Deadline | null = null;
  next: Deadline | null = null;

  /** Runs once, at the deadline, after the entry has left its list. Must not throw. */
  abstract expired(): void;

  /** Leave the list without expiring; nothing when it is in none. */
  cancel(): void {
    this.list?.remove(this);
  }
}

/** The pending timeouts of one length, oldest first. */
export class Deadlines {
  readonly ms: number;
  #oldest: Deadline | null = null;
  #newest: Deadline | null = null;
  #timer: NodeJS.Timeout | null = null;

  constructor(ms: number) {
    this.ms = ms;
  }

  /** Start `entry` now (again, from now, if it was waiting already). */
  start(entry: Deadline): void {
    if (entry.list !== null) entry.list.remove(entry);
    entry.at = now() + this.ms;
    entry.list = this;
    entry.prev = this.#newest;
    entry.next = null;
    if (this.#newest === null) this.#oldest = entry;
    else this.#newest.next = entry;
    this.#newest = entry;
    // An armed timer is due no later than this entry: every entry before it started earlier.
    if (this.#timer === null) this.#arm(this.ms);
  }

  remove(entry: Deadline): void {
    if (entry.list !== this) return;
    if (entry.prev === null) this.#oldest = entry.next;
    else entry.prev.next = entry.next;
    if (entry.next === null) this.#newest = entry.prev;
    else entry.next.prev = entry.prev;
    entry.list = null;
    entry.prev = null;
    entry.next = null;
  }

  #arm(inMs: number): void {
    // Unref'd: a pending timeout keeps no process alive (its command's socket does, while it is open).
    this.#timer = setTimeout(this.#fire, inMs);
    this.#timer.unref();
  }

  readonly #fire = (): void => {
    // Timers count whole milliseconds on the event loop's clock: a deadline within 1 ms of now is due.
    const due = now() + 1;
    let entry = this.#oldest;
    while (entry !== null && entry.at <= due) {
      this.remove(entry);
      // An entry's `expired` may start another on this list (a renewal's command
      // with the watchdog's length): #timer is still set, so that start arms
      // nothing, and the timer is armed below for whichever entry is oldest.
      entry.expired();
      entry = this.#oldest;
    }
    this.#timer = null;
    if (entry !== null) this.#arm(Math.max(1, Math.ceil(entry.at - now())));
    // Nothing pending: a length nobody uses any more is not kept (the next timeout of it makes its list again).
    else if (byLength.get(this.ms) === this) byLength.delete(this.ms);
  };
}

const byLength = new Map<number, Deadlines>();

/** The shared list of timeouts `ms` long. */
export function deadlines(ms: number): Deadlines {
  let list = byLength.get(ms);
  if (list === undefined) {
    list = new Deadlines(ms);
    byLength.set(ms, list);
  }
  return list;
}
