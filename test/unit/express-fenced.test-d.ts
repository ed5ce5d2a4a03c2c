// Type tests: req.fencing is possibly undefined in an ordinary handler (a
// route without fencing() has none), and certainly there behind
// fencedHandler() and after hasFencing(). Checked by tsc through vitest's
// typecheck; nothing here runs.
import express, { type Request, type RequestHandler } from 'express';
import type pg from 'pg';
import { describe, expectTypeOf, it } from 'vitest';
import {
  fencedHandler,
  fencing,
  hasFencing,
  MemoryFenceStore,
  type FencedRequest,
  type FencingContext,
} from '../../adapters/express/index.js';
import type { FencingToken } from '../../src/index.js';

const app = express();
const fence = fencing({ store: new MemoryFenceStore(), resource: (req) => `doc:${String(req.params['id'])}` });

describe('req.fencing types', () => {
  it('is possibly undefined in a plain handler', () => {
    app.put('/plain/:id', fence, (req) => {
      expectTypeOf(req.fencing).toEqualTypeOf<FencingContext | undefined>();
      // @ts-expect-error -- possibly undefined without a check
      void req.fencing.token;
    });
  });

  it('is a FencingContext behind fencedHandler(), which fits app.put() beside the route params', () => {
    app.put('/docs/:id', fence, fencedHandler(async (req, res) => {
      expectTypeOf(req.fencing).toEqualTypeOf<FencingContext<unknown>>();
      expectTypeOf(req.fencing.token).toEqualTypeOf<FencingToken>();
      expectTypeOf(req.fencing.signal).toEqualTypeOf<AbortSignal>();
      expectTypeOf(req.params).toEqualTypeOf<Request['params']>();
      res.json({ token: String(req.fencing.token) });
    }));
    expectTypeOf(fencedHandler(() => undefined)).toEqualTypeOf<RequestHandler>();
  });

  it('takes the store\'s transaction type as its type argument', () => {
    fencedHandler<pg.PoolClient>(async (req) => {
      expectTypeOf(req.fencing.transaction).toEqualTypeOf<pg.PoolClient>();
    });
  });

  it('a handler must return nothing or a promise of nothing', () => {
    // @ts-expect-error -- a value returned by the handler would be ignored
    fencedHandler(() => 42);
  });

  it('hasFencing() narrows a Request to a FencedRequest', () => {
    const check = (req: Request): void => {
      if (hasFencing(req)) {
        expectTypeOf(req).toExtend<FencedRequest>();
        expectTypeOf(req.fencing.token).toEqualTypeOf<FencingToken>();
      } else {
        expectTypeOf(req.fencing).toEqualTypeOf<FencingContext | undefined>();
      }
    };
    void check;
  });
});
