// Deadlock detection for requests that nest fencing() over two resources,
// within this process.
//
// fencing() for a second resource, in a request that already holds a first
// one, is a second lock taken while holding the first. Two requests that nest
// the same two resources in opposite orders (one holds A and asks for B, the
// other holds B and asks for A) would wait for each other for good: neither
// response can finish, so neither fence is ever freed (until maxHoldMs).
//
// Every request that holds a fence and is about to wait for another passes
// through wait() here first, and only such requests can be part of a cycle
// (a request that holds nothing blocks nobody; one that waits for nothing is
// not stuck). So when the last edge of a cycle is about to be added, every
// other member is already recorded, with its holdings as they are now: a
// request's holdings do not change while it waits, and each is removed when
// its admission settles. Requests of other processes sharing the store
// (PostgresFenceStore) are invisible here; maxHoldMs ends such a deadlock.
import type { FenceStore } from '../../index.js';

/** One resource's fence in one store. */
export interface FenceKey {
  readonly store: FenceStore<unknown>;
  readonly resource: string;
}

/** Who holds which fence and who waits for which, among the requests that nest fencing(). */
export class WaitForGraph {
  readonly #holders = new Map<FenceStore<unknown>, Map<string, object>>();
  readonly #waiting = new Map<object, FenceKey>();

  /**
   * `request`, which holds `held`, is about to wait for `wanted`. Records both
   * and answers undefined, or, if the holder of `wanted` waits (through any
   * chain of holders that wait) for a fence `request` holds, records no wait
   * and answers the resources along that cycle, starting with `wanted`.
   */
  wait(request: object, held: Iterable<FenceKey>, wanted: FenceKey): string[] | undefined {
    for (const key of held) {
      let byResource = this.#holders.get(key.store);
      if (byResource === undefined) this.#holders.set(key.store, (byResource = new Map()));
      byResource.set(key.resource, request);
    }
    const cycle = [wanted.resource];
    let at = wanted;
    // Each step moves to a different waiting request; more steps than there
    // are waiters means a cycle among others (which closed without passing
    // here, e.g. through a request's own fences), not one through `request`.
    for (let steps = 0; steps <= this.#waiting.size; steps++) {
      const holder = this.#holders.get(at.store)?.get(at.resource);
      if (holder === undefined) break;
      if (holder === request) return cycle;
      const next = this.#waiting.get(holder);
      if (next === undefined) break;
      cycle.push(next.resource);
      at = next;
    }
    this.#waiting.set(request, wanted);
    return undefined;
  }

  /** `request` stopped waiting (admitted, refused, or gone). */
  stopWaiting(request: object): void {
    this.#waiting.delete(request);
  }

  /** `request` no longer holds `key` (its admission settled). */
  release(request: object, key: FenceKey): void {
    const byResource = this.#holders.get(key.store);
    if (byResource?.get(key.resource) !== request) return;
    byResource.delete(key.resource);
    if (byResource.size === 0) this.#holders.delete(key.store);
  }
}
