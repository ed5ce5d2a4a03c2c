// The idempotency guard over the Fetch API (fencekeeper/fetch,
// fencekeeper/hono). The request's body is read here (up to
// maxRequestBytes) for the fingerprint and handed to the handler in a new
// Request with the same bytes; the handler's response is read (up to
// maxResponseBytes) and stored before it is handed back, so a replay is the
// same status, the selected headers and the same bytes. A larger response
// passes through as it comes, and only its status and headers are kept (a
// replay answers 409 IDEMPOTENT_RESPONSE_NOT_KEPT).
import type { IdempotencyClaim, StoredResponse } from '../../../index.js';
import type { HeaderValue } from '../header.js';
import { problemResponse } from '../problem.js';
import {
  NO_KEY,
  UNREADABLE_BODY,
  fingerprint,
  giveBack,
  groupedHeaders,
  keep,
  lookUp,
  scopedKey,
  throughFence,
  tooLarge,
  type IdempotencySettings,
} from './core.js';

/** Statuses whose response has no body (a Response refuses one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * Run `handler` once per Idempotency-Key: the stored answer, a problem
 * answer, or the handler's response (stored before it is handed back).
 * `fencing` is the request's fencing context when it has one: the key is
 * written through its transaction. A handler that throws gives the key back
 * and the error is thrown on.
 */
export async function idempotentFetch<R>(
  settings: IdempotencySettings<R>,
  request: Request,
  req: R,
  text: HeaderValue,
  fencing: unknown,
  handler: (request: Request) => Response | Promise<Response>,
): Promise<Response> {
  const key = scopedKey(settings, text, req);
  if (key === NO_KEY) return handler(request);
  if ('status' in key) return problemResponse(key);
  const body = await readLimited(request.body, settings.maxRequestBytes);
  if (body === TOO_LARGE) return problemResponse(tooLarge(settings), [['connection', 'close']]);
  if (body === UNREADABLE) return problemResponse(UNREADABLE_BODY);
  const url = new URL(request.url);
  const print = fingerprint(request.method, url.pathname + url.search, body);
  const on = throughFence(fencing);
  const found = await lookUp(settings, key, print, on);
  if (found.kind === 'problem') return problemResponse(found.problem);
  if (found.kind === 'replay') return replayResponse(found.response);
  const claim = found.claim;
  if (request.signal.aborted) {
    // Nobody to answer, nothing done: give the key back.
    await giveBack(settings, claim, on);
    return problemResponse({ status: 503, code: 'IDEMPOTENCY_UNAVAILABLE', detail: 'the request was aborted before it ran; try again' });
  }
  // The body was read here: the handler gets the same bytes in a request of its own.
  const handed = request.body === null ? request : new Request(request, { body });
  let response: Response;
  try {
    response = await handler(handed);
  } catch (error) {
    await giveBack(settings, claim, on);
    throw error;
  }
  return captured(settings, claim, response, on);
}

/** Keep the handler's response (below 500; the key given back otherwise) and hand it back. */
async function captured<R>(settings: IdempotencySettings<R>, claim: IdempotencyClaim, response: Response, on: { transaction: unknown } | undefined): Promise<Response> {
  const init = { status: response.status, statusText: response.statusText, headers: response.headers };
  const headers = [...response.headers];
  const reader = response.body?.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (reader !== undefined) {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (error) {
        // The handler's body failed before it was complete: the client gets
        // the same broken body it would have without the guard; nothing is
        // kept and the claim stays running until the store's maxRunningMs.
        return new Response(replayThenFail(chunks, error), init);
      }
      if (chunk.done) break;
      chunks.push(chunk.value);
      size += chunk.value.byteLength;
      if (size > settings.maxResponseBytes) {
        // Too large to keep: what was read goes out first, the rest as it comes; the status and headers are kept at its end.
        return new Response(passOn(chunks, reader, () => void keep(settings, claim, response.status, headers, null, on)), init);
      }
    }
  }
  const bytes = Buffer.concat(chunks);
  const failed = await keep(settings, claim, response.status, headers, new Uint8Array(bytes), on);
  if (failed !== undefined) return problemResponse(failed);
  return new Response(reader === undefined ? null : bytes, init);
}

/** A stored response as a Response, with `idempotent-replayed: true`. */
export function replayResponse(stored: StoredResponse): Response {
  const body = stored.body ?? new Uint8Array(0);
  const headers = new Headers();
  for (const [name, values] of groupedHeaders(stored)) for (const value of values) headers.append(name, value);
  headers.set('idempotent-replayed', 'true');
  headers.set('content-length', String(body.byteLength));
  return new Response(NULL_BODY.has(stored.status) ? null : body, { status: stored.status, headers });
}

const TOO_LARGE: unique symbol = Symbol('too large');
const UNREADABLE: unique symbol = Symbol('unreadable');

/** The whole body, up to `limit` bytes (past it the rest is cancelled). */
async function readLimited(body: ReadableStream<Uint8Array> | null, limit: number): Promise<Uint8Array | typeof TOO_LARGE | typeof UNREADABLE> {
  if (body === null) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    const reader = body.getReader();
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      size += chunk.value.byteLength;
      if (size > limit) {
        reader.cancel().catch(() => undefined);
        return TOO_LARGE;
      }
      chunks.push(chunk.value);
    }
  } catch {
    return UNREADABLE;
  }
  return new Uint8Array(Buffer.concat(chunks));
}

/** `chunks`, then the rest of `reader`, unchanged; `end` once it has all passed. */
function passOn(chunks: Uint8Array[], reader: ReadableStreamDefaultReader<Uint8Array>, end: () => void): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const held = chunks.shift();
      if (held !== undefined) return controller.enqueue(held);
      const chunk = await reader.read();
      if (chunk.done) {
        end();
        controller.close();
        return;
      }
      controller.enqueue(chunk.value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}

/** `chunks`, then the error the handler's body failed with. */
function replayThenFail(chunks: Uint8Array[], error: unknown): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const held = chunks.shift();
      if (held !== undefined) controller.enqueue(held);
      else controller.error(error);
    },
  }, { highWaterMark: 0 });
}
