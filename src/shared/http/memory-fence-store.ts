// MemoryFenceStore: the fence of each resource kept in this process's memory.
//
// Two structures per resource:
//   - the high-water mark (`#marks`): the largest token ever admitted. It
//     only ever grows, so a token below it is stale now and forever, and is
//     refused at once without waiting.
//   - a FIFO mutex (`#fences`): present while an admission holds the fence,
//     with the requests waiting behind it in arrival order.
//
// The mark moves when a token is admitted, not when its admission commits:
// an admitted request may already have acted (written somewhere this store
// cannot undo) when it fails or its client leaves, so no smaller token may
// pass after it, whatever its outcome. commit() and abort() only free the
// fence.
//
// Memory: a mark is kept for every resource that ever admitted a token (a
// fence that forgot its mark would admit a stale holder again), so the set of
// resources must be bounded by the application, not derived from unchecked
// client input. A mutex entry exists only while its fence is held and is
// deleted when the last admission settles; a waiter is removed when it is
// admitted, refused, or its signal aborts. Nothing outlives its request.
import {
  FenceAlreadyBoundError,
  InvalidArgumentError,
  SequencerMismatchError,
  StaleTokenError,
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
 * A held fence: the waiters queued behind its holder, oldest first; null
 * while nobody waits (no allocation for an uncontended admission).
 */
type Fence = Waiter[] | null;

/** What the store and its admissions share; private to this module. */
interface StoreState {
  readonly marks: Map<string, FencingToken>;
  readonly fences: Map<string, Fence>;
  /** The lock each bound fence is guarded by (bind()); a fence absent here was never bound. */
  readonly bindings: Map<string, FenceBinding>;
}

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
  readonly #state: StoreState = { marks: new Map(), fences: new Map(), bindings: new Map() };

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
      const recorded = this.#state.bindings.get(resource);
      if (recorded === undefined) {
        this.#state.bindings.set(resource, wanted);
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
    try {
      ({ token, advance } = checked(state, resource, presented, options));
    } catch (error) {
      return Promise.reject(error);
    }
    const fence = state.fences.get(resource);
    if (fence === undefined) {
      state.fences.set(resource, null);
      return Promise.resolve(admitted(state, resource, token, state.marks.get(resource), advance));
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
          const queue = state.fences.get(resource);
          if (queue != null) {
            const at = queue.indexOf(waiter);
            if (at !== -1) queue.splice(at, 1);
          }
          reject(reason);
        });
        if (gone !== undefined) return reject(gone);
        if (fence === null) state.fences.set(resource, [waiter]);
        else fence.push(waiter);
      });
    }
    const signal = options?.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<FenceAdmission<undefined>>((resolve, reject) => {
      const waiter: Waiter = { token, advance, resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          const queue = state.fences.get(resource);
          if (queue != null) {
            const at = queue.indexOf(waiter);
            if (at !== -1) queue.splice(at, 1);
          }
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      if (fence === null) state.fences.set(resource, [waiter]);
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
    const { token, advance } = checked(state, resource, presented, options);
    if (state.fences.has(resource)) return undefined;
    state.fences.set(resource, null);
    return admitted(state, resource, token, state.marks.get(resource), advance);
  }

  current(resource: string): Promise<FencingToken | null> {
    return Promise.resolve(this.#state.marks.get(resource) ?? null);
  }
}

/**
 * Check an admission before it may hold or wait: the resource's name, the
 * mode, the binding, and the mark (it only grows: below it is stale whatever
 * the holder does). Throws the refusal; changes nothing.
 */
function checked(state: StoreState, resource: string, presented: FencingToken | Sequencer, options: FenceMode | undefined): { token: FencingToken; advance: boolean } {
  if (typeof resource !== 'string' || resource.length === 0) throw new InvalidArgumentError('resource must be a non-empty string');
  const advance = fenceAdvances(options, 'MemoryFenceStore.admit');
  const fencing = resolveFencing(presented);
  const token = fencing.token;
  // A bound fence compares the lock first: another lock's tokens are not comparable with its mark.
  const bound = state.bindings.get(resource);
  if (bound !== undefined && (fencing.sequencer === null || !matchesBinding(fencing.sequencer, bound))) {
    const s = fencing.sequencer;
    throw new SequencerMismatchError(resource, bound, s === null ? null : { kind: s.kind, lock: s.name, source: s.source, token: s.token });
  }
  const mark = state.marks.get(resource);
  if (mark !== undefined && token < mark) throw new StaleTokenError(resource, token, mark);
  return { token, advance };
}

/**
 * Admit `token`: the mark advances now, not when the admission commits. An
 * admitted request may act (write somewhere the store cannot undo) before it
 * fails or its client leaves, so after it no smaller token may pass, whatever
 * its outcome (the fault checker caught the opposite: an aborted admission
 * let a smaller token in after its handler had written).
 */
function admitted(state: StoreState, resource: string, token: FencingToken, mark: FencingToken | undefined, advance: boolean): MemoryAdmission {
  const next = markAfter(mark ?? null, token, advance);
  if (next !== mark) state.marks.set(resource, next);
  return new MemoryAdmission(state, resource, token, mark ?? null);
}

/** Settle one admission (called once, by its commit() or abort()) and pass the fence on. */
function release(state: StoreState, resource: string): void {
  const fence = state.fences.get(resource);
  if (fence === undefined) return;
  if (fence === null) {
    state.fences.delete(resource);
    return;
  }
  const mark = state.marks.get(resource);
  // Hand the fence to the oldest waiter whose token is still not stale;
  // refuse the stale ones on the way (they change nothing).
  for (let waiter = fence.shift(); waiter !== undefined; waiter = fence.shift()) {
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    if (mark !== undefined && waiter.token < mark) {
      waiter.reject(new StaleTokenError(resource, waiter.token, mark));
      continue;
    }
    waiter.resolve(admitted(state, resource, waiter.token, mark, waiter.advance));
    return;
  }
  state.fences.delete(resource);
}

class MemoryAdmission implements FenceAdmission<undefined> {
  readonly resource: string;
  readonly token: FencingToken;
  readonly previous: FencingToken | null;
  readonly transaction = undefined;
  #state: StoreState | undefined;

  constructor(state: StoreState, resource: string, token: FencingToken, previous: FencingToken | null) {
    this.#state = state;
    this.resource = resource;
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
    const state = this.#state;
    if (state === undefined) return; // settled already: commit and abort are idempotent
    this.#state = undefined;
    release(state, this.resource);
  }
}
