// fencedHandler(): a handler for a route behind fencing(), on each supported
// Express major (express-variants.ts). Its failures reach the app's error
// handler on Express 4 too, where an async handler's rejection would
// otherwise be unhandled and the request would hang; a route that forgot
// fencing() answers 500 without running the handler.
import type { NextFunction, Request, Response } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencedHandler, fencing, hasFencing, MemoryFenceStore } from '../../../adapters/express/index.js';
import { post, serve, SpyStore, type Served } from './helpers.js';
import { EXPRESS_MAJOR, express } from './variants.js';
import { within } from '../../helpers/wait.js';

const H = 'fencing-token';

describe(`fencedHandler() on Express ${EXPRESS_MAJOR}`, () => {
  const spy = new SpyStore(new MemoryFenceStore());
  const ran: string[] = [];
  const failures: unknown[] = [];
  let served: Served;

  beforeAll(async () => {
    const app = express();
    const fence = fencing({ store: spy, resource: (req) => `doc:${String(req.params['id'])}` });
    app.post('/ok/:id', fence, fencedHandler(async (req, res) => {
      ran.push(`ok ${req.fencing.token}`);
      await new Promise((resolve) => setImmediate(resolve));
      res.json({ token: req.fencing.token.toString(), resource: req.fencing.resource });
    }));
    app.post('/rejects/:id', fence, fencedHandler(async (req) => {
      ran.push(`rejects ${req.fencing.token}`);
      await new Promise((resolve) => setImmediate(resolve));
      throw new Error(`the write for ${req.fencing.resource} failed`);
    }));
    app.post('/throws/:id', fence, fencedHandler((req) => {
      ran.push(`throws ${req.fencing.token}`);
      throw new Error('thrown at once');
    }));
    // A mistake in the app: no fencing() on this route.
    app.post('/unfenced/:id', fencedHandler((req, res) => {
      ran.push('unfenced');
      res.json({ token: req.fencing.token.toString() });
    }));
    // The guard, in a handler that runs with or without the middleware.
    app.post('/either/:id', (req, res) => {
      res.json({ fenced: hasFencing(req), token: hasFencing(req) ? req.fencing.token.toString() : null });
    });
    app.use((error: unknown, _req: Request, res: Response, _next: NextFunction) => {
      failures.push(error);
      res.status(500).json({ error: (error as { code?: string }).code ?? (error as Error).message });
    });
    served = await serve(app);
  });
  afterAll(() => served.close());

  it('runs the handler with req.fencing of its admission', async () => {
    expect(await post(served.port, '/ok/a', { [H]: '10' })).toMatchObject({ status: 200, body: { token: '10', resource: 'doc:a' } });
    expect(ran).toContain('ok 10');
  });

  it('an async handler that rejects reaches the error handler (500), and its admission is aborted, not committed', async () => {
    const answer = await within(post(served.port, '/rejects/b', { [H]: '20' }), 10_000, 'the answer to a handler that rejected');
    expect(answer).toMatchObject({ status: 500, body: { error: 'the write for doc:b failed' } });
    expect(ran).toContain('rejects 20');
    await spy.until((calls) => calls.some((c) => c.token === 20n && c.done));
    expect(spy.calls.find((c) => c.token === 20n)).toMatchObject({ outcome: 'admitted', settled: 'abort' });
  });

  it('a handler that throws at once reaches the error handler (500)', async () => {
    expect(await post(served.port, '/throws/c', { [H]: '30' })).toMatchObject({ status: 500, body: { error: 'thrown at once' } });
    expect(ran).toContain('throws 30');
  });

  it('on a route without fencing() the handler never runs and the app answers 500 INVALID_ARGUMENT', async () => {
    const before = failures.length;
    expect(await post(served.port, '/unfenced/d', { [H]: '40' })).toMatchObject({ status: 500, body: { error: 'INVALID_ARGUMENT' } });
    expect(ran).not.toContain('unfenced');
    expect(String((failures[before] as Error).message)).toMatch(/put fencing\(\) before this handler/);
  });

  it('hasFencing() is false on a request fencing() never saw', async () => {
    expect(await post(served.port, '/either/e', { [H]: '50' })).toMatchObject({ status: 200, body: { fenced: false, token: null } });
  });

  it('refuses a handler that is not a function', () => {
    expect(() => fencedHandler(undefined as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});
