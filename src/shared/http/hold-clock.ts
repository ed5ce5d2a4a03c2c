// maxHoldMs for every held fence of the process without a timer per request.
// A setTimeout and its clearTimeout per admission were a fifth of a guard's
// own CPU (measured, node 20: the Timeout, its list insert, the libuv clock
// read, ref/unref). Holds with the same maxHoldMs expire in the order they
// were taken, so each maxHoldMs value keeps its holds in one FIFO list (a
// doubly linked one: a hold that ends leaves it in O(1)) and one unref'd
// timer armed for the oldest hold's deadline. A hold that ends before its
// deadline (nearly all) costs a clock read and a few links; the timer then
// wakes once at the ended hold's deadline, finds a later one at the head,
// and is armed again.

/** One hold on a HoldClock: linked into its list while it runs. */
export class Hold {
  /** performance.now() past which the hold has lasted too long. */
  deadline = 0;
  previous: Hold | undefined = undefined;
  next: Hold | undefined = undefined;
  /** The clock whose list this hold is on; undefined once it ended or expired. */
  clock: HoldClock | undefined = undefined;
  /** Called with `arg` once if the deadline passes while the hold is on its list. */
  readonly #expire: (arg: object) => void;
  readonly #arg: object;

  constructor(expire: (arg: object) => void, arg: object) {
    this.#expire = expire;
    this.#arg = arg;
  }

  /** The deadline passed: off the list already, tell the owner. */
  expired(): void {
    this.#expire(this.#arg);
  }

  /** End the hold before its deadline (a no-op once it ended or expired). */
  end(): void {
    this.clock?.remove(this);
  }
}

/** The holds of one maxHoldMs value, oldest first, and the timer for the oldest. */
export class HoldClock {
  readonly #ms: number;
  #head: Hold | undefined = undefined;
  #tail: Hold | undefined = undefined;
  #timer: NodeJS.Timeout | undefined = undefined;
  #held = 0;

  constructor(ms: number) {
    this.#ms = ms;
  }

  /** Start a hold now: `expire(arg)` is called `ms` from now unless the hold ends first. */
  start(expire: (arg: object) => void, arg: object): Hold {
    const hold = new Hold(expire, arg);
    // performance.now(): monotonic, so a wall-clock step neither expires a hold early nor holds it back.
    hold.deadline = performance.now() + this.#ms;
    hold.clock = this;
    hold.next = undefined;
    hold.previous = this.#tail;
    if (this.#tail === undefined) this.#head = hold;
    else this.#tail.next = hold;
    this.#tail = hold;
    this.#held++;
    if (this.#timer === undefined) this.#arm(this.#ms);
    return hold;
  }

  /** Take `hold` off the list (a no-op when it is not on this clock). */
  remove(hold: Hold): void {
    if (hold.clock !== this) return;
    const { previous, next } = hold;
    if (previous === undefined) this.#head = next;
    else previous.next = next;
    if (next === undefined) this.#tail = previous;
    else next.previous = previous;
    hold.previous = hold.next = hold.clock = undefined;
    this.#held--;
  }

  /** How many holds are on the list (ended and expired ones are not). */
  get held(): number {
    return this.#held;
  }

  #arm(ms: number): void {
    // Unref'd: a held fence does not keep the process alive. The delay is
    // at least 1 ms (the timer's own clock is coarser than performance.now()).
    this.#timer = setTimeout(HoldClock.#tick, Math.max(1, Math.ceil(ms)), this);
    this.#timer.unref();
  }

  static #tick(this: void, clock: HoldClock): void {
    clock.#timer = undefined;
    const now = performance.now();
    try {
      for (let hold = clock.#head; hold !== undefined && hold.deadline <= now; hold = clock.#head) {
        clock.remove(hold);
        hold.expired();
      }
    } finally {
      // Armed again for the next oldest hold, even if an expiry threw.
      const head = clock.#head;
      if (head !== undefined && clock.#timer === undefined) clock.#arm(head.deadline - performance.now());
    }
  }
}

const clocks = new Map<number, HoldClock>();

/** The clock for holds of `ms` milliseconds (one per distinct maxHoldMs of the process's guards). */
export function holdClock(ms: number): HoldClock {
  let clock = clocks.get(ms);
  if (clock === undefined) {
    clock = new HoldClock(ms);
    clocks.set(ms, clock);
  }
  return clock;
}
