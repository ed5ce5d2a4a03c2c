// fencing(): the Express middleware that admits a request only under its
// resource's fence. See index.ts for the guarantee and its limits.
import { debuglog } from 'node:util';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import {
  InvalidArgumentError,
  StaleTokenError,
  formatToken,
  parseToken,
  type FenceAdmission,
  type FenceStore,
  type FencingToken,
} from '../../src/index.js';
import { sendProblem } from './problem.js';

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
   * Aborts when the connection closed before the response finished: the
   * admission has been aborted and the fence handed on, so the handler must
   * stop writing to the resource (other than through `transaction`, which
   * was rolled back).
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
  /** The request header carrying the token. Default 'fencing-token'. */
  readonly header?: string;
  /**
   * Check the token with the lock service before the fence may advance
   * (Chubby's CheckSequencer). Only `true` admits; anything else answers 403.
   * A throw or rejection means the lock service could not answer: 503.
   */
  readonly verify?: (token: FencingToken, resource: string, req: Request) => boolean | Promise<boolean>;
}

/** RFC 9110 §5.1 field-name: a token. */
const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;

/** The header appeared more than once. */
const REPEATED = Symbol('repeated');

/** The reason the admission wait is aborted with when the client goes away. */
const CLIENT_GONE = new Error('the connection closed before the response finished');

/**
 * req.fencing, and the request's whole state: one object per request.
 * It is also the options object handed to store.admit(): its `signal` is made
 * on first read, because an AbortController costs more (measured on Node 20)
 * than the rest of an uncontended admission, and it is needed only by a
 * request that has to wait (MemoryFenceStore reads it only then), by a store
 * that always reads it, or by a handler that asks for req.fencing.signal.
 */
class Fencing implements FencingContext {
  readonly resource: string;
  readonly token: FencingToken;
  previous: FencingToken | null = null;
  transaction: unknown = undefined;
  /** The connection closed before the response finished. */
  #gone = false;
  /** Held until the response has finished or the connection closed. */
  #admission: FenceAdmission<unknown> | undefined = undefined;
  #controller: AbortController | undefined = undefined;

  constructor(resource: string, token: FencingToken) {
    this.resource = resource;
    this.token = token;
  }

  get signal(): AbortSignal {
    let controller = this.#controller;
    if (controller === undefined) {
      controller = this.#controller = new AbortController();
      if (this.#gone) controller.abort(CLIENT_GONE);
    }
    return controller.signal;
  }

  /** The client left (the connection closed before the response finished). */
  get gone(): boolean {
    return this.#gone;
  }

  /** Keep the admission until the response ends. */
  hold(admission: FenceAdmission<unknown>): void {
    this.#admission = admission;
    this.previous = admission.previous;
    this.transaction = admission.transaction;
  }

  /** The response's 'close': settle what is held, abort a wait or a handler if it did not finish. */
  close(finished: boolean, status: number): void {
    if (!finished) {
      this.#gone = true;
      this.#controller?.abort(CLIENT_GONE);
    }
    const admission = this.#admission;
    if (admission === undefined) return;
    this.#admission = undefined;
    settle(admission, finished && status < 500);
  }
}

/**
 * The middleware. Answers (application/problem+json) instead of calling the
 * handler: 428 no token; 400 a malformed or repeated token header; 403 verify
 * refused; 409 stale (with resource, presented, current); 503 verify threw or
 * the store failed. Otherwise sets req.fencing and calls next(), holding the
 * fence until the response has finished (then commit if the status is below
 * 500, abort otherwise) or the connection closed first (abort).
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
  const fenced = store as FenceStore<unknown>;

  return function fencingMiddleware(req: Request, res: Response, next: NextFunction): void {
    const text = readHeader(req, header);
    if (text === undefined) {
      return sendProblem(res, 428, 'MISSING_TOKEN', `this request needs a fencing token in the ${header} header`);
    }
    if (text === REPEATED) {
      return sendProblem(res, 400, 'REPEATED_TOKEN', `the ${header} header must appear once`);
    }
    let token: FencingToken;
    try {
      token = parseToken(text);
    } catch {
      return sendProblem(res, 400, 'INVALID_TOKEN', `the ${header} header must be a decimal integer in 1..9223372036854775807`);
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
    void admit(fenced, verify, req, res, next, name, token);
  };
}

async function admit(
  store: FenceStore<unknown>,
  verify: FencingOptions<unknown>['verify'],
  req: Request,
  res: Response,
  next: NextFunction,
  resource: string,
  token: FencingToken,
): Promise<void> {
  const exchange = new Fencing(resource, token);
  // One closure per request, on purpose: keeping the state on `res` under a
  // symbol instead is a keyed store on an object with many properties, which
  // turns the ServerResponse into a dictionary-mode object and slows every
  // later write to it (measured: +20% server CPU per request).
  // 'close' comes once per response, after 'finish' when the response was
  // sent in full, alone when the connection closed first: it settles both.
  res.on('close', () => exchange.close(res.writableFinished, res.statusCode));

  if (verify !== undefined) {
    let verdict: unknown;
    try {
      verdict = await verify(token, resource, req);
    } catch (error) {
      debug('fencing(): verify threw: %o', error);
      return sendProblem(res, 503, 'VERIFY_UNAVAILABLE', 'the lock service could not check the fencing token; try again');
    }
    if (exchange.gone) return;
    if (verdict !== true) {
      return sendProblem(res, 403, 'TOKEN_REFUSED', `the fencing token is not the current holder's for ${resource}`);
    }
  }

  let admission: FenceAdmission<unknown>;
  try {
    admission = await store.admit(resource, token, exchange);
  } catch (error) {
    if (exchange.gone) return; // the client left while waiting; the store holds nothing for it
    if (error instanceof StaleTokenError) {
      return sendProblem(
        res,
        409,
        'STALE_TOKEN',
        `a larger fencing token has been admitted for ${resource}`,
        { resource, presented: formatToken(token), current: error.current === null ? null : formatToken(error.current) },
      );
    }
    debug('fencing(): store.admit failed: %o', error);
    return sendProblem(res, 503, 'FENCE_UNAVAILABLE', 'the fence store could not admit the request; try again');
  }

  // Admitted, but the client left between the store's answer and now.
  if (exchange.gone || res.writableEnded) {
    settle(admission, false);
    return;
  }
  exchange.hold(admission);
  req.fencing = exchange;
  next();
}

function settle(admission: FenceAdmission<unknown>, commit: boolean): void {
  try {
    (commit ? admission.commit() : admission.abort()).catch(reportSettleFailure);
  } catch (error) {
    reportSettleFailure(error);
  }
}

function reportSettleFailure(error: unknown): void {
  // The response is already out; all that is left is to say so.
  debug('fencing(): settling the admission failed: %o', error);
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
