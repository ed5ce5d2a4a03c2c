// fencing as a Fastify plugin: a preHandler hook that admits the request
// under its resource's fence, with fencekeeper/express's answers and rules
// (the shared core: src/shared/http/). Wrapped with fastify-plugin, so it
// guards the context it is registered in and that context's children, and
// nothing outside it. The admission is settled on the raw response's
// 'close': committed when the response finished with a status below 500
// (a handler that threw and was answered 500 by Fastify is aborted),
// aborted when the connection closed first (the client left) or maxHoldMs
// passed (503 FENCE_HOLD_EXPIRED).
import fp from 'fastify-plugin';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { FenceAdmission, FenceStore } from '../../src/index.js';
import { settle, type FencingContext } from '../../src/shared/http/exchange.js';
import { CLOSED, admitExchange, admitNow, fencingSettings, rejoinExchange, resourceOf, type FencingGuardOptions } from '../../src/shared/http/fencing-core.js';
import { nodeHeader, presentedToken } from '../../src/shared/http/header.js';
import { NodeFencing, nodeFencingOf } from '../../src/shared/http/node-exchange.js';
import { PROBLEM_HEADERS, problemBody, type Problem } from '../../src/shared/http/problem.js';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Set by fencekeeper's fencing plugin once the request holds its
     * resource's fence (`resource`, `token`, `previous`, `transaction`,
     * `signal`); undefined on routes it does not guard.
     */
    fencing: FencingContext | undefined;
  }
}

/**
 * The fencing plugin's options: `store`, `resource` (a name, or a function of
 * the Fastify request), `header` (default 'fencing-token'), `verify` (only
 * `true` admits; a throw answers 503) and `maxHoldMs` (default 30000).
 */
export interface FastifyFencingOptions<Transaction = undefined> extends FencingGuardOptions<Transaction, FastifyRequest> {
  readonly store: FenceStore<Transaction>;
}

/** Write a problem through Fastify (so its onSend hooks and logging see it). */
export function replyProblem(reply: FastifyReply, problem: Problem): FastifyReply {
  if (reply.sent) return reply;
  reply.code(problem.status);
  for (const [name, value] of PROBLEM_HEADERS) reply.header(name, value);
  // A Buffer: Fastify would add a charset to a string's content-type.
  return reply.send(Buffer.from(problemBody(problem)));
}

/** What the guard answers a request whose client left before it was admitted (nobody reads it). */
const GONE: Problem = Object.freeze({ status: 503, code: 'FENCE_UNAVAILABLE', detail: 'the request was aborted before it was admitted; try again' });

const plugin: FastifyPluginAsync<FastifyFencingOptions<unknown>> = async (instance, options) => {
  const settings = fencingSettings<FastifyRequest>('fastify', options, 'fencing plugin');
  const header = settings.header;
  if (!instance.hasRequestDecorator('fencing')) instance.decorateRequest('fencing', undefined);

  // A callback hook, not an async one: an uncontended request on a store
  // that can admit at once (MemoryFenceStore) goes on to its handler in the
  // same tick, with no promise for Fastify to wait on. To answer instead,
  // the hook sends the reply and does not call done (Fastify's rule for
  // callback hooks).
  instance.addHook('preHandler', function fencingHook(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
    const parsed = presentedToken(nodeHeader(request.raw, header), header);
    if ('status' in parsed) return void replyProblem(reply, parsed);
    const name = resourceOf(settings, request);
    if (typeof name !== 'string') return void replyProblem(reply, name);
    const req = request.raw;
    const res = reply.raw;
    // The client left while an earlier hook ran (an authentication's round
    // trip, say): the response's 'close', which settles an admission, has
    // come and will not come again, so an admission now would hold the fence
    // until maxHoldMs with nobody to answer. Not admitted, not handled.
    if (res.closed) return void replyProblem(reply, GONE);
    const outer = nodeFencingOf(request);
    // This request already holds this fence (the plugin registered twice on its path).
    const held = outer?.find(settings.store, name);
    if (held !== undefined) {
      rejoinExchange(settings, request, held, parsed.token, parsed.presented).then((refused) => {
        if (refused === CLOSED) replyProblem(reply, GONE);
        else if (refused !== undefined) replyProblem(reply, refused);
        else done();
      }).catch(done);
      return;
    }
    const exchange = new NodeFencing(request, req, res, settings.store, name, parsed.token, outer, settings.maxHoldMs);
    const now = admitNow(settings, exchange, parsed.token, parsed.presented);
    if (now !== undefined) return void proceed(request, reply, done, exchange, now);
    admitExchange(settings, request, exchange, parsed.token, parsed.presented).then((admission) => {
      if (admission === CLOSED) replyProblem(reply, GONE);
      else proceed(request, reply, done, exchange, admission);
    }).catch(done); // (a throw of ours above: Fastify answers it as the async hook's rejection was)
  });
};

/** The admission's answer: the handler runs (done) holding the fence, or the reply is the refusal. */
function proceed(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction, exchange: NodeFencing, admission: FenceAdmission<unknown> | Problem): void {
  if ('status' in admission) {
    replyProblem(reply, admission);
    return;
  }
  if (exchange.closed || reply.raw.writableEnded) {
    settle(admission, false);
    replyProblem(reply, GONE);
    return;
  }
  exchange.hold(admission);
  exchange.enter(); // request.fencing
  done();
}

/**
 * The fencing guard as a Fastify plugin: `await app.register(fencing, {
 * store, resource: (request) => ... })`. Guards every route of the context
 * it is registered in (and its children; wrapped with fastify-plugin), in a
 * preHandler hook: answers 428 / 400 / 403 / 409 / 503 / 500 SCHEMA_MISSING
 * as application/problem+json with a `code`, as fencekeeper/express does;
 * otherwise sets `request.fencing` and holds the fence until the response
 * has finished (commit below 500, abort otherwise), the client left (abort)
 * or maxHoldMs passed (abort, 503). Register it before the idempotency
 * plugin, so the key is written through the fence's transaction.
 */
export const fencing = fp(plugin, { fastify: '4.x || 5.x', name: 'fencekeeper-fencing' }) as FastifyPluginAsync<FastifyFencingOptions<unknown>>;
