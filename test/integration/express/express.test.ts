// fencing() behind a real Express app (each supported major: see
// express-variants.ts) on a real HTTP server (port 0).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { express } from './variants.js';
import { describe, expect, it } from 'vitest';
import { fencing, MemoryFenceStore, type FencingOptions } from '../../../adapters/express/index.js';
import { post, send, serve, servedDuring, SpyStore, type Answer } from './helpers.js';
import { deferred, type Deferred } from '../../helpers/wait.js';

const H = 'fencing-token';

/**
 * An app whose handler records when it starts and, for tokens that have a
 * gate, waits for the test to open it before answering.
 */
function gatedApp(options: Omit<FencingOptions<undefined>, 'resource'> & { resource?: FencingOptions<undefined>['resource'] }) {
  const started: string[] = [];
  const entered = new Map<string, Deferred>();
  const gates = new Map<string, Deferred>();
  const app = express();
  const entry = (key: string): Deferred => {
    let d = entered.get(key);
    if (d === undefined) entered.set(key, (d = deferred()));
    return d;
  };
  app.post('/r/:id', fencing({ resource: (req) => `doc:${String(req.params['id'])}`, ...options }), async (req, res) => {
    const key = req.get('x-key') ?? String(req.fencing?.token);
    started.push(key);
    entry(key).resolve();
    await gates.get(key)?.promise;
    const f = req.fencing!;
    res.json({
      resource: f.resource,
      token: f.token.toString(),
      previous: f.previous === null ? null : f.previous.toString(),
      transaction: f.transaction === undefined ? 'undefined' : 'set',
      aborted: f.signal.aborted,
    });
  });
  const gate = (key: string): Deferred => {
    const d = deferred();
    gates.set(key, d);
    return d;
  };
  return {
    app,
    started,
    entered: (key: string) => entry(key).promise,
    gate,
    /** POST `token` to `path` behind a gate: once its handler has started, waiting on the gate. */
    async enter(port: number, path: string, token: string): Promise<{ gate: Deferred; answer: Promise<Answer> }> {
      const opened = gate(token);
      const answer = post(port, path, { [H]: token });
      await entry(token).promise;
      return { gate: opened, answer };
    },
  };
}

/** A gated app of its own over a SpyStore, served for the length of `body`. */
async function withSpiedApp(body: (r: ReturnType<typeof gatedApp>, spy: SpyStore<undefined>, port: number) => Promise<void>): Promise<void> {
  const spy = new SpyStore(new MemoryFenceStore());
  const r = gatedApp({ store: spy });
  const s = await serve(r.app);
  try {
    await body(r, spy, s.port);
  } finally {
    await s.close();
  }
}

describe('fencing() with MemoryFenceStore', () => {
  const store = new MemoryFenceStore();
  const t = gatedApp({ store });
  const served = servedDuring(t.app);

  it('admits a first token, then equal and larger ones, and sets req.fencing', async () => {
    expect(await store.current('doc:a')).toBeNull();
    const first = await post(served.port, '/r/a', { [H]: '34' });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ resource: 'doc:a', token: '34', previous: null, transaction: 'undefined', aborted: false });
    expect(await store.current('doc:a')).toBe(34n);

    const equal = await post(served.port, '/r/a', { [H]: '34' });
    expect(equal.status).toBe(200);
    expect(equal.body).toMatchObject({ token: '34', previous: '34' });

    const larger = await post(served.port, '/r/a', { [H]: '9223372036854775807' });
    expect(larger.status).toBe(200);
    expect(larger.body).toMatchObject({ token: '9223372036854775807', previous: '34' });
    expect(await store.current('doc:a')).toBe(9223372036854775807n);
  });

  it('refuses a stale token with 409 problem+json carrying resource, presented and current, and changes nothing', async () => {
    expect((await post(served.port, '/r/b', { [H]: '35' })).status).toBe(200);
    // The handler records the x-key of every request it runs: the stale one must not be among them.
    const stale = await post(served.port, '/r/b', { [H]: '34', 'x-key': 'stale-34-b' });
    expect(t.started).not.toContain('stale-34-b');
    expect(stale.status).toBe(409);
    expect(stale.contentType).toBe('application/problem+json');
    expect(stale.body).toEqual({
      type: 'about:blank',
      title: 'Conflict',
      status: 409,
      detail: expect.any(String),
      code: 'STALE_TOKEN',
      resource: 'doc:b',
      presented: '34',
      current: '35',
    });
    expect(await store.current('doc:b')).toBe(35n);
  });

  it('keeps resources apart', async () => {
    expect((await post(served.port, '/r/c1', { [H]: '100' })).status).toBe(200);
    expect((await post(served.port, '/r/c2', { [H]: '5' })).status).toBe(200);
    expect(await store.current('doc:c1')).toBe(100n);
    expect(await store.current('doc:c2')).toBe(5n);
  });

  it('answers 428 without a token, 400 for a malformed or repeated one, and moves nothing', async () => {
    expect((await post(served.port, '/r/d', { [H]: '7' })).status).toBe(200);
    const missing = await post(served.port, '/r/d');
    expect(missing.status).toBe(428);
    expect(missing.contentType).toBe('application/problem+json');
    expect(missing.body).toMatchObject({ type: 'about:blank', title: 'Precondition Required', status: 428, code: 'MISSING_TOKEN' });
    for (const bad of ['', '0', '-8', '+8', '08', '0x10', '1e3', '8.0', '8 8', '9223372036854775808', '\u00b2']) {
      const answer = await post(served.port, '/r/d', { [H]: bad });
      expect({ bad, status: answer.status }).toEqual({ bad, status: 400 });
      expect(answer.body).toMatchObject({ status: 400, code: 'INVALID_TOKEN' });
    }
    const repeated = await post(served.port, '/r/d', { [H]: ['8', '8'] });
    expect(repeated.status).toBe(400);
    expect(repeated.body).toMatchObject({ status: 400, code: 'REPEATED_TOKEN' });
    expect(await store.current('doc:d')).toBe(7n);
  });

  it('the race: 35 waits until 34 has answered, and a 34 arriving after 35 was admitted gets 409', async () => {
    await withSpiedApp(async (r, spy, port) => {
      const { gate: gate34, answer: first } = await r.enter(port, '/r/x', '34');

      const gate35 = r.gate('35');
      const second = post(port, '/r/x', { [H]: '35' });
      await spy.until((calls) => calls.some((c) => c.token === 35n));
      // 35 has reached the store and is waiting there: its handler has not
      // started while 34's is in flight.
      await new Promise((resolve) => setImmediate(resolve));
      expect(r.started).toEqual(['34']);
      expect(spy.calls.find((c) => c.token === 35n)?.outcome).toBe('pending');

      gate34.resolve();
      expect((await first).status).toBe(200);
      await r.entered('35');
      expect(r.started).toEqual(['34', '35']);

      // 34 again, while 35 (admitted, not yet answered) holds the fence.
      const late = post(port, '/r/x', { [H]: '34', 'x-key': 'late-34' });
      await spy.until((calls) => calls.filter((c) => c.token === 34n).length === 2);
      gate35.resolve();
      expect((await second).status).toBe(200);
      const refused = await late;
      expect(refused.status).toBe(409);
      expect(refused.body).toMatchObject({ presented: '34', current: '35' });
      expect(r.started).toEqual(['34', '35']);
      expect(await spy.current('doc:x')).toBe(35n);
    });
  });

  it('a client that leaves while waiting stops waiting and leaves nothing held', async () => {
    await withSpiedApp(async (r, spy, port) => {
      const { gate, answer: holder } = await r.enter(port, '/r/w', '60');
      const waiter = send(port, '/r/w', { [H]: '61' });
      waiter.answer.catch(() => undefined);
      await spy.until((calls) => calls.some((c) => c.token === 61n));
      waiter.destroy();
      await spy.until((calls) => calls.find((c) => c.token === 61n)?.outcome === 'refused');
      gate.resolve();
      expect((await holder).status).toBe(200);
      expect(await spy.current('doc:w')).toBe(60n);
      // Nothing stuck: the next request is admitted, and 61 never ran.
      expect((await post(port, '/r/w', { [H]: '60', 'x-key': 'after' })).status).toBe(200);
      expect(r.started).toEqual(['60', 'after']);
    });
  });
});

describe('settling: commit when the response finished below 500, abort otherwise', () => {
  const store = new MemoryFenceStore();
  const app = express();
  const handlerEntered = deferred();
  const handlerSignal = deferred<AbortSignal>();
  const release = deferred();
  const fence = fencing({ store, resource: (req) => `doc:${String(req.params['id'])}` });
  app.post('/throw/:id', fence, () => {
    throw new Error('handler crashed');
  });
  app.post('/next-err/:id', fence, (_req: Request, _res: Response, next: NextFunction) => {
    next(new Error('handed to the error handler'));
  });
  app.post('/status/:id/:code', fence, (req, res) => {
    res.status(Number(req.params['code'])).json({ ok: false });
  });
  app.post('/ok/:id', fence, (_req, res) => {
    res.json({ ok: true });
  });
  app.post('/hang/:id', fence, async (req, res) => {
    handlerSignal.resolve(req.fencing!.signal);
    handlerEntered.resolve();
    await release.promise;
    res.json({ late: true });
  });
  // Express's default error handler answers 500 without printing in tests.
  app.use((_error: unknown, _req: Request, res: Response, _next: NextFunction) => {
    res.status(500).json({ crashed: true });
  });
  const served = servedDuring(app);

  // The fence keeps an admitted token even when its admission aborts: the
  // handler may have written somewhere before it failed (regression, found
  // by the fault checker: a smaller token was admitted after such a write).
  it('a handler that throws (500): admission aborted, the fence keeps its token, next request proceeds', async () => {
    expect((await post(served.port, '/ok/t', { [H]: '10' })).status).toBe(200);
    expect((await post(served.port, '/throw/t', { [H]: '11' })).status).toBe(500);
    expect(await store.current('doc:t')).toBe(11n);
    expect((await post(served.port, '/ok/t', { [H]: '10' })).status).toBe(409);
    expect((await post(served.port, '/ok/t', { [H]: '11' })).status).toBe(200);
  });

  it('next(err): the admission still settles (aborted), the fence not freed late', async () => {
    expect((await post(served.port, '/next-err/n', { [H]: '12' })).status).toBe(500);
    expect(await store.current('doc:n')).toBe(12n);
    expect((await post(served.port, '/ok/n', { [H]: '12' })).status).toBe(200);
    expect((await post(served.port, '/ok/n', { [H]: '3' })).status).toBe(409);
  });

  it('a 4xx from the handler commits, a 503 aborts; both keep the admitted token', async () => {
    expect((await post(served.port, '/status/s/404', { [H]: '20' })).status).toBe(404);
    expect(await store.current('doc:s')).toBe(20n);
    expect((await post(served.port, '/status/s/503', { [H]: '21' })).status).toBe(503);
    expect(await store.current('doc:s')).toBe(21n);
    expect((await post(served.port, '/ok/s', { [H]: '20' })).status).toBe(409);
  });

  it('a client that disconnects mid-handler: aborted, req.fencing.signal fires, the next request proceeds', async () => {
    expect((await post(served.port, '/ok/h', { [H]: '30' })).status).toBe(200);
    const gone = send(served.port, '/hang/h', { [H]: '31' });
    gone.answer.catch(() => undefined);
    await handlerEntered.promise;
    const signal = await handlerSignal.promise;
    gone.destroy();
    if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    // The abandoned handler may still write with 31: 30 must not pass after it.
    expect(await store.current('doc:h')).toBe(31n);
    expect((await post(served.port, '/ok/h', { [H]: '30' })).status).toBe(409);
    // Not stuck behind the abandoned handler, which is still running.
    expect((await post(served.port, '/ok/h', { [H]: '31' })).status).toBe(200);
    expect(await store.current('doc:h')).toBe(31n);
    release.resolve();
  });
});

describe('verify', () => {
  const store = new MemoryFenceStore();
  const seen: [bigint, string, string][] = [];
  const verdicts = new Map<bigint, () => unknown>([
    [1n, () => true],
    [2n, () => false],
    [3n, () => Promise.resolve(true)],
    [4n, () => Promise.resolve(false)],
    [5n, () => { throw new Error('lock service down'); }],
    [6n, () => Promise.reject(new Error('lock service down'))],
    [7n, () => 'yes'],
  ]);
  const app = express();
  app.post(
    '/v',
    fencing({
      store,
      resource: 'v',
      verify: (token, resource, req) => {
        seen.push([token, resource, req.path]);
        return (verdicts.get(token) ?? (() => false))() as boolean | Promise<boolean>;
      },
    }),
    (_req, res) => {
      res.json({ ok: true });
    },
  );
  const served = servedDuring(app);

  it('runs with (token, resource, req) and admits only on true', async () => {
    expect((await post(served.port, '/v', { [H]: '1' })).status).toBe(200);
    expect(seen).toEqual([[1n, 'v', '/v']]);
    expect((await post(served.port, '/v', { [H]: '3' })).status).toBe(200);
    expect(await store.current('v')).toBe(3n);
  });

  it('a refusing verify: 403 and the fence does not move', async () => {
    for (const token of ['2', '4', '7', '9000']) {
      const answer = await post(served.port, '/v', { [H]: token });
      expect(answer.status).toBe(403);
      expect(answer.contentType).toBe('application/problem+json');
      expect(answer.body).toMatchObject({ type: 'about:blank', title: 'Forbidden', status: 403, code: 'TOKEN_REFUSED' });
    }
    expect(await store.current('v')).toBe(3n);
  });

  it('a verify that throws or rejects: 503 (the lock service, not the client), fence unchanged', async () => {
    for (const token of ['5', '6']) {
      const answer = await post(served.port, '/v', { [H]: token });
      expect(answer.status).toBe(503);
      expect(answer.body).toMatchObject({ status: 503, code: 'VERIFY_UNAVAILABLE' });
    }
    expect(await store.current('v')).toBe(3n);
  });

  it('is not consulted for a missing or malformed token', async () => {
    const before = seen.length;
    expect((await post(served.port, '/v')).status).toBe(428);
    expect((await post(served.port, '/v', { [H]: 'x' })).status).toBe(400);
    expect(seen.length).toBe(before);
  });
});

describe('the resource function', () => {
  const store = new MemoryFenceStore();
  const app = express();
  app.post(
    '/res/:kind',
    fencing({
      store,
      resource: (req) => {
        switch (req.params['kind']) {
          case 'unknown':
            throw Object.assign(new Error('no such document'), { status: 404 });
          case 'bug':
            throw new Error('application bug');
          case 'empty':
            return '';
          case 'number':
            return 42 as unknown as string;
          default:
            return String(req.params['kind']);
        }
      },
    }),
    (_req, res) => {
      res.json({ ok: true });
    },
  );
  const served = servedDuring(app);

  it('a thrown 4xx status is answered as that status', async () => {
    const answer = await post(served.port, '/res/unknown', { [H]: '1' });
    expect(answer.status).toBe(404);
    expect(answer.body).toMatchObject({ status: 404, code: 'RESOURCE_REFUSED', detail: 'no such document' });
  });

  it('any other throw, or no resource name, is the server bug it is: 500 problem+json', async () => {
    for (const kind of ['bug', 'empty', 'number']) {
      const answer = await post(served.port, `/res/${kind}`, { [H]: '1' });
      expect(answer.status).toBe(500);
      expect(answer.contentType).toBe('application/problem+json');
      expect(answer.body).toMatchObject({ status: 500, code: 'RESOURCE_UNRESOLVED' });
    }
    expect((await post(served.port, '/res/fine', { [H]: '1' })).status).toBe(200);
  });
});

describe('without Express', () => {
  it('works on a bare node:http server (only Node req/res features)', async () => {
    const store = new MemoryFenceStore();
    const fence = fencing({ store, resource: 'bare' });
    const s = await serve((req: IncomingMessage, res: ServerResponse) => {
      fence(req as Request, res as Response, () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ token: String((req as Request).fencing?.token) }));
      });
    });
    try {
      expect(await post(s.port, '/', { [H]: '8' })).toMatchObject({ status: 200, body: { token: '8' } });
      expect((await post(s.port, '/', { [H]: '7' })).status).toBe(409);
      expect((await post(s.port, '/', { [H]: ['8', '9'] })).status).toBe(400);
      expect(await store.current('bare')).toBe(8n);
    } finally {
      await s.close();
    }
  });
});
