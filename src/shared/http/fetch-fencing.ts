// The fencing guard over the Fetch API (fencekeeper/fetch, fencekeeper/hono):
// a Request in, a Response out. The admission is held until the response's
// body has been read to its end (committed if the status is below 500) or
// cancelled (aborted), not just until the handler returned: a streamed body
// is written while the fence is held. Under @hono/node-server the guard
// knows the Node response the body is written to, and holds the admission
// until that response is over, leaving the Response as the handler made it
// (node-server then writes a string or bytes body at once, without a
// stream); under any other runtime the body passes through a stream of the
// guard's, chunk for chunk, unchanged, which tells when it was read. The
// client leaving aborts the admission, or the wait for it: see FetchFencing.
import { ServerResponse } from 'node:http';
import type { FenceAdmission, FenceStore, FencingToken, Sequencer } from '../../index.js';
import { Fencing, settle } from './exchange.js';
import { CLOSED, admitExchange, admitNow, rejoinExchange, type FencingSettings } from './fencing-core.js';
import { settleWithResponse } from './node-exchange.js';
import { problemResponse, type Problem } from './problem.js';

/**
 * Where a Request keeps its innermost fencing context, for nesting guards on
 * one request: a symbol-keyed property rather than a WeakMap, whose set on a
 * new key each request was a tenth of the guard's CPU (measured, node 20).
 * A Request is a small object (on @hono/node-server, a lightweight one of a
 * few fields), so one more property does not slow it down.
 */
const INNERMOST: unique symbol = Symbol('fencekeeper.fetchFencing');

type Nestable = Request & { [INNERMOST]?: FetchFencing };

/** What the guard answers a request whose client left before it was admitted (nobody reads it). */
const GONE: Problem = Object.freeze({ status: 503, code: 'FENCE_UNAVAILABLE', detail: 'the request was aborted before it was admitted; try again' });

/**
 * The Node response a Fetch handler's request is answered on when it runs on
 * @hono/node-server, which hands it in the handler's second argument
 * (`{ incoming, outgoing }`, Hono's `c.env`); undefined under any other
 * runtime (Bun's server, Deno's info, a Worker's env have no ServerResponse).
 */
export function nodeServerResponse(env: unknown): ServerResponse | undefined {
  const outgoing = (env as { outgoing?: unknown } | null | undefined)?.outgoing;
  return outgoing instanceof ServerResponse ? outgoing : undefined;
}

/**
 * One Request's state under one resource's fence.
 *
 * Under @hono/node-server (`outgoing` known) the Node response says it all,
 * as it does for Express and Fastify: its 'close' settles the admission
 * (committed when the response finished below 500, aborted when the client
 * left first), and nothing reads the Request's `signal`: the Request there
 * is a lightweight object, and reading its `signal` builds the full Request
 * (headers, body stream, AbortController), which cost four times the bare
 * route's CPU. Under any other runtime the request's signal is the only
 * word of the client leaving, so it is watched from the start (a signal
 * made lazily by the runtime, then, is made before the client can leave
 * unseen), and the end of the body is seen where the guard's own stream
 * hands out its last chunk.
 */
class FetchFencing extends Fencing {
  readonly #request: Request;
  /** The Node response under @hono/node-server; undefined elsewhere. */
  readonly #outgoing: ServerResponse | undefined;
  /** The pipelined responses' queue this one waits in (node-server), if any. */
  readonly #queuedOn: Set<Fencing> | undefined = undefined;
  /** Resolves with the answer to give when maxHoldMs passes before the handler returned. */
  #expiredBeforeResponse: ((response: Response) => void) | undefined = undefined;
  /** Set once the handler returned a body being passed through (other runtimes): what breaks it off. */
  #breakBody: ((reason: unknown) => void) | undefined = undefined;
  /** Set while the request's signal is watched (other runtimes): stops watching. */
  #unwatch: (() => void) | undefined = undefined;

  constructor(request: Request, store: FenceStore<unknown>, resource: string, token: FencingToken, outer: Fencing | undefined, maxHoldMs: number, outgoing: ServerResponse | undefined) {
    super(request, store, resource, token, outer, maxHoldMs);
    this.#request = request;
    this.#outgoing = outgoing;
    if (outgoing === undefined) {
      this.#watchSignal(request.signal);
      return;
    }
    this.#queuedOn = settleWithResponse(this, outgoing.req, outgoing);
    // The client left before the guard was reached: 'close' has been emitted already.
    if (outgoing.closed && !outgoing.writableFinished) this.close(false, 0);
  }

  /** Other runtimes: the request's signal aborting is the client leaving. */
  #watchSignal(signal: AbortSignal): void {
    const gone = (): void => this.close(false, 0);
    signal.addEventListener('abort', gone, { once: true });
    this.#unwatch = () => signal.removeEventListener('abort', gone);
    if (signal.aborted) gone();
  }

  /** Admitted: from here on this is the request's innermost context. */
  enter(): void {
    (this.#request as Nestable)[INNERMOST] = this;
  }

  /** `answer` is called with the answer maxHoldMs gives, if it passes before the handler returned. */
  onExpiry(answer: (response: Response) => void): void {
    this.#expiredBeforeResponse = answer;
  }

  /**
   * The handler returned: from here on maxHoldMs breaks off the response
   * (`breakBody`, the guard's stream on other runtimes) instead of answering.
   */
  responded(breakBody: ((reason: unknown) => void) | undefined): void {
    this.#expiredBeforeResponse = undefined;
    this.#breakBody = breakBody;
  }

  // node-server: the response has been handed to Node in full (only its
  // delivery is under way; node-server writes it only after the handler
  // returned). Elsewhere a body still passing through is never "ended": the
  // fence covers it until it is read.
  protected responseEnded(): boolean {
    return this.#outgoing?.writableEnded ?? false;
  }

  protected responseStatus(): number {
    return this.#outgoing?.statusCode ?? 0;
  }

  protected innermost(): Fencing | undefined {
    return (this.#request as Nestable)[INNERMOST];
  }

  protected answerExpired(problem: Problem): void {
    const answer = this.#expiredBeforeResponse;
    this.#expiredBeforeResponse = undefined;
    if (answer !== undefined) {
      answer(problemResponse(problem));
      return;
    }
    // Part of the response may be out: break it off (the client sees a
    // truncated body or none, never a complete-looking one).
    if (this.#outgoing !== undefined) this.#outgoing.destroy();
    else this.#breakBody?.(this.signal.reason);
  }

  protected override finished(): void {
    this.#queuedOn?.delete(this);
    this.#unwatch?.();
    this.#unwatch = undefined;
  }
}

/**
 * Run `handler` under the fence of `resource` for `request` (the token read
 * and checked already), and hand back its response with the admission held
 * until the body has been read: the refusal as a problem+json Response
 * instead when the guard refuses. `req` is what `verify` is given.
 * A handler that throws has its admission aborted, and the error is thrown
 * on (the framework answers it, as without the guard).
 *
 * Not async: an admission in the same tick runs the handler at once, and its
 * response comes back through one promise, the race with maxHoldMs (an async
 * function here was one promise and two microtask turns more per request,
 * measured at about 1% of a Hono route's CPU).
 */
export function fenceFetch<R, C>(
  settings: FencingSettings<R>,
  request: Request,
  req: R,
  resource: string,
  token: FencingToken,
  presented: FencingToken | Sequencer,
  handler: (fencing: C) => Response | Promise<Response>,
  outgoing: ServerResponse | undefined,
): Promise<Response> {
  const outer = (request as Nestable)[INNERMOST];
  // This request already holds this fence (the guard applied twice): waiting
  // for it again would wait for ourselves. The outer guard holds the body.
  const held = outer?.find(settings.store, resource);
  if (held !== undefined) return rejoined(settings, req, held, token, presented, handler);
  const exchange = new FetchFencing(request, settings.store, resource, token, outer, settings.maxHoldMs, outgoing);
  // Uncontended on a store that can say so at once: no wait for the admission.
  const now = admitNow(settings, exchange, token, presented);
  if (now === undefined) return admittedLater(settings, req, exchange, token, presented, handler, outgoing);
  return runAdmitted(exchange, now, handler, outgoing);
}

/** The guard applied again for a fence the request holds: the handler runs under the outer admission. */
async function rejoined<R, C>(
  settings: FencingSettings<R>,
  req: R,
  held: Fencing,
  token: FencingToken,
  presented: FencingToken | Sequencer,
  handler: (fencing: C) => Response | Promise<Response>,
): Promise<Response> {
  const refused = await rejoinExchange(settings, req, held, token, presented);
  if (refused === CLOSED) return problemResponse(GONE);
  if (refused !== undefined) return problemResponse(refused);
  return handler(held as unknown as C);
}

/** The admission waited for (verify, nesting, contention, a store's promise), then the handler run. */
async function admittedLater<R, C>(
  settings: FencingSettings<R>,
  req: R,
  exchange: FetchFencing,
  token: FencingToken,
  presented: FencingToken | Sequencer,
  handler: (fencing: C) => Response | Promise<Response>,
  outgoing: ServerResponse | undefined,
): Promise<Response> {
  return runAdmitted(exchange, await admitExchange(settings, req, exchange, token, presented), handler, outgoing);
}

/** Run the handler under `admission` (or answer the refusal), racing its response with maxHoldMs. */
function runAdmitted<C>(
  exchange: FetchFencing,
  admission: FenceAdmission<unknown> | Problem | typeof CLOSED,
  handler: (fencing: C) => Response | Promise<Response>,
  outgoing: ServerResponse | undefined,
): Promise<Response> {
  if (admission === CLOSED) return Promise.resolve(problemResponse(GONE));
  if ('status' in admission) return Promise.resolve(problemResponse(admission));
  if (exchange.closed) {
    settle(admission, false);
    return Promise.resolve(problemResponse(GONE));
  }
  exchange.hold(admission);
  exchange.enter();
  let result: Response | PromiseLike<Response>;
  try {
    result = handler(exchange as unknown as C);
    // Returned at once: no timer can have fired.
    if (typeof (result as Partial<PromiseLike<Response>>).then !== 'function') return Promise.resolve(delivered(exchange, result as Response, outgoing));
  } catch (error) {
    // As a 5xx would: the admission is aborted (the fence keeps the token).
    exchange.close(true, 500);
    return Promise.reject(error);
  }
  // The handler's answer, or maxHoldMs's if it passes first (one promise,
  // not a race of two: this is every request's path).
  return new Promise<Response>((resolve, reject) => {
    let expiredFirst = false;
    exchange.onExpiry((answer) => {
      expiredFirst = true;
      resolve(answer);
    });
    (result as PromiseLike<Response>).then(
      (response) => {
        // maxHoldMs answered first: the handler's late response is nobody's.
        if (expiredFirst) return void (response as Response | undefined)?.body?.cancel().catch(() => undefined);
        try {
          resolve(delivered(exchange, response, outgoing));
        } catch (error) {
          exchange.close(false, 0);
          reject(error);
        }
      },
      (error: unknown) => {
        if (expiredFirst) return;
        // As a 5xx would: the admission is aborted (the fence keeps the token).
        exchange.close(true, 500);
        reject(error);
      },
    );
  });
}

/**
 * The handler's response, handed on with the admission held until it has
 * been delivered: as it is under node-server (`outgoing`'s 'close' settles),
 * else with its body passed through the guard's stream.
 */
function delivered(exchange: FetchFencing, response: Response, outgoing: ServerResponse | undefined): Response {
  if (outgoing !== undefined) {
    // node-server writes the Response to `outgoing`, whose 'close' settles
    // the admission: the Response is handed on untouched (reading its body
    // here would turn node-server's lightweight Response into a full one).
    exchange.responded(undefined);
    return response;
  }
  const body = response.body;
  // (closed first: a client that left while the handler ran has aborted it, even with no body to hold)
  if (exchange.closed || body === null) {
    exchange.close(true, response.status);
    return response;
  }
  const status = response.status;
  const reader = body.getReader();
  let breakOff: ((reason: unknown) => void) | undefined;
  const passed = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        breakOff = (reason) => {
          controller.error(reason);
          reader.cancel(reason).catch(() => undefined);
        };
      },
      async pull(controller) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          // The handler's body failed mid-way: a broken response, and the admission aborted.
          exchange.close(false, 0);
          controller.error(error);
          return;
        }
        if (chunk.done) {
          exchange.close(true, status);
          controller.close();
          return;
        }
        controller.enqueue(chunk.value);
      },
      cancel(reason) {
        exchange.close(false, 0);
        return reader.cancel(reason);
      },
    },
    // Pull only when the reader asks: "read to its end" is the reader's, not a buffer's.
    { highWaterMark: 0 },
  );
  exchange.responded(breakOff);
  return new Response(passed, { status, statusText: response.statusText, headers: response.headers });
}
