// The fencing context (req.fencing, request.fencing, c.get('fencing'), the
// Fetch handler's second argument): one request's admission under one
// resource's fence, from the wait in the store to the settle, and everything
// that ends it early (the client leaving, maxHoldMs passing). The framework's
// side (which response, when it ended, how to answer once the hold expired)
// is a subclass's: node-exchange.ts for Node's request and response (Express,
// Fastify), fetch-guard.ts for the Fetch API (Fetch, Hono).
import { debuglog } from 'node:util';
import { FenceReleasedError, type FenceAdmission, type FenceStore, type FencingToken } from '../../index.js';
import { SETTLE_NOW, WHEN_ABANDONED, type SettlesNow } from './memory-fence-store.js';
import type { Problem } from './problem.js';
import { WaitForGraph, type FenceKey } from './wait-for.js';
import { holdClock, type Hold } from './hold-clock.js';

const debug = debuglog('fencekeeper');

/** What a handler behind a fencing guard finds in its fencing context (Express `req.fencing`, Fastify `request.fencing`, Hono `c.get('fencing')`, the Fetch handler's second argument). */
export interface FencingContext<Transaction = unknown> {
  readonly resource: string;
  readonly token: FencingToken;
  /** The resource's committed mark before this request (null: the first token it saw). */
  readonly previous: FencingToken | null;
  /** The store's transaction (PostgresFenceStore: the one holding the fence row); undefined for MemoryFenceStore. */
  readonly transaction: Transaction;
  /**
   * Aborts when this request no longer holds the fence: its connection closed
   * before the response finished, or it held the fence longer than
   * `maxHoldMs`. The reason is a FenceReleasedError (`reason` 'client_gone'
   * or 'hold_expired'). By then the admission has been aborted (writes
   * through `transaction` are being undone) and the fence handed on, so the
   * next request for the resource may already be running: stop writing to
   * the resource. Pass the signal to what the handler waits on (fetch, a
   * store call) or check `signal.aborted` between writes; do not write to
   * the response after it aborted (the guard has answered, or closed the
   * connection).
   */
  readonly signal: AbortSignal;
}

/** The reason a wait is aborted with when someone else answered the response first: only the store sees it. */
const ANSWERED_WHILE_WAITING = new Error('the response ended before the fence was admitted');

/** Requests of this process that nest fencing(): see wait-for.ts. */
const graph = new WaitForGraph();

/**
 * The fencing context, and the request's whole state for one resource: one
 * object per fencing guard a request passes. It is also the options object handed to
 * store.admit(): its `signal` is made on first read, because an
 * AbortController costs more (measured on Node 20) than the rest of an
 * uncontended admission, and it is needed only by a request that has to wait
 * (MemoryFenceStore reads it only then), by a store that always reads it, or
 * by a handler that asks for req.fencing.signal.
 */
export abstract class Fencing implements FencingContext {
  readonly resource: string;
  readonly token: FencingToken;
  previous: FencingToken | null = null;
  transaction: unknown = undefined;
  readonly #store: FenceStore<unknown>;
  /** The fence this request already held when it reached this fencing() (nesting), if any. */
  readonly #outer: Fencing | undefined;
  /** The request's identity in the wait-for graph (the same object for every guard it passes). */
  readonly #request: object;
  readonly #maxHoldMs: number;
  #state: 'waiting' | 'held' | 'done' = 'waiting';
  /** Held from admission until the response has finished, the connection closed, or maxHoldMs passed. */
  #admission: FenceAdmission<unknown> | undefined = undefined;
  #controller: AbortController | undefined = undefined;
  /** Why the signal aborts, once it must (kept for a signal made later). */
  #reason: unknown = undefined;
  /** maxHoldMs's watch over the admission while it is held (see hold-clock.ts). */
  #hold: Hold | undefined = undefined;
  /** Recorded in the wait-for graph as a holder (only requests that nest). */
  #inGraph = false;
  /** MemoryFenceStore's word for a wait given up (WHEN_ABANDONED), while the store waits. */
  #onAbandon: ((reason: unknown) => void) | undefined = undefined;

  constructor(request: object, store: FenceStore<unknown>, resource: string, token: FencingToken, outer: Fencing | undefined, maxHoldMs: number) {
    this.#request = request;
    this.#store = store;
    this.resource = resource;
    this.token = token;
    this.#outer = outer;
    this.#maxHoldMs = maxHoldMs;
  }

  /** The handler has ended its response (only its delivery may still be under way). */
  protected abstract responseEnded(): boolean;
  /** The response's status as it stands. */
  protected abstract responseStatus(): number;
  /** The innermost fencing context of this request (for nesting), or undefined. */
  protected abstract innermost(): Fencing | undefined;
  /**
   * maxHoldMs passed while the handler had not ended its response, and every
   * admission of the request has been aborted: answer `problem` if nothing
   * was sent yet, else break the response off (never a complete-looking one).
   */
  protected abstract answerExpired(problem: Problem): void;
  /** Nothing is held any more (an override must call super). */
  protected finished(): void {}

  /** For MemoryFenceStore (WHEN_ABANDONED): the reason if the wait was given up already, else `abandoned` is called once it is. */
  [WHEN_ABANDONED](abandoned: (reason: unknown) => void): unknown {
    if (this.#reason !== undefined) return this.#reason;
    this.#onAbandon = abandoned;
    return undefined;
  }

  get signal(): AbortSignal {
    let controller = this.#controller;
    if (controller === undefined) {
      controller = this.#controller = new AbortController();
      if (this.#reason !== undefined) controller.abort(this.#reason);
    }
    return controller.signal;
  }

  /** This request reached this guard holding another fence (nesting). */
  get nested(): boolean {
    return this.#outer !== undefined;
  }

  /** Settled or abandoned: nothing is held, and nothing more will be. */
  get closed(): boolean {
    return this.#state === 'done';
  }

  /** The admission this request holds for `resource` in `store`, here or further out. */
  find(store: FenceStore<unknown>, resource: string): Fencing | undefined {
    for (let f: Fencing | undefined = this; f !== undefined; f = f.#outer) {
      if (f.#state === 'held' && f.#store === store && f.resource === resource) return f;
    }
    return undefined;
  }

  /**
   * About to wait for the store. A nested fencing() records what the request
   * holds and what it waits for; answers the resources of the cycle instead
   * if that wait would close one (see wait-for.ts).
   */
  enterWait(): string[] | undefined {
    if (this.#outer === undefined) return undefined;
    const held: FenceKey[] = [];
    for (let f: Fencing | undefined = this.#outer; f !== undefined; f = f.#outer) {
      if (f.#state !== 'held') continue;
      held.push({ store: f.#store, resource: f.resource });
      f.#inGraph = true;
    }
    return graph.wait(this.#request, held, { store: this.#store, resource: this.resource });
  }

  /** The store answered (or the wait was abandoned). */
  leaveWait(): void {
    this.#onAbandon = undefined;
    if (this.#outer !== undefined) graph.stopWaiting(this.#request);
  }

  /** Keep the admission until the response ends, for maxHoldMs at most. */
  hold(admission: FenceAdmission<unknown>): void {
    this.#onAbandon = undefined; // the wait is over
    this.#state = 'held';
    this.#admission = admission;
    this.previous = admission.previous;
    this.transaction = admission.transaction;
    // On a monotonic clock, shared by every hold of the same maxHoldMs (see
    // hold-clock.ts): cleared in #finish() on every other path.
    this.#hold = holdClock(this.#maxHoldMs).start(Fencing.#expire as (arg: object) => void, this);
  }

  /**
   * The response is over: sent in full (`finished`) or not. Settle what is held (commit if the response finished below 500, abort
   * otherwise), or stop a wait that nobody needs any more.
   */
  close(finished: boolean, status: number): void {
    if (this.#state === 'done') return;
    const admission = this.#admission;
    this.#finish();
    if (admission === undefined) {
      this.#abort(finished ? ANSWERED_WHILE_WAITING : this.#clientGone());
      return;
    }
    settle(admission, finished && status < 500);
    if (!finished) this.#abort(this.#clientGone());
  }

  static #expire(this: void, f: Fencing): void {
    f.#hold = undefined;
    f.#expired();
  }

  /** maxHoldMs has passed since admission and the response has not finished. */
  #expired(): void {
    if (this.#state !== 'held') return;
    if (this.responseEnded()) {
      // The handler has ended its response; only its delivery is late (it
      // waits behind an earlier pipelined response, or a slow client reads a
      // large body). Nothing more will be written under this fence: settle it
      // as the response's 'finish' would, and free the fence now.
      const admission = this.#admission!;
      this.#finish();
      settle(admission, this.responseStatus() < 500);
      return;
    }
    debug('fencing(): %s held the fence for %d ms without finishing its response: aborting its admission', this.resource, this.#maxHoldMs);
    // The handler is still running: take back every fence the request holds
    // (a handler behind nested fencing() watches the innermost signal).
    const reason = (f: Fencing): FenceReleasedError => new FenceReleasedError(
      f.resource,
      f.token,
      'hold_expired',
      `the request held the fence of ${this.resource} for maxHoldMs (${this.#maxHoldMs} ms) without finishing its response: its admission for ${f.resource} was aborted and the fence handed on; stop writing`,
    );
    this.#revoke(reason);
    for (let f = this.innermost(); f !== undefined; f = f.#outer) f.#revoke(reason);
    this.answerExpired({
      status: 503,
      code: 'FENCE_HOLD_EXPIRED',
      detail: `the request did not finish within ${this.#maxHoldMs} ms of its admission for ${this.resource}; its admission was aborted; try again`,
    });
  }

  /** Abort a held admission (the fence keeps its token) and the signal. */
  #revoke(reason: (f: Fencing) => FenceReleasedError): void {
    if (this.#state !== 'held') return;
    const admission = this.#admission!;
    this.#finish();
    settle(admission, false);
    this.#abort(reason(this));
  }

  #clientGone(): FenceReleasedError {
    return new FenceReleasedError(
      this.resource,
      this.token,
      'client_gone',
      `the connection closed before the response finished: the admission for ${this.resource} was aborted and the fence handed on; stop writing`,
    );
  }

  #abort(reason: unknown): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    const abandoned = this.#onAbandon;
    if (abandoned !== undefined) {
      this.#onAbandon = undefined;
      abandoned(reason);
    }
    this.#controller?.abort(reason);
  }

  /** Nothing is held from here on: clear the timer and every registration. */
  #finish(): void {
    this.#state = 'done';
    this.#admission = undefined;
    if (this.#hold !== undefined) {
      this.#hold.end();
      this.#hold = undefined;
    }
    if (this.#inGraph) {
      this.#inGraph = false;
      graph.release(this.#request, { store: this.#store, resource: this.resource });
    }
    this.finished();
  }
}

/** Commit or abort; a failure can only be reported (the response is out, or will never be). */
export function settle(admission: FenceAdmission<unknown>, commit: boolean): void {
  const now = (admission as Partial<SettlesNow>)[SETTLE_NOW];
  if (now !== undefined) return now.call(admission);
  try {
    (commit ? admission.commit() : admission.abort()).catch(reportSettleFailure);
  } catch (error) {
    reportSettleFailure(error);
  }
}

function reportSettleFailure(error: unknown): void {
  debug('fencing(): settling the admission failed: %o', error);
}
