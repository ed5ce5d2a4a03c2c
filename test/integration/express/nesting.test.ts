// fencing() more than once on one request. The same store and resource twice
// (app-level and route-level) must pass through the first admission instead
// of waiting on the request's own fence; two resources nested in opposite
// orders by two requests must be refused (503 FENCE_DEADLOCK) instead of
// waiting for each other. Each hang this guards against is detected, not
// waited out: the tests race the answer against the store seeing the wait.
import type { RequestHandler } from 'express';
import { express } from './variants.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencing, MemoryFenceStore } from '../../../adapters/express/index.js';
import { migrate, PostgresFenceStore } from '../../../adapters/postgres/index.js';
import { FenceReleasedError, type FenceStore } from '../../../src/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { post, send, serve, SpyStore, type Answer, type Served } from './helpers.js';
import { deferred, type Deferred, within } from '../../helpers/wait.js';

const H = 'fencing-token';
const SLACK_MS = 15_000;

/**
 * The request's answer, or 'waited on itself' as soon as the store sees a
 * second admit() for the resource while the first is still held (the
 * self-deadlock: that admit would never return).
 */
function answerOrSelfWait(spy: SpyStore<unknown>, answer: Promise<Answer>, resource: string): Promise<Answer | 'waited on itself'> {
  answer.catch(() => undefined); // a request that lost the race fails when the server closes
  const selfWait = spy
    .until((calls) => calls.filter((c) => c.resource === resource && c.settled === undefined).length >= 2)
    .then(() => 'waited on itself' as const);
  return Promise.race([answer, selfWait]);
}

function sameResourceTwice(store: FenceStore<unknown>, resourceOf: (id: string) => string) {
  const app = express();
  const seen: { resource: string; token: string }[] = [];
  const verified: string[] = [];
  app.use('/api', fencing({ store, resource: (req) => resourceOf(req.path.split('/')[2] ?? '') }));
  app.post(
    '/api/docs/:id',
    fencing({
      store,
      resource: (req) => resourceOf(String(req.params['id'])),
      verify: (token) => {
        verified.push(String(token));
        return token !== 13n;
      },
    }),
    (req, res) => {
      seen.push({ resource: req.fencing!.resource, token: String(req.fencing!.token) });
      res.json({ token: String(req.fencing!.token), previous: req.fencing!.previous === null ? null : String(req.fencing!.previous) });
    },
  );
  // The same resource again, its token from another header.
  app.post('/other/:id', fencing({ store, resource: (req) => resourceOf(String(req.params['id'])) }), fencing({ store, resource: (req) => resourceOf(String(req.params['id'])), header: 'x-other-token' }), (_req, res) => {
    res.json({ ok: true });
  });
  return { app, seen, verified };
}

describe.each([
  { flavor: 'MemoryFenceStore' },
  { flavor: 'PostgresFenceStore' },
])('fencing() twice on one request, same store and resource ($flavor)', ({ flavor }) => {
  const databaseUrl = testServers().databaseUrl;
  const schema = uniqueId('fk_nesting');
  let pool: pg.Pool | undefined;
  let spy: SpyStore<unknown>;
  let t: ReturnType<typeof sameResourceTwice>;
  let served: Served;
  const doc = uniqueId('doc');

  beforeAll(async () => {
    let inner: FenceStore<unknown> = new MemoryFenceStore();
    if (flavor === 'PostgresFenceStore') {
      pool = new pg.Pool({ connectionString: databaseUrl, max: 4, options: `-c search_path=${schema}` });
      await pool.query(`CREATE SCHEMA ${schema}`);
      await migrate(pool);
      inner = new PostgresFenceStore(pool);
    }
    spy = new SpyStore(inner);
    t = sameResourceTwice(spy, (id) => `${doc}:${id}`);
    served = await serve(t.app);
  });

  afterAll(async () => {
    await served?.close();
    if (pool !== undefined) {
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pool.end();
    }
  });

  it('the second fencing() passes through the first admission: one admit, the handler runs, the admission commits', async () => {
    const calls = spy.calls.length;
    const answer = await within(answerOrSelfWait(spy, post(served.port, '/api/docs/a', { [H]: '12' }), `${doc}:a`), SLACK_MS, 'the answer');
    expect(answer).toMatchObject({ status: 200, body: { token: '12', previous: null } });
    expect(t.seen).toEqual([{ resource: `${doc}:a`, token: '12' }]);
    await within(spy.until((all) => all.slice(calls).every((c) => c.done)), SLACK_MS, 'the admission settled');
    expect(spy.calls.slice(calls).map((c) => ({ resource: c.resource, token: c.token, outcome: c.outcome, settled: c.settled }))).toEqual([
      { resource: `${doc}:a`, token: 12n, outcome: 'admitted', settled: 'commit' },
    ]);
    expect(await spy.current(`${doc}:a`)).toBe(12n);
    // The inner fencing()'s own verify was consulted.
    expect(t.verified).toEqual(['12']);
  });

  it("the second fencing()'s verify still decides: refused, 403, and the first admission settles (committed: nothing was written)", async () => {
    const calls = spy.calls.length;
    const answer = await within(answerOrSelfWait(spy, post(served.port, '/api/docs/b', { [H]: '13' }), `${doc}:b`), SLACK_MS, 'the answer');
    expect(answer).toMatchObject({ status: 403, body: { code: 'TOKEN_REFUSED' } });
    await within(spy.until((all) => all.slice(calls).every((c) => c.done)), SLACK_MS, 'the admission settled');
    expect(spy.calls.slice(calls)).toMatchObject([{ resource: `${doc}:b`, token: 13n, settled: 'commit' }]);
  });

  it('a different token for the same resource in the same request (another header): 400 CONFLICTING_TOKEN, no second admit', async () => {
    const calls = spy.calls.length;
    const answer = await within(
      answerOrSelfWait(spy, post(served.port, '/other/c', { [H]: '14', 'x-other-token': '15' }), `${doc}:c`),
      SLACK_MS,
      'the answer',
    );
    expect(answer).toMatchObject({ status: 400, body: { code: 'CONFLICTING_TOKEN' } });
    const same = await within(answerOrSelfWait(spy, post(served.port, '/other/c', { [H]: '14', 'x-other-token': '14' }), `${doc}:c`), SLACK_MS, 'the answer');
    expect(same).toMatchObject({ status: 200 });
    await within(spy.until((all) => all.slice(calls).every((c) => c.done)), SLACK_MS, 'the admissions settled');
    expect(spy.calls.slice(calls).map((c) => c.token)).toEqual([14n, 14n]);
    expect(await spy.current(`${doc}:c`)).toBe(14n);
  });
});

describe('fencing() for two resources in one request (MemoryFenceStore)', () => {
  const spy = new SpyStore(new MemoryFenceStore());
  /** Gates between the two fencing() of a request, by x-key. */
  const between = new Map<string, { reached: Deferred; go: Deferred }>();
  const gate = (key: string) => {
    let g = between.get(key);
    if (g === undefined) between.set(key, (g = { reached: deferred(), go: deferred() }));
    return g;
  };
  const pause: RequestHandler = (req, _res, next) => {
    const key = req.get('x-key');
    if (key === undefined) return next();
    const g = gate(key);
    g.reached.resolve();
    void g.go.promise.then(() => next());
  };
  const handlerSignals = new Map<string, AbortSignal>();
  const app = express();
  const fenceA = fencing({ store: spy, resource: 'A' });
  const fenceB = fencing({ store: spy, resource: 'B' });
  const ok: RequestHandler = (req, res) => {
    res.json({ resource: req.fencing!.resource, token: String(req.fencing!.token) });
  };
  app.post('/ab', fenceA, pause, fenceB, ok);
  app.post('/ba', fenceB, pause, fenceA, ok);
  // The outer fence expires while the handler, behind the inner one, hangs.
  app.post('/expiring', fencing({ store: spy, resource: 'E1', maxHoldMs: 300 }), fencing({ store: spy, resource: 'E2' }), async (req) => {
    handlerSignals.set(req.get('x-key') ?? '', req.fencing!.signal);
    await new Promise(() => undefined);
  });
  app.post('/e2', fencing({ store: spy, resource: 'E2' }), ok);
  let served: Served;
  beforeAll(async () => {
    served = await serve(app);
  });
  afterAll(() => served.close());

  it('nested in one order: both admitted, req.fencing is the inner one, both commit', async () => {
    const calls = spy.calls.length;
    const answer = await within(post(served.port, '/ab', { [H]: '5' }), SLACK_MS, 'the answer');
    expect(answer).toMatchObject({ status: 200, body: { resource: 'B', token: '5' } });
    await within(spy.until((all) => all.slice(calls).every((c) => c.done)), SLACK_MS, 'the admissions settled');
    expect(spy.calls.slice(calls).map((c) => [c.resource, c.settled])).toEqual([['A', 'commit'], ['B', 'commit']]);
  });

  it('two requests nesting A and B in opposite orders: the one that would close the cycle gets 503 FENCE_DEADLOCK without waiting, and the other proceeds', async () => {
    const calls = spy.calls.length;
    const ab = send(served.port, '/ab', { [H]: '6', 'x-key': 'ab' });
    ab.answer.catch(() => undefined); // awaited below unless an assertion fails first
    await gate('ab').reached.promise; // holds A
    const ba = send(served.port, '/ba', { [H]: '6', 'x-key': 'ba' });
    await gate('ba').reached.promise; // holds B
    gate('ab').go.resolve();
    await spy.until((all) => all.slice(calls).some((c) => c.resource === 'B' && c.outcome === 'pending')); // /ab waits for B
    gate('ba').go.resolve();

    // Today's bug would have /ba wait for A for good: race its answer against the store seeing that wait.
    const baWaitsForA = spy
      .until((all) => all.slice(calls + 1).some((c) => c.resource === 'A'))
      .then(() => 'waited for A' as const);
    const refused = await within(Promise.race([ba.answer, baWaitsForA]), SLACK_MS, "/ba's answer");
    expect(refused).toMatchObject({ status: 503, body: { code: 'FENCE_DEADLOCK' } });
    const done = await within(ab.answer, SLACK_MS, "/ab's answer once /ba let B go");
    expect(done).toMatchObject({ status: 200, body: { resource: 'B' } });
    await within(spy.until((all) => all.slice(calls).every((c) => c.done)), SLACK_MS, 'the admissions settled');
    expect(spy.calls.slice(calls).map((c) => [c.resource, c.outcome, c.settled])).toEqual([
      ['A', 'admitted', 'commit'], // /ab
      ['B', 'admitted', 'abort'], // /ba, answered 503
      ['B', 'admitted', 'commit'], // /ab, once /ba freed B
    ]);
  });

  it("the outer fence's maxHoldMs aborts the inner admission too, and the handler's signal (the inner one) with it", async () => {
    const calls = spy.calls.length;
    const answer = await within(post(served.port, '/expiring', { [H]: '7', 'x-key': 'e' }), SLACK_MS, 'the 503 of the outer maxHoldMs');
    expect(answer).toMatchObject({ status: 503, body: { code: 'FENCE_HOLD_EXPIRED' } });
    const signal = handlerSignals.get('e')!;
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(FenceReleasedError);
    expect(signal.reason).toMatchObject({ reason: 'hold_expired', resource: 'E2' });
    expect(spy.calls.slice(calls).map((c) => [c.resource, c.settled])).toEqual([['E1', 'abort'], ['E2', 'abort']]);
    // Both fences are free while the handler still hangs.
    expect(await within(post(served.port, '/e2', { [H]: '7' }), SLACK_MS, 'a request for E2')).toMatchObject({ status: 200 });
  });
});
