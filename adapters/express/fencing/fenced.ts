// Typed handlers for routes behind fencing(). Express's Request declares
// `fencing?` (a route without the middleware has none), so a handler on a
// fenced route either checks it or asserts it away. These two say it once:
//
//   app.put('/reports/:id', fencing({ store, resource }), fencedHandler(async (req, res) => {
//     await save(req.params.id, req.fencing.token);   // req.fencing: FencingContext, not undefined
//     res.json({ ok: true });
//   }));
//
//   if (hasFencing(req)) req.fencing.token           // a guard, for middleware that runs either way
//
// fencedHandler() also hands a rejected promise (or a throw) of the handler to
// next(error), on Express 4 as on Express 5: Express 4 ignores the promise an
// async handler returns, so without it a rejection would be an unhandled one
// and the request would hang until maxHoldMs.
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { InvalidArgumentError } from '../../../src/index.js';
import type { FencingContext } from '../../../src/shared/http/exchange.js';

/**
 * A request admitted by fencing(). `Transaction` is the store's transaction
 * type (PostgresFenceStore over a pg.Pool: pg.PoolClient; over a Kysely:
 * Transaction<DB>; MemoryFenceStore: undefined): the caller's statement of
 * which store the route's fencing() uses, not checked against it.
 */
export interface FencedRequest<Transaction = unknown> extends Request {
  readonly fencing: FencingContext<Transaction>;
}

/** True when fencing() admitted this request (req.fencing is set). */
export function hasFencing<Transaction = unknown>(req: Request): req is FencedRequest<Transaction> {
  return req.fencing !== undefined;
}

/** A handler for a route behind fencing(): its req.fencing is always there. */
export type FencedHandler<Transaction = unknown> = (req: FencedRequest<Transaction>, res: Response, next: NextFunction) => void | Promise<void>;

/**
 * Wrap a handler for a route behind fencing(). If the route has no
 * fencing() before it (a mistake in the app), the handler does not run and
 * next() gets an InvalidArgumentError, so the app answers 500 instead of
 * writing unfenced. A throw or a rejection of the handler goes to next(error).
 */
export function fencedHandler<Transaction = unknown>(handler: FencedHandler<Transaction>): RequestHandler {
  if (typeof handler !== 'function') throw new InvalidArgumentError('fencedHandler(): the handler must be a function');
  return function fenced(req: Request, res: Response, next: NextFunction): void {
    if (!hasFencing<Transaction>(req)) {
      next(new InvalidArgumentError('fencedHandler(): this request has no req.fencing: put fencing() before this handler on the route'));
      return;
    }
    let result: void | Promise<void>;
    try {
      result = handler(req, res, next);
    } catch (error) {
      next(error);
      return;
    }
    if (result !== undefined && typeof (result as Promise<void>).then === 'function') {
      (result as Promise<void>).then(undefined, (error: unknown) => next(error ?? new Error('fencedHandler(): the handler rejected without a reason')));
    }
  };
}
