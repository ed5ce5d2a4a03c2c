// fencekeeper/hono's two middlewares, over the Fetch API guards' core
// (src/shared/http/fetch-fencing.ts, idempotency/fetch.ts): the same
// answers as fencekeeper/fetch and fencekeeper/express. Under
// @hono/node-server the headers are read from Node's rawHeaders (c.env.incoming),
// so a repeated header is told from one holding a comma; elsewhere the Fetch
// API's joined value is read (see fencekeeper/fetch).
import type { Context, MiddlewareHandler } from 'hono';
import type { FenceStore } from '../../src/index.js';
import type { FencingContext } from '../../src/shared/http/exchange.js';
import { fenceFetch, nodeServerResponse } from '../../src/shared/http/fetch-fencing.js';
import { fencingSettings, resourceOf, type FencingGuardOptions } from '../../src/shared/http/fencing-core.js';
import { fetchHeader, presentedToken, singleHeader, type HeaderValue } from '../../src/shared/http/header.js';
import { IDEMPOTENCY_HEADER, idempotencySettings, type IdempotencyGuardOptions } from '../../src/shared/http/idempotency/core.js';
import { idempotentFetch } from '../../src/shared/http/idempotency/fetch.js';
import { problemResponse } from '../../src/shared/http/problem.js';

/**
 * The Hono environment of a route behind fencing(): `c.get('fencing')` is
 * the admission (`resource`, `token`, `previous`, `transaction`, `signal`).
 * `new Hono<FencingEnv>()`, or `Hono<FencingEnv<pg.PoolClient>>` for
 * PostgresFenceStore's transaction type.
 */
export interface FencingEnv<Transaction = unknown> {
  Variables: { fencing: FencingContext<Transaction> };
}

/**
 * fencing()'s options: `store`, `resource` (a name, or a function of the
 * Hono Context), `header` (default 'fencing-token'), `verify` (only `true`
 * admits) and `maxHoldMs` (default 30000, counted until the response body
 * has been read).
 */
export interface HonoFencingOptions<Transaction = undefined> extends FencingGuardOptions<Transaction, Context> {
  readonly store: FenceStore<Transaction>;
}

/** idempotency()'s options: as fencekeeper/fetch's, with `scope` a function of the Hono Context. */
export type HonoIdempotencyOptions = IdempotencyGuardOptions<Context>;

/** Node's raw header list when Hono runs on @hono/node-server (its env carries the IncomingMessage). */
function rawHeaders(c: Context): readonly string[] | undefined {
  const incoming = (c.env as { incoming?: { rawHeaders?: unknown } } | undefined)?.incoming;
  return Array.isArray(incoming?.rawHeaders) ? (incoming.rawHeaders as string[]) : undefined;
}

function header(c: Context, name: string): HeaderValue {
  const raw = rawHeaders(c);
  return raw !== undefined ? singleHeader(raw, name) : fetchHeader(c.req.raw.headers, name);
}

/**
 * Hono middleware that admits a request only under its resource's fence,
 * with fencekeeper/express's answers (problem+json: 428, 400, 403, 409, 503,
 * 500 SCHEMA_MISSING). The admission is in `c.get('fencing')` and is held
 * until the response body has been read to its end (committed below 500,
 * aborted otherwise: a handler that threw is answered 500 by Hono) or
 * cancelled; the body passes through unchanged. The client leaving aborts it.
 */
export function fencing<Transaction = undefined>(options: HonoFencingOptions<Transaction>): MiddlewareHandler<FencingEnv<Transaction>> {
  const settings = fencingSettings<Context>('hono', options as FencingGuardOptions<unknown, Context>);
  const name = settings.header;
  // Not async, and no async step of its own: the guard's promise is the
  // middleware's (each async layer was a promise and microtask turns more
  // per request).
  return function fencingMiddleware(c, next) {
    const parsed = presentedToken(header(c, name), name);
    if ('status' in parsed) return Promise.resolve(problemResponse(parsed));
    const resource = resourceOf(settings, c as unknown as Context);
    if (typeof resource !== 'string') return Promise.resolve(problemResponse(resource));
    let ran = false;
    const fenced = fenceFetch(settings, c.req.raw, c as unknown as Context, resource, parsed.token, parsed.presented, (admitted: FencingContext<Transaction>) => {
      ran = true;
      c.set('fencing', admitted);
      return next().then(() => c.res);
    }, nodeServerResponse(c.env));
    return fenced.then((response) => {
      if (!ran) return response;
      // Unchanged (no body to hold): c.res is the response already.
      if (response !== c.res) replaceResponse(c, response);
      return undefined;
    });
  };
}

/**
 * Make `response` the Context's response as it is. Hono's setter copies the
 * previous response's headers onto a new one; cleared first, nothing is
 * copied: maxHoldMs's 503 must not carry headers the handler had set for its
 * own answer (a content-language, a content-encoding), and the guard's
 * pass-through of the handler's response has its headers already.
 */
function replaceResponse(c: Context, response: Response): void {
  c.res = undefined;
  c.res = response;
}

/**
 * Hono middleware for the Idempotency-Key header, with fencekeeper/fetch's
 * withIdempotency() behaviour: the first request with a key runs the route
 * and its response (below 500) is stored before it goes out; a retry gets
 * it back (`idempotent-replayed: true`), 409 while the first runs, 422 for
 * another fingerprint, 413 past maxRequestBytes. Put it after fencing(): the
 * key is then written through the fence's transaction. Read the body in the
 * route with c.req.json() / text() / arrayBuffer() as usual.
 */
export function idempotency(options: HonoIdempotencyOptions): MiddlewareHandler {
  const settings = idempotencySettings<Context>('hono', options);
  return async function idempotencyMiddleware(c, next) {
    const raw = rawHeaders(c);
    const text = raw !== undefined ? singleHeader(raw, IDEMPOTENCY_HEADER) : fetchHeader(c.req.raw.headers, IDEMPOTENCY_HEADER);
    let request = c.req.raw;
    if (request.bodyUsed) {
      // A validator before this middleware has read the body through c.req: its cached bytes.
      const bytes = new Uint8Array(await c.req.arrayBuffer());
      request = new Request(request.url, { method: request.method, headers: request.headers, body: bytes, signal: request.signal });
    }
    let ran = false;
    const response = await idempotentFetch(settings, request, c, text, (c.var as { fencing?: unknown }).fencing, async (handed) => {
      ran = true;
      if (handed !== c.req.raw) {
        c.req.raw = handed;
        c.req.bodyCache = {};
      }
      await next();
      return c.res;
    });
    if (!ran) return response;
    // Unchanged (no body to hold): c.res is the response already.
    if (response !== c.res) replaceResponse(c, response);
    return undefined;
  };
}

