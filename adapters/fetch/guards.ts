// fencekeeper/fetch's two guards, for any handler of the Fetch API
// (Request in, Response out: Next.js route handlers, Bun.serve, Deno.serve,
// Cloudflare Workers, Node behind an adapter such as @hono/node-server).
import { InvalidArgumentError, type FenceStore } from '../../src/index.js';
import type { FencingContext } from '../../src/shared/http/exchange.js';
import { fenceFetch, nodeServerResponse } from '../../src/shared/http/fetch-fencing.js';
import { fencingSettings, resourceOf, type FencingGuardOptions } from '../../src/shared/http/fencing-core.js';
import { fetchHeader, presentedToken, singleHeader } from '../../src/shared/http/header.js';
import { IDEMPOTENCY_HEADER, idempotencySettings, type IdempotencyGuardOptions } from '../../src/shared/http/idempotency/core.js';
import { idempotentFetch } from '../../src/shared/http/idempotency/fetch.js';
import { problemResponse } from '../../src/shared/http/problem.js';

/**
 * withFencing()'s options: `store` (where the fence lives), `resource` (a
 * name, or a function of the Request), `header` (default 'fencing-token'),
 * `verify` (Chubby's CheckSequencer: only `true` admits; a throw answers 503)
 * and `maxHoldMs` (default 30000: the longest a request may hold the fence,
 * counted until its response body has been read).
 */
export interface FetchFencingOptions<Transaction = undefined> extends FencingGuardOptions<Transaction, Request> {
  readonly store: FenceStore<Transaction>;
}

/** A Fetch API handler behind withFencing(): the Request, and the admission it holds. */
export type FencedFetchHandler<Transaction = undefined> = (request: Request, fencing: FencingContext<Transaction>) => Response | Promise<Response>;

/**
 * Guard a Fetch API handler with a fence: the token is read from the header
 * (one occurrence; a decimal token or a sequencer), checked by `verify`,
 * and admitted by the store under the resource's fence; then
 * `handler(request, fencing)` runs with the admission (`resource`, `token`,
 * `previous`, `transaction`, `signal`). The admission is held until the
 * response body has been read to its end (committed if the status is below
 * 500) or cancelled (aborted), and the body passes through unchanged. A
 * refusal is a problem+json Response instead: 428 no token, 400 malformed or
 * repeated (a value holding a comma: the Fetch API joins repeats with ", "),
 * 403 verify refused, 409 stale (with resource, presented, current) or
 * SEQUENCER_MISMATCH, 503 verify or the store failed, 500 SCHEMA_MISSING.
 * Past maxHoldMs: 503 FENCE_HOLD_EXPIRED if the handler has not returned,
 * else the body is broken off; `fencing.signal` aborts either way, and when
 * the client leaves (the admission is then aborted, or the wait for it
 * given up). The returned function takes the server's second argument too:
 * on @hono/node-server (`serve({ fetch: guarded })` passes it) the guard
 * watches the Node response and reads Node's raw headers, sparing the full
 * Request that reading `request.signal` or `request.headers` builds there;
 * elsewhere it watches the request's signal. A handler that throws has its
 * admission aborted and the error thrown on.
 */
export function withFencing<Transaction = undefined>(
  options: FetchFencingOptions<Transaction>,
  handler: FencedFetchHandler<Transaction>,
): (request: Request, env?: unknown) => Promise<Response> {
  const settings = fencingSettings<Request>('fetch', options as FencingGuardOptions<unknown, Request>, 'withFencing()');
  if (typeof handler !== 'function') throw new InvalidArgumentError('withFencing(): the handler must be a function');
  const header = settings.header;
  // `env`: what the server passes beside the request; @hono/node-server's
  // ({ incoming, outgoing }) lets the guard watch the Node response instead
  // of the request's signal, which costs a full Request there.
  // Not async: fenceFetch's promise is handed back as it is (an async wrapper
  // would add a promise and its ticks to every request).
  return function fenced(request: Request, env?: unknown): Promise<Response> {
    try {
      const outgoing = nodeServerResponse(env);
      const raw = outgoing === undefined ? undefined : (env as { incoming?: { rawHeaders?: unknown } }).incoming?.rawHeaders;
      const parsed = presentedToken(Array.isArray(raw) ? singleHeader(raw as string[], header) : fetchHeader(request.headers, header), header);
      if ('status' in parsed) return Promise.resolve(problemResponse(parsed));
      const resource = resourceOf(settings, request);
      if (typeof resource !== 'string') return Promise.resolve(problemResponse(resource));
      return fenceFetch(settings, request, request, resource, parsed.token, parsed.presented, (fencing: FencingContext<Transaction>) => handler(request, fencing), outgoing);
    } catch (error) {
      return Promise.reject(error);
    }
  };
}

/**
 * withIdempotency()'s options: `store`, `required` (400 without a key;
 * default false), `scope` (a function of the Request: whose keys these
 * are), `headers` (the response headers replayed; default
 * REPLAYED_HEADERS), `maxRequestBytes` (413 past it) and
 * `maxResponseBytes` (each default 1 MiB).
 */
export type FetchIdempotencyOptions = IdempotencyGuardOptions<Request>;

/**
 * Guard a Fetch API handler with the Idempotency-Key header: the first
 * request with a key runs `handler` and its response (status below 500) is
 * stored before it is handed back; a retry with the same key and
 * fingerprint (method, path and query, body bytes) gets the stored answer
 * with `idempotent-replayed: true`, one while the first runs 409
 * IDEMPOTENCY_KEY_IN_USE, one with another fingerprint 422
 * IDEMPOTENCY_KEY_REUSED. The body is read for the fingerprint (413 past
 * maxRequestBytes) and the handler gets a Request with the same bytes. The
 * second argument is passed through to `handler`: nest it inside
 * withFencing() (`withFencing(o, withIdempotency(o2, handler))`) and the key
 * is written through the fence's transaction when its store has one.
 */
export function withIdempotency<Context = undefined>(
  options: FetchIdempotencyOptions,
  handler: (request: Request, context: Context) => Response | Promise<Response>,
): (request: Request, context: Context) => Promise<Response> {
  const settings = idempotencySettings<Request>('fetch', options, 'withIdempotency()');
  if (typeof handler !== 'function') throw new InvalidArgumentError('withIdempotency(): the handler must be a function');
  return function idempotent(request: Request, context: Context): Promise<Response> {
    return idempotentFetch(settings, request, request, fetchHeader(request.headers, IDEMPOTENCY_HEADER), context, (handed) => handler(handed, context));
  };
}
