// req.fencing: one request's admission under one resource's fence, from the
// wait in the store to the settle, and everything that ends it early (the
// client leaving, maxHoldMs passing, the connection dropping a pipelined
// response).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { debuglog } from 'node:util';
import { FenceReleasedError, type FenceAdmission, type FenceStore, type FencingToken } from '../../../src/index.js';
import { sendProblem } from '../problem.js';
import { WaitForGraph, type FenceKey } from './wait-for.js';

const debug = debuglog('fencekeeper');

/** What a handler behind fencing() finds in `req.fencing`. */
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
   * `res` after it aborted (fencing() has answered, or closed the connection).
   */
  readonly signal: AbortSignal;
}

declare global {
  // Express's own augmentation point, the same in @types/express 4 and 5
  // (express-serve-static-core: `interface Request extends Express.Request`).
  // eslint-disable-next-line @typescript-eslint/no-namespace -- declaration merging needs the namespace
  namespace Express {
    interface Request {
      /** Set by fencekeeper's fencing() once the request holds its resource's fence. */
      fencing?: FencingContext;
    }
  }
}

/** The reason a wait is aborted with when someone else answered the response first: only the store sees it. */
const ANSWERED_WHILE_WAITING = new Error('the response ended before the fence was admitted');

/** Requests of this process that nest fencing(): see wait-for.ts. */
const graph = new WaitForGraph();

/**
 * Exchanges whose response waits behind an earlier one on the same
 * connection (HTTP/1.1 pipelining: Node answers in order). If the connection
 * closes first, Node drops such a response without emitting 'close' on it,
 * so its admission would never settle: the socket's 'close' settles them.
 */
const queuedOn = new WeakMap<Socket, Set<Fencing>>();

/**
 * req.fencing, and the request's whole state for one resource: one object per
 * fencing() a request passes. It is also the options object handed to
 * store.admit(): its `signal` is made on first read, because an
 * AbortController costs more (measured on Node 20) than the rest of an
 * uncontended admission, and it is needed only by a request that has to wait
 * (MemoryFenceStore reads it only then), by a store that always reads it, or
 * by a handler that asks for req.fencing.signal.
 */
export class Fencing implements FencingContext {
  readonly resource: string;
  readonly token: FencingToken;
  previous: FencingToken | null = null;
  transaction: unknown = undefined;
  readonly #store: FenceStore<unknown>;
  /** The fence this request already held when it reached this fencing() (nesting), if any. */
  readonly #outer: Fencing | undefined;
  readonly #req: IncomingMessage;
  readonly #res: ServerResponse;
  readonly #maxHoldMs: number;
  #state: 'waiting' | 'held' | 'done' = 'waiting';
  /** Held from admission until the response has finished, the connection closed, or maxHoldMs passed. */
  #admission: FenceAdmission<unknown> | undefined = undefined;
  #controller: AbortController | undefined = undefined;
  /** Why the signal aborts, once it must (kept for a signal made later). */
  #reason: unknown = undefined;
  #timer: NodeJS.Timeout | undefined = undefined;
  /** Recorded in the wait-for graph as a holder (only requests that nest). */
  #inGraph = false;
  #queuedOn: Set<Fencing> | undefined = undefined;

  constructor(req: IncomingMessage, res: ServerResponse, store: FenceStore<unknown>, resource: string, token: FencingToken, outer: Fencing | undefined, maxHoldMs: number) {
    this.#req = req;
    this.#res = res;
    this.#store = store;
    this.resource = resource;
    this.token = token;
    this.#outer = outer;
    this.#maxHoldMs = maxHoldMs;
    // 'close' comes once per response, after 'finish' when the response was
    // sent in full, alone when the connection closed first: it settles both.
    // One closure per request, on purpose: keeping the state on `res` under a
    // symbol instead is a keyed store on an object with many properties, which
    // turns the ServerResponse into a dictionary-mode object and slows every
    // later write to it (measured: +20% server CPU per request).
    res.on('close', () => this.close(res.writableFinished, res.statusCode));
    // A response without a socket is queued behind an earlier one on its connection.
    if (res.socket === null) this.#watchQueued(req.socket);
  }

  get signal(): AbortSignal {
    let controller = this.#controller;
    if (controller === undefined) {
      controller = this.#controller = new AbortController();
      if (this.#reason !== undefined) controller.abort(this.#reason);
    }
    return controller.signal;
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
    return graph.wait(this.#req, held, { store: this.#store, resource: this.resource });
  }

  /** The store answered (or the wait was abandoned). */
  leaveWait(): void {
    if (this.#outer !== undefined) graph.stopWaiting(this.#req);
  }

  /** Keep the admission until the response ends, for maxHoldMs at most. */
  hold(admission: FenceAdmission<unknown>): void {
    this.#state = 'held';
    this.#admission = admission;
    this.previous = admission.previous;
    this.transaction = admission.transaction;
    // setTimeout runs on libuv's monotonic clock: a wall-clock step neither
    // fires it early nor holds it back. Unref'd: a held fence does not keep
    // the process alive; cleared in #finish() on every other path.
    this.#timer = setTimeout(Fencing.#expire, this.#maxHoldMs, this);
    this.#timer.unref();
  }

  /**
   * The response's 'close' (or its connection's, for a queued response):
   * settle what is held (commit if the response finished below 500, abort
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
    f.#timer = undefined;
    f.#expired();
  }

  /** maxHoldMs has passed since admission and the response has not finished. */
  #expired(): void {
    if (this.#state !== 'held') return;
    const res = this.#res;
    if (res.writableEnded) {
      // The handler has ended its response; only its delivery is late (it
      // waits behind an earlier pipelined response, or a slow client reads a
      // large body). Nothing more will be written under this fence: settle it
      // as the response's 'finish' would, and free the fence now.
      const admission = this.#admission!;
      this.#finish();
      settle(admission, res.statusCode < 500);
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
    const innermost = (this.#req as { fencing?: unknown }).fencing;
    for (let f = innermost instanceof Fencing ? innermost : undefined; f !== undefined; f = f.#outer) f.#revoke(reason);
    if (!res.headersSent) {
      // Whatever the handler had set (a content-encoding, an ETag) does not
      // describe this answer. `connection: close`: Node closes the connection
      // once the answer is out, so nothing the handler still writes reaches it.
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      res.setHeader('connection', 'close');
      sendProblem(res, 503, 'FENCE_HOLD_EXPIRED', `the request did not finish within ${this.#maxHoldMs} ms of its admission for ${this.resource}; its admission was aborted; try again`);
    } else {
      // Part of the response is out: end it as a broken one (the client sees a
      // truncated message, never a complete-looking one).
      res.destroy();
    }
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
    this.#controller?.abort(reason);
  }

  /** Nothing is held from here on: clear the timer and every registration. */
  #finish(): void {
    this.#state = 'done';
    this.#admission = undefined;
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    if (this.#inGraph) {
      this.#inGraph = false;
      graph.release(this.#req, { store: this.#store, resource: this.resource });
    }
    this.#queuedOn?.delete(this);
    this.#queuedOn = undefined;
  }

  #watchQueued(socket: Socket | null | undefined): void {
    if (socket === null || socket === undefined) return;
    let queued = queuedOn.get(socket);
    if (queued === undefined) {
      const set = (queued = new Set());
      queuedOn.set(socket, set);
      socket.once('close', () => {
        for (const f of [...set]) f.close(false, 0);
      });
    }
    queued.add(this);
    this.#queuedOn = queued;
    // Closed already: the 'close' above has been emitted and will not be again.
    if (socket.destroyed) queueMicrotask(() => this.close(false, 0));
  }
}

/** Commit or abort; a failure can only be reported (the response is out, or will never be). */
export function settle(admission: FenceAdmission<unknown>, commit: boolean): void {
  try {
    (commit ? admission.commit() : admission.abort()).catch(reportSettleFailure);
  } catch (error) {
    reportSettleFailure(error);
  }
}

function reportSettleFailure(error: unknown): void {
  debug('fencing(): settling the admission failed: %o', error);
}
