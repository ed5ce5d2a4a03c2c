// fencing(): the Express middleware that admits a request only under its
// resource's fence.
//
// The guarantee. For one resource, a request carrying token n is never
// handled concurrently with, or after, a request carrying a larger token has
// been admitted, for as long as the request holds the fence. fencing() reads
// the token from a header, lets `verify` check it with the lock service, then
// asks the FenceStore to admit it: the store compares it with the resource's
// high-water mark (equal passes: the same holder writes many times; smaller
// is refused with 409) and holds the resource's fence from admission until
// the response has finished, the connection closed, or maxHoldMs passed. So
// the check and the handler's writes are one critical section: a holder
// paused for 25 s cannot slip a write in between.
//
// Settling. When the response has finished (res 'finish'; settled at the
// 'close' Node emits right after it) the admission is committed if the
// status is below 500 and aborted otherwise (a handler that threw, or called
// next(err) and got a 5xx: its writes through req.fencing.transaction are
// undone). When the connection closes before the response finished, the
// admission is aborted and req.fencing.signal aborts. Either way the fence
// keeps the admitted token: the handler may already have written somewhere
// no store can undo, so no smaller token may follow it. A client that leaves
// while waiting for admission stops waiting and leaves nothing held. A
// refused request (400, 403, 409, 428, 503, or the 4xx a `resource` function
// throws) changes nothing.
//
// maxHoldMs. A handler that never answers would hold the fence, and stall
// every later request for the resource, for as long as its connection stays
// open: server.requestTimeout bounds only the receiving of the request, not
// the handler. Past maxHoldMs from admission the admission is aborted (the
// fence keeps the token; writes through req.fencing.transaction are undone),
// req.fencing.signal aborts (FenceReleasedError, reason 'hold_expired'), the
// client gets 503 FENCE_HOLD_EXPIRED if nothing was sent yet, and the
// connection is closed (at once if part of a response is already out). A
// response the handler has already ended but Node has not yet written (it
// waits behind an earlier pipelined response, or a slow client reads a large
// body) is settled by its status instead, as its 'finish' would have. The
// default, 30 s, is the request limit of common HTTP front ends (Heroku's
// router, AWS API Gateway's 29 s): past it a client behind one has already
// been answered 503/504, so holding on only stalls the resource's next
// holder, while a handler that writes one resource answers in milliseconds.
// Raise it for a route that holds a fence longer on purpose (a large upload
// read behind fencing()). The handler itself keeps running: it must stop
// when the signal aborts, since the next request may already be running.
//
// Nesting. fencing() twice on one request for the same store and resource
// (app.use('/api', fencing(...)) and the same again on the route) does not
// wait on itself: the second finds the first admission and passes, after its
// own verify (a different token for the same resource, from a different
// header, answers 400 CONFLICTING_TOKEN). fencing() for a second resource is
// a second lock taken while holding the first: nest resources in one order
// everywhere (say, sorted by name), or two requests nesting them in opposite
// orders wait for each other. Within one process fencing() sees such a cycle
// before it closes and answers the request that would close it with 503
// FENCE_DEADLOCK (its response then frees its fences, and the other request
// proceeds); across processes sharing a PostgresFenceStore it cannot, and
// maxHoldMs ends the wait. Use one store object per fence table: two objects
// over one table are two stores to fencing(), and nesting the same resource
// through both waits on itself.
//
// Pipelining. Node answers the requests of one HTTP/1.1 connection in order,
// yet runs a later request's handler while an earlier response is still
// being produced: the later response waits in Node's queue, and its fence
// stays held until the earlier response has gone out (or maxHoldMs passes).
// So a slow request holds the fences of the requests pipelined behind it. If
// the connection closes first, the queued responses never go out and their
// admissions are aborted.
//
// Express 4 and 5. fencing() uses only what both give (Node's request and
// response, rawHeaders, next()), and the suites run on both majors. One
// difference is the handler's: Express 5 passes an async handler's rejection
// to the error handlers; Express 4 ignores the promise, so the rejection is
// unhandled and the request gets no answer but the 503 FENCE_HOLD_EXPIRED of
// maxHoldMs, holding the fence until then. On Express 4, catch in the handler
// and call next(error), or wrap it in fencedHandler() (./fenced.ts), which
// does that on both.
//
// Answers (application/problem+json, type about:blank, with a `code`):
// 428 MISSING_TOKEN · 400 INVALID_TOKEN (also an empty value) · 400
// REPEATED_TOKEN (the header sent more than once, detected on rawHeaders) ·
// 400 CONFLICTING_TOKEN · 403 TOKEN_REFUSED (verify did not return true) ·
// 503 VERIFY_UNAVAILABLE (verify threw: the lock service, not the client) ·
// 409 STALE_TOKEN (with resource, presented, current as decimal strings) ·
// 503 FENCE_UNAVAILABLE (the store failed) · 500 SCHEMA_MISSING (the store's
// migrations were never applied: no retry helps; the store's error goes to
// fencekeeper:express:store-failed either way) · 503 FENCE_DEADLOCK · 503
// FENCE_HOLD_EXPIRED · the 4xx a `resource` function throws
// (RESOURCE_REFUSED) · 500 RESOURCE_UNRESOLVED (the `resource` function is
// broken).
//
// Limits.
// - The fence covers the handler only until its response ends, its client
//   leaves, or maxHoldMs passes. A handler that keeps writing after that
//   (watch req.fencing.signal) writes outside the fence; writes through
//   req.fencing.transaction (PostgresFenceStore) are undone instead.
// - The response is sent before the store commits. If a commit fails (the
//   database went away) the client has seen success for an advance that did
//   not happen; such failures go to NODE_DEBUG=fencekeeper.
// - Without `verify`, a client can send a huge token and lock every honest
//   holder out: the header is client input. Use verify (verifyWithZooKeeper)
//   wherever clients are not trusted.
// - MemoryFenceStore is one process's memory: not for a service with more
//   than one instance or one that must remember its fences across restarts.
// - Status 500 only for the application's own bug (a `resource` function that
//   throws without a 4xx status, or returns no resource name); nothing a
//   client sends answers 500.
import { debuglog } from 'node:util';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { InvalidArgumentError, SEQUENCER_FORMAT, SequencerMismatchError, StaleTokenError, formatToken, parseFencing, type FenceAdmission, type FenceStore, type FencingToken, type Sequencer } from '../../../src/index.js';
import { publishRefused, traceAdmit } from '../../../src/extend.js';
import { Fencing, settle } from './context.js';
import { sendProblem } from '../problem.js';
import { answerStoreFailure } from '../store-failure.js';

const debug = debuglog('fencekeeper');

/**
 * fencing()'s options: the fence `store`, the `resource` (a name or a function of
 * the request), `verify` for untrusted callers, the header name and `maxHoldMs`.
 */
export interface FencingOptions<Transaction = undefined> {
  /** Where the fence lives: MemoryFenceStore (one process), PostgresFenceStore, or your own. */
  readonly store: FenceStore<Transaction>;
  /**
   * The resource a request writes: a fixed name, or a function of the request.
   * The function must return a non-empty string for every request. To refuse
   * a request it cannot map (an unknown id), throw an error carrying a 4xx
   * `status` or `statusCode` (the http-errors convention): that status is
   * answered. Any other throw, or a result that is not a non-empty string, is
   * the application's bug and answered 500.
   */
  readonly resource: string | ((req: Request) => string);
  /**
   * The request header carrying the token: a bare decimal token, or a
   * sequencer's text form (`fk1:...`, see formatSequencer), which the store
   * checks against the fence's binding. Default 'fencing-token'.
   */
  readonly header?: string;
  /**
   * Check the token with the lock service before the fence may advance
   * (Chubby's CheckSequencer). Only `true` admits; anything else answers 403.
   * A throw or rejection means the lock service could not answer: 503.
   * `sequencer` is the header's sequencer (null for a bare token), for a
   * verify that checks the lock's name and source as well as the token.
   */
  readonly verify?: (token: FencingToken, resource: string, req: Request, sequencer: Sequencer | null) => boolean | Promise<boolean>;
  /**
   * The longest a request may hold the resource's fence, in ms from its
   * admission, before the admission is aborted, req.fencing.signal aborts and
   * the client is answered 503 FENCE_HOLD_EXPIRED. An integer in
   * 1..2147483647 (a timer's range). Default 30000.
   */
  readonly maxHoldMs?: number;
}

/** See "maxHoldMs" above for why 30 s. */
const DEFAULT_MAX_HOLD_MS = 30_000;
/** The largest delay setTimeout keeps (a larger one fires after 1 ms). */
const MAX_TIMER_MS = 2_147_483_647;

/** RFC 9110 §5.1 field-name: a token. */
const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;

/** The header appeared more than once. */
const REPEATED = Symbol('repeated');

/** What one fencing() needs per request, copied from its options. */
interface Settings {
  readonly store: FenceStore<unknown>;
  readonly verify: FencingOptions<unknown>['verify'];
  readonly maxHoldMs: number;
}

/**
 * The middleware. Answers (application/problem+json) instead of calling the
 * handler: 428 no token; 400 a malformed, repeated or conflicting token
 * header; 403 verify refused; 409 stale (with resource, presented, current);
 * 409 SEQUENCER_MISMATCH on a bound fence, for another lock's sequencer or a
 * bare token (with resource, bound);
 * 503 verify threw, the store failed, or waiting would deadlock; 500
 * SCHEMA_MISSING when the store's migrations were never applied (a retry
 * cannot help; the store's error is published on
 * fencekeeper:express:store-failed). Otherwise
 * sets req.fencing and calls next(), holding the fence until the response
 * has finished (then commit if the status is below 500, abort otherwise),
 * the connection closed first (abort), or maxHoldMs passed (abort, 503).
 */
export function fencing<Transaction = undefined>(options: FencingOptions<Transaction>): RequestHandler {
  const store = options.store;
  if (store === null || typeof store !== 'object' || typeof store.admit !== 'function') {
    throw new InvalidArgumentError('fencing(): options.store must be a FenceStore');
  }
  const resource = options.resource;
  if (typeof resource === 'string' ? resource.length === 0 : typeof resource !== 'function') {
    throw new InvalidArgumentError('fencing(): options.resource must be a non-empty string or a function of the request');
  }
  const header = (options.header ?? 'fencing-token').toLowerCase();
  if (!FIELD_NAME.test(header)) {
    throw new InvalidArgumentError(`fencing(): not an HTTP header name: ${JSON.stringify(options.header)}`);
  }
  const verify = options.verify;
  if (verify !== undefined && typeof verify !== 'function') {
    throw new InvalidArgumentError('fencing(): options.verify must be a function');
  }
  const maxHoldMs = options.maxHoldMs ?? DEFAULT_MAX_HOLD_MS;
  if (typeof maxHoldMs !== 'number' || !Number.isInteger(maxHoldMs) || maxHoldMs < 1 || maxHoldMs > MAX_TIMER_MS) {
    throw new InvalidArgumentError(`fencing(): options.maxHoldMs must be an integer in 1..${MAX_TIMER_MS}, got ${String(options.maxHoldMs)}`);
  }
  const settings: Settings = Object.freeze({ store: store as FenceStore<unknown>, verify: verify as Settings['verify'], maxHoldMs });

  return function fencingMiddleware(req: Request, res: Response, next: NextFunction): void {
    const text = readHeader(req, header);
    if (text === undefined) {
      return sendProblem(res, 428, 'MISSING_TOKEN', `this request needs a fencing token in the ${header} header`);
    }
    if (text === REPEATED) {
      return sendProblem(res, 400, 'REPEATED_TOKEN', `the ${header} header must appear once`);
    }
    // A bare token (decimal) or a sequencer (the token with its lock: SEQUENCER_FORMAT).
    let token: FencingToken;
    let presented: FencingToken | Sequencer;
    try {
      presented = parseFencing(text);
      token = typeof presented === 'bigint' ? presented : presented.token;
    } catch {
      return sendProblem(res, 400, 'INVALID_TOKEN', `the ${header} header must be a decimal integer in 1..9223372036854775807 or a sequencer (${SEQUENCER_FORMAT})`);
    }

    let name: string;
    if (typeof resource === 'string') {
      name = resource;
    } else {
      let named: unknown;
      try {
        named = resource(req);
      } catch (error) {
        const status = clientStatusOf(error);
        if (status !== undefined) {
          return sendProblem(res, status, 'RESOURCE_REFUSED', exposedMessage(error) ?? 'this request names no fenced resource');
        }
        debug('fencing(): resource() threw: %o', error);
        return sendProblem(res, 500, 'RESOURCE_UNRESOLVED', 'the server could not determine the resource of this request');
      }
      if (typeof named !== 'string' || named.length === 0) {
        debug('fencing(): resource() returned %o, not a non-empty string', named);
        return sendProblem(res, 500, 'RESOURCE_UNRESOLVED', 'the server could not determine the resource of this request');
      }
      name = named;
    }

    // The client is already gone: nobody to answer, nothing to hold.
    if (res.closed || res.writableEnded) return;
    const outer = req.fencing instanceof Fencing ? req.fencing : undefined;
    // This request already holds this fence (fencing() applied twice): waiting
    // for it again would wait for ourselves.
    const held = outer?.find(settings.store, name);
    if (held !== undefined) {
      void rejoin(settings, req, res, next, held, token, presented);
      return;
    }
    void admit(settings, req, res, next, name, token, outer, presented);
  };
}

async function admit(
  settings: Settings,
  req: Request,
  res: Response,
  next: NextFunction,
  resource: string,
  token: FencingToken,
  outer: Fencing | undefined,
  presented: FencingToken | Sequencer,
): Promise<void> {
  const exchange = new Fencing(req, res, settings.store, resource, token, outer, settings.maxHoldMs);
  if (settings.verify !== undefined && !(await verified(settings.verify, token, resource, req, res, exchange, presented))) return;

  const cycle = exchange.enterWait();
  if (cycle !== undefined) {
    return sendProblem(
      res,
      503,
      'FENCE_DEADLOCK',
      `waiting for the fence of ${resource} would deadlock: it is held by a request that waits, through ${cycle.join(' -> ')}, for a fence this request holds; take fences in one order everywhere; try again`,
    );
  }
  let admission: FenceAdmission<unknown>;
  try {
    // (Promise.resolve: a store of the user's may hand back a thenable, and a trace needs a promise)
    admission = await traceAdmit('express', resource, token, () => Promise.resolve(settings.store.admit(resource, presented, exchange)));
  } catch (error) {
    exchange.leaveWait();
    if (exchange.closed) return; // the client left while waiting; the store holds nothing for it
    if (error instanceof StaleTokenError) {
      publishRefused('express', error);
      return sendProblem(
        res,
        409,
        'STALE_TOKEN',
        `a larger fencing token has been admitted for ${resource}`,
        { resource, presented: formatToken(token), current: error.current === null ? null : formatToken(error.current) },
      );
    }
    if (error instanceof SequencerMismatchError) {
      publishRefused('express', error, token);
      return sendProblem(
        res,
        409,
        'SEQUENCER_MISMATCH',
        `the fence of ${resource} is guarded by another lock than the one this token belongs to`,
        { resource, bound: { kind: error.bound.kind, lock: error.bound.lock, source: error.bound.source } },
      );
    }
    debug('fencing(): store.admit failed: %o', error);
    return answerStoreFailure(res, { middleware: 'fencing', operation: 'admit', error }, 'FENCE_UNAVAILABLE', 'the fence store could not admit the request; try again');
  }
  exchange.leaveWait();

  // Admitted, but the client left (or someone else answered) in the meantime.
  if (exchange.closed || res.writableEnded) {
    settle(admission, false);
    return;
  }
  exchange.hold(admission);
  req.fencing = exchange;
  next();
}

/** fencing() again for a fence the request holds: pass with the same token, after this fencing()'s own verify. */
async function rejoin(settings: Settings, req: Request, res: Response, next: NextFunction, held: Fencing, token: FencingToken, presented: FencingToken | Sequencer): Promise<void> {
  if (token !== held.token) {
    return sendProblem(res, 400, 'CONFLICTING_TOKEN', `this request already holds the fence of ${held.resource} with another fencing token`);
  }
  if (settings.verify !== undefined && !(await verified(settings.verify, token, held.resource, req, res, held, presented))) return;
  if (held.closed) return;
  next();
}

/** Run verify; answers and returns false unless it returned true and the exchange is still open. */
async function verified(
  verify: NonNullable<Settings['verify']>,
  token: FencingToken,
  resource: string,
  req: Request,
  res: Response,
  exchange: Fencing,
  presented: FencingToken | Sequencer,
): Promise<boolean> {
  let verdict: unknown;
  try {
    verdict = await verify(token, resource, req, typeof presented === 'bigint' ? null : presented);
  } catch (error) {
    debug('fencing(): verify threw: %o', error);
    sendProblem(res, 503, 'VERIFY_UNAVAILABLE', 'the lock service could not check the fencing token; try again');
    return false;
  }
  if (exchange.closed) return false;
  if (verdict !== true) {
    sendProblem(res, 403, 'TOKEN_REFUSED', `the fencing token is not the current holder's for ${resource}`);
    return false;
  }
  return true;
}

/** The header's value, undefined if absent, REPEATED if sent more than once. */
function readHeader(req: Request, header: string): string | undefined | typeof REPEATED {
  // rawHeaders keeps every occurrence as sent: req.headers joins repeats of
  // unknown headers with ', ' and keeps only the first of some known ones
  // (authorization, ...), so it cannot tell a repeat for every name.
  const raw = req.rawHeaders as string[] | undefined;
  if (raw === undefined) {
    const value = req.headers[header];
    return Array.isArray(value) ? REPEATED : value;
  }
  let found: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === header.length && name.toLowerCase() === header) {
      if (found !== undefined) return REPEATED;
      found = raw[i + 1] ?? '';
    }
  }
  return found;
}

function clientStatusOf(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { status, statusCode } = error as { status?: unknown; statusCode?: unknown };
  const code = typeof status === 'number' ? status : statusCode;
  return typeof code === 'number' && Number.isInteger(code) && code >= 400 && code <= 499 ? code : undefined;
}

function exposedMessage(error: unknown): string | undefined {
  const { message, expose } = error as { message?: unknown; expose?: unknown };
  return expose !== false && typeof message === 'string' && message.length > 0 ? message : undefined;
}
