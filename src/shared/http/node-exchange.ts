// The fencing context bound to Node's request and response (Express, and
// Fastify's request.raw / reply.raw): the response's 'close' settles the
// admission, maxHoldMs answers 503 on the response (or breaks it off), and a
// pipelined response that never got its turn is settled by its socket.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FenceStore, FencingToken } from '../../index.js';
import { Fencing } from './exchange.js';
import { writeProblem, type Problem } from './problem.js';

/**
 * Exchanges whose response waits behind an earlier one on the same
 * connection (HTTP/1.1 pipelining: Node answers in order). If the connection
 * closes first, Node drops such a response without emitting 'close' on it,
 * so its admission would never settle: the socket's 'close' settles them.
 */
const queuedOn = new WeakMap<Socket, Set<Fencing>>();

/**
 * Settle `fencing` when Node's response `res` to `req` is over: on the
 * response's 'close', which comes once per response, after 'finish' when it
 * was sent in full (commit below 500) and alone when the connection closed
 * first (abort); for a pipelined response still queued behind an earlier
 * one, on its connection's 'close' if that comes first. What `fencing`'s
 * finished() must call to leave that queue is returned (undefined: not
 * queued). Used by every guard that knows the Node response: Express,
 * Fastify, and the Fetch guards under @hono/node-server.
 */
export function settleWithResponse(fencing: Fencing, req: IncomingMessage | undefined, res: ServerResponse): Set<Fencing> | undefined {
  // One closure per request, on purpose: keeping the state on `res` under a
  // symbol instead is a keyed store on an object with many properties, which
  // turns the ServerResponse into a dictionary-mode object and slows every
  // later write to it (measured: +20% server CPU per request).
  res.on('close', () => fencing.close(res.writableFinished, res.statusCode));
  // A response without a socket is queued behind an earlier one on its connection.
  if (res.socket !== null) return undefined;
  // (`req` is the ServerResponse's own `req` for the Fetch guards: Node's server always sets it)
  const socket = req?.socket;
  if (socket === null || socket === undefined) return undefined;
  let queued = queuedOn.get(socket);
  if (queued === undefined) {
    const set = (queued = new Set());
    queuedOn.set(socket, set);
    socket.once('close', () => {
      for (const f of [...set]) f.close(false, 0);
    });
  }
  queued.add(fencing);
  // Closed already: the 'close' above has been emitted and will not be again.
  if (socket.destroyed) queueMicrotask(() => fencing.close(false, 0));
  return queued;
}

/**
 * The framework's request object that a handler reads its fencing context
 * from (Express's `req`, Fastify's `request`): its `fencing` property is the
 * request's innermost context, which is also how a second guard on the same
 * request finds what the first holds (nesting). The property and not a
 * WeakMap keyed by the request: an entry set per request was about a tenth
 * of the Express guard's CPU with its share of garbage collection
 * (measured, node 20), and the guard sets the property anyway.
 */
export interface FencingHolder {
  fencing?: unknown;
}

/** The innermost fencing context the request of `holder` holds, if any. */
export function nodeFencingOf(holder: FencingHolder): NodeFencing | undefined {
  const fencing = holder.fencing;
  // (instanceof: the property is the application's too, and may hold anything)
  return fencing instanceof NodeFencing ? fencing : undefined;
}

/** One Node request's state under one resource's fence. */
export class NodeFencing extends Fencing {
  readonly #holder: FencingHolder;
  readonly #res: ServerResponse;
  /** The pipelined responses' queue this one waits in, if any (see settleWithResponse). */
  readonly #queuedOn: Set<Fencing> | undefined;

  /** `holder`: the framework's request object (its `fencing` is set on admission); `req`: Node's. */
  constructor(holder: FencingHolder, req: IncomingMessage, res: ServerResponse, store: FenceStore<unknown>, resource: string, token: FencingToken, outer: Fencing | undefined, maxHoldMs: number) {
    super(req, store, resource, token, outer, maxHoldMs);
    this.#holder = holder;
    this.#res = res;
    this.#queuedOn = settleWithResponse(this, req, res);
  }

  /** Admitted: from here on this is the request's innermost context (`req.fencing`, `request.fencing`). */
  enter(): void {
    this.#holder.fencing = this;
  }

  protected responseEnded(): boolean {
    return this.#res.writableEnded;
  }

  protected responseStatus(): number {
    return this.#res.statusCode;
  }

  protected innermost(): Fencing | undefined {
    return nodeFencingOf(this.#holder);
  }

  protected answerExpired(problem: Problem): void {
    const res = this.#res;
    if (!res.headersSent) {
      // Whatever the handler had set (a content-encoding, an ETag) does not
      // describe this answer. `connection: close`: Node closes the connection
      // once the answer is out, so nothing the handler still writes reaches it.
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      res.setHeader('connection', 'close');
      writeProblem(res, problem);
    } else {
      // Part of the response is out: end it as a broken one (the client sees a
      // truncated message, never a complete-looking one).
      res.destroy();
    }
  }

  protected override finished(): void {
    this.#queuedOn?.delete(this);
  }
}
