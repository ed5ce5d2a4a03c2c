// MemoryFenceStore: the fence of each resource kept in this process's memory.
//
// One entry per resource (one Map lookup per admission, and none to settle:
// the admission keeps its entry), holding:
//   - the high-water mark: the largest token ever admitted. It only ever
//     grows, so a token below it is stale now and forever, and is refused at
//     once without waiting.
//   - a FIFO mutex: held while an admission holds the fence, with the
//     requests waiting behind it in arrival order.
//   - the lock the fence is bound to (bind()), if any.
//
// The mark moves when a token is admitted, not when its admission commits:
// an admitted request may already have acted (written somewhere this store
// cannot undo) when it fails or its client leaves, so no smaller token may
// pass after it, whatever its outcome. commit() and abort() only free the
// fence.
//
// Memory: the entry of a resource that ever admitted a token (or was bound)
// is kept for good (a fence that forgot its mark would admit a stale holder
// again), so the set of resources must be bounded by the application, not
// derived from unchecked client input; a refused admission adds nothing. The
// mutex in it is a field, not an entry of its own: deleting and re-adding a
// Map entry at every settle and admission was a measurable share of a
// guard's CPU. A waiter is removed when it is admitted, refused, or its
// signal aborts. Nothing outlives its request.
import {
  FenceAlreadyBoundError,
  InvalidArgumentError,
  SequencerMismatchError,
  StaleTokenError,
  assertToken,
  fenceBinding,
  matchesBinding,
  resolveFencing,
  type FenceAdmission,
  type FenceBinding,
  type FenceMode,
  type FenceStore,
  type FencingToken,
  type Sequencer,
} from '../../index.js';
import { fenceAdvances, markAfter } from '../../extend.js';

interface Waiter {
  readonly token: FencingToken;
  /** False: a check-only admission (FenceMode), which leaves the mark where it is. */
  readonly advance: boolean;
  readonly resolve: (admission: FenceAdmission<undefined>) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

/**
 * A fence's mutex: FREE while nobody holds it; while held, the waiters
 * queued behind its holder, oldest first, or null while nobody waits (no
 * allocation for an uncontended admission).
 */
type Fence = Waiter[] | null | typeof FREE;

/** Nobody holds the fence. */
const FREE = 0;

/** One resource's fence: what the store and its admissions share; private to this module. */
class Entry {
  readonly resource: string;
  /** The largest token admitted (undefined: none yet). */
  mark: FencingToken | undefined = undefined;
  fence: Fence = FREE;
  /** The lock the fence is guarded by (bind()); undefined: never bound. */
  binding: FenceBinding | undefined = undefined;

  constructor(resource: string) {
    this.resource = resource;
  }
}

/** The store's entries by resource. */
type StoreState = Map<string, Entry>;

const SETTLED: Promise<void> = Promise.resolve();

/**
 * An admit() options object of fencekeeper's own guards may carry this
 * method instead of needing its `signal` read: told `abandoned`, it calls
 * it once if the wait is given up (unless the wait ended first), or answers
 * the reason at once when it was given up already. A waiter then costs no
 * AbortController and no event listener (measured: the largest cost of a
 * contended admission). Internal: not part of the public face.
 */
export const WHEN_ABANDONED: unique symbol = Symbol('fencekeeper.whenAbandoned');

/**
 * MemoryFenceStore's admission without a promise, for an uncontended fence:
 * see its [ADMIT_NOW] method. Internal: not part of the public face.
 */
export const ADMIT_NOW: unique symbol = Symbol('fencekeeper.admitNow');

/** A store that can admit an uncontended request without a promise (MemoryFenceStore). */
export interface AdmitsNow {
  [ADMIT_NOW](resource: string, presented: FencingToken | Sequencer, options?: FenceMode): FenceAdmission<unknown> | undefined;
}

/**
 * A MemoryFenceStore admission's commit or abort without a promise (both
 * only free the fence): the guards settle every request, and a promise with
 * its catch handler per request is garbage for nothing. Internal.
 */
export const SETTLE_NOW: unique symbol = Symbol('fencekeeper.settleNow');

/** An admission that can be settled without a promise (MemoryFenceStore's). */
export interface SettlesNow {
  [SETTLE_NOW](): void;
}

/** An options object that offers WHEN_ABANDONED. */
export interface Abandonable {
  [WHEN_ABANDONED](abandoned: (reason: unknown) => void): unknown;
}

/**
 * A FenceStore for a service that runs as one process: a per-resource FIFO
 * mutex and a map of high-water marks. Not shared between processes or
 * surviving a restart; behind a load balancer or across restarts use a store
 * that keeps the fence with the data (PostgresFenceStore).
 *
 * `options.signal` is consulted only when admit() has to wait behind another
 * admission: an uncontended admit completes at once, even with a signal that
 * is already aborted (the caller aborts that admission if it no longer wants it).
 */
export class MemoryFenceStore implements FenceStore<undefined> {
  readonly #state: StoreState = new Map();

  /**
   * Bind the fence of `resource` to one lock, once (the same binding again is
   * a no-op; another rejects with FenceAlreadyBoundError). From then on an
   * admission must present a Sequencer of exactly that lock: another lock,
   * kind or source, and a bare token, reject with SequencerMismatchError and
   * change nothing. Admissions already waiting were checked when they arrived.
   */
  bind(resource: string, binding: FenceBinding): Promise<FenceBinding> {
    try {
      if (typeof resource !== 'string' || resource.length === 0) throw new InvalidArgumentError('resource must be a non-empty string');
      const wanted = fenceBinding(binding);
      const recorded = this.#state.get(resource)?.binding;
      if (recorded === undefined) {
        entryOf(this.#state, resource).binding = wanted;
        return Promise.resolve(wanted);
      }
      if (recorded.kind !== wanted.kind || recorded.lock !== wanted.lock || recorded.source.kind !== wanted.source.kind || recorded.source.id !== wanted.source.id) {
        throw new FenceAlreadyBoundError(resource, recorded);
      }
      return Promise.resolve(recorded);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Wait for the fence of `resource` (FIFO), compare the token with its mark
   * and hold the fence until the admission settles. `advance: false` checks
   * without moving the mark (a reader of a read-write lock): admitted at or
   * above the mark, which stays where it was.
   */
  admit(resource: string, presented: FencingToken | Sequencer, options?: { signal?: AbortSignal } & FenceMode): Promise<FenceAdmission<undefined>> {
    let token: FencingToken;
    let advance: boolean;
    const state = this.#state;
    const found = state.get(resource);
    try {
      advance = checkedMode(resource, options);
      token = checkedToken(found, resource, presented);
    } catch (error) {
      return Promise.reject(error);
    }
    const entry = found ?? entryOf(state, resource);
    const fence = entry.fence;
    if (fence === FREE) {
      entry.fence = null;
      return Promise.resolve(admitted(entry, token, advance));
    }

    // Only a wait can be aborted, so the signal is read here and not above:
    // a caller may hand in options whose `signal` is made on first read
    // (fencing() does: an AbortController costs more than the rest of an
    // uncontended admission), and an uncontended admit never pays for it.
    const watch = (options as Partial<Abandonable> | undefined)?.[WHEN_ABANDONED];
    if (watch !== undefined) {
      return new Promise<FenceAdmission<undefined>>((resolve, reject) => {
        const waiter: Waiter = { token, advance, resolve, reject, signal: undefined, onAbort: undefined };
        const gone = watch.call(options, (reason) => {
          leaveQueue(entry, waiter);
          reject(reason);
        });
        if (gone !== undefined) return reject(gone);
        if (fence === null) entry.fence = [waiter];
        else fence.push(waiter);
      });
    }
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<FenceAdmission<undefined>>((resolve, reject) => {
      const waiter: Waiter = { token, advance, resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          leaveQueue(entry, waiter);
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      if (fence === null) entry.fence = [waiter];
      else fence.push(waiter);
    });
  }

  /**
   * admit() without a promise when nobody holds the fence: the admission,
   * or undefined when it would have to wait (then call admit()). Throws what
   * admit() rejects with (InvalidArgumentError, SequencerMismatchError,
   * StaleTokenError), having changed nothing. Internal: fencekeeper's guards
   * use it to admit an uncontended request in the same tick (no promise, no
   * async step: measured, the largest part of a guard's own cost over an
   * empty route).
   */
  [ADMIT_NOW](resource: string, presented: FencingToken | Sequencer, options?: FenceMode): FenceAdmission<undefined> | undefined {
    const state = this.#state;
    const entry = state.get(resource);
    const advance = checkedMode(resource, options);
    const token = checkedToken(entry, resource, presented);
    if (entry === undefined) {
      const created = entryOf(state, resource);
      created.fence = null;
      return admitted(created, token, advance);
    }
    if (entry.fence !== FREE) return undefined;
    entry.fence = null;
    return admitted(entry, token, advance);
  }

  current(resource: string): Promise<FencingToken | null> {
    return Promise.resolve(this.#state.get(resource)?.mark ?? null);
  }
}

/** The entry of `resource`, made now if it has none (only once an admission or a binding is accepted). */
function entryOf(state: StoreState, resource: string): Entry {
  let entry = state.get(resource);
  if (entry === undefined) {
    entry = new Entry(resource);
    state.set(resource, entry);
  }
  return entry;
}

/** The resource's name and the mode checked (INVALID_ARGUMENT): whether the admission advances the mark. */
function checkedMode(resource: string, options: FenceMode | undefined): boolean {
  if (typeof resource !== 'string' || resource.length === 0) throw new InvalidArgumentError('resource must be a non-empty string');
  return fenceAdvances(options, 'MemoryFenceStore.admit');
}

/**
 * Check an admission's token before it may hold or wait: the binding, and
 * the mark (it only grows: below it is stale whatever the holder does).
 * Throws the refusal; changes nothing.
 */
function checkedToken(entry: Entry | undefined, resource: string, presented: FencingToken | Sequencer): FencingToken {
  // A bare token (every guard's usual case) needs no resolving object.
  let token: FencingToken;
  let sequencer: Sequencer | null;
  if (typeof presented === 'bigint') {
    token = assertToken(presented);
    sequencer = null;
  } else {
    ({ token, sequencer } = resolveFencing(presented));
  }
  if (entry === undefined) return token;
  // A bound fence compares the lock first: another lock's tokens are not comparable with its mark.
  const bound = entry.binding;
  if (bound !== undefined && (sequencer === null || !matchesBinding(sequencer, bound))) {
    throw new SequencerMismatchError(resource, bound, sequencer === null ? null : { kind: sequencer.kind, lock: sequencer.name, source: sequencer.source, token: sequencer.token });
  }
  const mark = entry.mark;
  if (mark !== undefined && token < mark) throw new StaleTokenError(resource, token, mark);
  return token;
}

/**
 * Admit `token`: the mark advances now, not when the admission commits. An
 * admitted request may act (write somewhere the store cannot undo) before it
 * fails or its client leaves, so after it no smaller token may pass, whatever
 * its outcome (the fault checker caught the opposite: an aborted admission
 * let a smaller token in after its handler had written).
 */
function admitted(entry: Entry, token: FencingToken, advance: boolean): MemoryAdmission {
  const mark = entry.mark;
  entry.mark = markAfter(mark ?? null, token, advance);
  return new MemoryAdmission(entry, token, mark ?? null);
}

/** A waiter gives up: off the queue it waits in (a no-op once admitted or refused). */
function leaveQueue(entry: Entry, waiter: Waiter): void {
  const queue = entry.fence;
  if (queue === FREE || queue === null) return;
  const at = queue.indexOf(waiter);
  if (at !== -1) queue.splice(at, 1);
}

/** Settle one admission (called once, by its commit() or abort()) and pass the fence on. */
function release(entry: Entry): void {
  const fence = entry.fence;
  entry.fence = FREE;
  if (fence === FREE || fence === null) return;
  const mark = entry.mark;
  // Hand the fence to the oldest waiter whose token is still not stale;
  // refuse the stale ones on the way (they change nothing).
  for (let waiter = fence.shift(); waiter !== undefined; waiter = fence.shift()) {
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    if (mark !== undefined && waiter.token < mark) {
      waiter.reject(new StaleTokenError(entry.resource, waiter.token, mark));
      continue;
    }
    // Held again, by this waiter, with the rest still queued behind it.
    entry.fence = fence.length === 0 ? null : fence;
    waiter.resolve(admitted(entry, waiter.token, waiter.advance));
    return;
  }
}

class MemoryAdmission implements FenceAdmission<undefined> {
  readonly resource: string;
  readonly token: FencingToken;
  readonly previous: FencingToken | null;
  readonly transaction = undefined;
  #entry: Entry | undefined;

  constructor(entry: Entry, token: FencingToken, previous: FencingToken | null) {
    this.#entry = entry;
    this.resource = entry.resource;
    this.token = token;
    this.previous = previous;
  }

  // The mark moved on admission and stays; both only free the fence (this
  // store has no transaction of its own to keep or undo).
  commit(): Promise<void> {
    this.#settle();
    return SETTLED;
  }

  abort(): Promise<void> {
    this.#settle();
    return SETTLED;
  }

  /** commit() or abort() (the same here) without their promise. */
  [SETTLE_NOW](): void {
    this.#settle();
  }

  #settle(): void {
    const entry = this.#entry;
    if (entry === undefined) return; // settled already: commit and abort are idempotent
    this.#entry = undefined;
    release(entry);
  }
}
