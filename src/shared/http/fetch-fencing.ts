// The fencing guard over the Fetch API (fencekeeper/fetch, fencekeeper/hono):
// a Request in, a Response out. The admission is held until the response's
// body has been read to its end (committed if the status is below 500) or
// cancelled (aborted), not just until the handler returned: a streamed body
// is written while the fence is held. The body passes through chunk for
// chunk, unchanged. The request's signal aborting (the client left) aborts
// the admission, or the wait for it.
import type { FenceStore, FencingToken, Sequencer } from '../../index.js';
import { Fencing, settle } from './exchange.js';
import { CLOSED, admitExchange, rejoinExchange, type FencingSettings } from './fencing-core.js';
import { problemResponse, type Problem } from './problem.js';

/** The innermost fencing context of each Request, for nesting guards on one request. */
const innermostOf = new WeakMap<Request, FetchFencing>();

/** What the guard answers a request whose client left before it was admitted (nobody reads it). */
const GONE: Problem = Object.freeze({ status: 503, code: 'FENCE_UNAVAILABLE', detail: 'the request was aborted before it was admitted; try again' });

/**
 * Call `gone` once the client of `request` has left before its response
 * was complete; answers a function that stops watching. The default
 * watches the request's signal; an adapter that has the Node response (Hono
 * on @hono/node-server) watches its 'close' instead, which spares building
 * the full Request that reading `signal` costs there.
 */
export type WatchGone = (request: Request, gone: () => void) => () => void;

/** WatchGone by the request's signal. */
export const watchSignal: WatchGone = (request, gone) => {
  const signal = request.signal;
  signal.addEventListener('abort', gone, { once: true });
  return () => signal.removeEventListener('abort', gone);
};

/** One Request's state under one resource's fence. */
class FetchFencing extends Fencing {
  readonly #request: Request;
  /** Resolves with the answer to give when maxHoldMs passes before the handler returned. */
  #expiredBeforeResponse: ((response: Response) => void) | undefined = undefined;
  /** Set once the handler returned a body being passed through: what breaks it off. */
  #breakBody: ((reason: unknown) => void) | undefined = undefined;
  readonly #unwatch: () => void;

  constructor(request: Request, store: FenceStore<unknown>, resource: string, token: FencingToken, outer: Fencing | undefined, maxHoldMs: number, watchGone: WatchGone) {
    super(request, store, resource, token, outer, maxHoldMs);
    this.#request = request;
    this.#unwatch = watchGone(request, () => this.close(false, 0));
  }

  /** Admitted: from here on this is the request's innermost context. */
  enter(): void {
    innermostOf.set(this.#request, this);
  }

  /** A promise of the answer maxHoldMs gives, if it passes before the handler returned. */
  expiry(): Promise<Response> {
    return new Promise((resolve) => {
      this.#expiredBeforeResponse = resolve;
    });
  }

  /** The handler returned: from here on maxHoldMs breaks off `breakBody` instead. */
  responded(breakBody: ((reason: unknown) => void) | undefined): void {
    this.#expiredBeforeResponse = undefined;
    this.#breakBody = breakBody;
  }

  // A body still passing through is never "ended": the fence covers it until it is read.
  protected responseEnded(): boolean {
    return false;
  }

  protected responseStatus(): number {
    return 0;
  }

  protected innermost(): Fencing | undefined {
    return innermostOf.get(this.#request);
  }

  protected answerExpired(problem: Problem): void {
    const answer = this.#expiredBeforeResponse;
    this.#expiredBeforeResponse = undefined;
    if (answer !== undefined) {
      answer(problemResponse(problem));
      return;
    }
    // Part of the response is out: break it off (the client sees a truncated
    // body, never a complete-looking one).
    this.#breakBody?.(this.signal.reason);
  }

  protected override finished(): void {
    this.#unwatch();
  }
}

/**
 * Run `handler` under the fence of `resource` for `request` (the token read
 * and checked already), and hand back its response with the admission held
 * until the body has been read: the refusal as a problem+json Response
 * instead when the guard refuses. `req` is what `verify` is given.
 * A handler that throws has its admission aborted, and the error is thrown
 * on (the framework answers it, as without the guard).
 */
export async function fenceFetch<R, C>(
  settings: FencingSettings<R>,
  request: Request,
  req: R,
  resource: string,
  token: FencingToken,
  presented: FencingToken | Sequencer,
  handler: (fencing: C) => Response | Promise<Response>,
  watchGone: WatchGone = watchSignal,
): Promise<Response> {
  const outer = innermostOf.get(request);
  // This request already holds this fence (the guard applied twice): waiting
  // for it again would wait for ourselves. The outer guard holds the body.
  const held = outer?.find(settings.store, resource);
  if (held !== undefined) {
    const refused = await rejoinExchange(settings, req, held, token, presented);
    if (refused === CLOSED) return problemResponse(GONE);
    if (refused !== undefined) return problemResponse(refused);
    return handler(held as unknown as C);
  }
  const exchange = new FetchFencing(request, settings.store, resource, token, outer, settings.maxHoldMs, watchGone);
  const admission = await admitExchange(settings, req, exchange, token, presented);
  if (admission === CLOSED) return problemResponse(GONE);
  if ('status' in admission) return problemResponse(admission);
  if (exchange.closed) {
    settle(admission, false);
    return problemResponse(GONE);
  }
  exchange.hold(admission);
  exchange.enter();
  let expiredFirst = false;
  const expired = exchange.expiry().then((answer) => {
    expiredFirst = true;
    return answer;
  });
  let response: Response;
  try {
    const handled = Promise.resolve(handler(exchange as unknown as C));
    response = await Promise.race([handled, expired]);
    if (expiredFirst) {
      // maxHoldMs answered first: the handler's late response is nobody's.
      handled.then((late) => late.body?.cancel().catch(() => undefined), () => undefined);
      return response;
    }
  } catch (error) {
    // As a 5xx would: the admission is aborted (the fence keeps the token).
    exchange.close(true, 500);
    throw error;
  }
  const body = response.body;
  if (body === null || exchange.closed) {
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
