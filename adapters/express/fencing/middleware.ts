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
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { FenceAdmission, FenceStore, FencingToken, Sequencer } from '../../../src/index.js';
import { NodeFencing, nodeFencingOf } from '../../../src/shared/http/node-exchange.js';
import { settle } from '../../../src/shared/http/exchange.js';
import { CLOSED, admitExchange, admitNow, fencingSettings, rejoinExchange, resourceOf, type FencingGuardOptions, type FencingSettings } from '../../../src/shared/http/fencing-core.js';
import { nodeHeader, presentedToken } from '../../../src/shared/http/header.js';
import { writeProblem, type Problem } from '../../../src/shared/http/problem.js';
import type { Fencing, FencingContext } from '../../../src/shared/http/exchange.js';

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

/**
 * fencing()'s options: `store` (where the fence lives), `resource` (a name or
 * a function of the Express request), `header` (default 'fencing-token'),
 * `verify` (Chubby's CheckSequencer: only `true` admits) and `maxHoldMs`
 * (default 30000: the longest a request may hold the fence).
 */
export interface FencingOptions<Transaction = undefined> extends FencingGuardOptions<Transaction, Request> {
  readonly store: FenceStore<Transaction>;
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
  const settings = fencingSettings<Request>('express', options as FencingGuardOptions<unknown, Request>);
  const header = settings.header;

  return function fencingMiddleware(req: Request, res: Response, next: NextFunction): void {
    const parsed = presentedToken(nodeHeader(req, header), header);
    if ('status' in parsed) return writeProblem(res, parsed);
    const name = resourceOf(settings, req);
    if (typeof name !== 'string') return writeProblem(res, name);

    // The client is already gone (the response destroyed: its connection
    // closed, or someone destroyed it) or someone answered: nobody to
    // answer, nothing to hold. (`destroyed` rather than `closed`: a field,
    // not a getter through the response's prototypes, and true as soon as
    // the response can no longer be answered.)
    if (res.destroyed || res.writableEnded) return;
    const outer = nodeFencingOf(req);
    // This request already holds this fence (fencing() applied twice): waiting
    // for it again would wait for ourselves.
    const held = outer?.find(settings.store, name);
    if (held !== undefined) {
      void rejoin(settings, req, res, next, held, parsed.token, parsed.presented);
      return;
    }
    const exchange = new NodeFencing(req, req, res, settings.store, name, parsed.token, outer, settings.maxHoldMs);
    // Uncontended on a store that can say so at once: admitted in this tick.
    const now = admitNow(settings, exchange, parsed.token, parsed.presented);
    if (now === undefined) void admit(settings, req, res, next, exchange, parsed.token, parsed.presented);
    else if ('status' in now) writeProblem(res, now);
    else enter(next, exchange, now);
  };
}

async function admit(
  settings: FencingSettings<Request>,
  req: Request,
  res: Response,
  next: NextFunction,
  exchange: NodeFencing,
  token: FencingToken,
  presented: FencingToken | Sequencer,
): Promise<void> {
  const admission: FenceAdmission<unknown> | Problem | typeof CLOSED = await admitExchange(settings, req, exchange, token, presented);
  if (admission === CLOSED) return;
  if ('status' in admission) return writeProblem(res, admission);
  proceed(req, res, next, exchange, admission);
}

/** Admitted: hold the fence for the handler, unless the client left (or someone else answered) in the meantime. */
function proceed(req: Request, res: Response, next: NextFunction, exchange: NodeFencing, admission: FenceAdmission<unknown>): void {
  if (exchange.closed || res.writableEnded) {
    settle(admission, false);
    return;
  }
  enter(next, exchange, admission);
}

/**
 * Hold the fence for the handler and hand it on. Called directly when the
 * admission came in the tick that checked the response (nothing can have
 * closed or answered it since): each property read on Express's req and res
 * costs about a microsecond (every request object has a hidden class of its
 * own, so V8 looks each one up anew), and proceed's two are skipped.
 */
function enter(next: NextFunction, exchange: NodeFencing, admission: FenceAdmission<unknown>): void {
  exchange.hold(admission);
  exchange.enter(); // req.fencing
  next();
}

/** fencing() again for a fence the request holds: pass with the same token, after this fencing()'s own verify. */
async function rejoin(settings: FencingSettings<Request>, req: Request, res: Response, next: NextFunction, held: Fencing, token: FencingToken, presented: FencingToken | Sequencer): Promise<void> {
  const refused = await rejoinExchange(settings, req, held, token, presented);
  if (refused === CLOSED) return;
  if (refused !== undefined) return writeProblem(res, refused);
  next();
}
