// fencing({ maxHoldMs }): a handler that never finishes its response does not
// hold its resource's fence for good. Past maxHoldMs from admission the
// admission is aborted (the fence keeps the token), req.fencing.signal aborts
// with FenceReleasedError('hold_expired'), the client is answered 503
// FENCE_HOLD_EXPIRED if nothing was sent yet, and the connection is closed;
// the next request for the resource is admitted while the stuck handler is
// still running. Real Express apps on real HTTP servers; the last block holds
// a PostgreSQL statement in flight on req.fencing.transaction.
import { express, forwardRejections } from './variants.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { fencing, MemoryFenceStore } from '../../../adapters/express/index.js';
import { migrate, PostgresFenceStore } from '../../../adapters/postgres/index.js';
import { FenceReleasedError, InvalidArgumentError, type FenceStore } from '../../../src/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { post, send, serve, SpyStore, type Served } from './helpers.js';
import { holdClock } from '../../../src/shared/http/hold-clock.js';
import { deferred, type Deferred, within } from '../../helpers/wait.js';

const H = 'fencing-token';
/** maxHoldMs of the apps below: short, so that the tests reach it. */
const HOLD_MS = 300;
/** How long a test waits for what maxHoldMs must bring about before calling it a hang (a loaded 2-core machine). */
const SLACK_MS = 15_000;

/** What a stuck handler saw, for the test to inspect. */
interface Stuck {
  readonly signal: AbortSignal;
  /** Resolve to let the handler return. */
  readonly release: Deferred;
  /** The handler has returned. */
  returned: boolean;
}

/**
 * An app whose routes (all behind one fencing()) answer at once (/ok), never
 * answer (/hang: sets a header the answer must not keep, then waits), or send
 * part of a response and then never finish it (/stream). Stuck handlers are
 * found by their x-key header.
 */
function holdApp(store: FenceStore<unknown>, maxHoldMs: number) {
  const stuck = new Map<string, Deferred<Stuck>>();
  const entry = (key: string): Deferred<Stuck> => {
    let d = stuck.get(key);
    if (d === undefined) stuck.set(key, (d = deferred<Stuck>()));
    return d;
  };
  const hang = async (key: string, signal: AbortSignal): Promise<void> => {
    const s: Stuck = { signal, release: deferred(), returned: false };
    entry(key).resolve(s);
    await s.release.promise;
    s.returned = true;
  };
  const app = express();
  const fence = fencing({ store, resource: (req) => `doc:${String(req.params['id'])}`, maxHoldMs });
  app.post('/ok/:id', fence, (req, res) => {
    const f = req.fencing!;
    res.json({ token: String(f.token), previous: f.previous === null ? null : String(f.previous) });
  });
  app.post('/hang/:id', fence, async (req, res) => {
    res.setHeader('content-encoding', 'gzip');
    const signal = req.fencing!.signal;
    await hang(req.get('x-key') ?? '', signal);
    // What a handler does once its signal has aborted: stop, and write nothing more.
    if (signal.aborted) return;
    res.json({ late: true });
  });
  app.post('/stream/:id', fence, async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('part of an answer');
    await hang(req.get('x-key') ?? '', req.fencing!.signal);
  });
  // Ignores its signal and answers once released, whatever happened meanwhile.
  app.post('/careless/:id', fence, forwardRejections(async (req, res) => {
    await hang(req.get('x-key') ?? '', req.fencing!.signal);
    res.json({ late: true });
  }));
  const errors: unknown[] = [];
  app.use((error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    errors.push(error);
    if (!res.headersSent) res.status(500).json({ crashed: true });
  });
  return { app, errors, stuck: (key: string) => entry(key).promise };
}

function expectHoldExpired(reason: unknown, resource: string, token: bigint): void {
  expect(reason).toBeInstanceOf(FenceReleasedError);
  expect(reason).toMatchObject({ code: 'FENCE_RELEASED', reason: 'hold_expired', resource, token });
}

describe('fencing({ maxHoldMs }) with MemoryFenceStore', () => {
  const spy = new SpyStore(new MemoryFenceStore());
  const t = holdApp(spy, HOLD_MS);
  let served: Served;
  const stuckHandlers: Stuck[] = [];
  beforeAll(async () => {
    served = await serve(t.app);
  });
  afterAll(async () => {
    for (const s of stuckHandlers) s.release.resolve();
    await served.close();
  });

  it('a handler that never answers: 503 FENCE_HOLD_EXPIRED, the connection closes, the admission is aborted, the signal aborts, the fence keeps the token and the next request is admitted while the handler still hangs', async () => {
    expect((await post(served.port, '/ok/a', { [H]: '10' })).status).toBe(200);
    const hung = send(served.port, '/hang/a', { [H]: '11', 'x-key': 'a-11' });
    const handler = await t.stuck('a-11');
    stuckHandlers.push(handler);

    const answer = await within(hung.answer, HOLD_MS + SLACK_MS, 'the 503 of a handler past maxHoldMs');
    expect(answer.status).toBe(503);
    expect(answer.contentType).toBe('application/problem+json');
    expect(answer.body).toEqual({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: expect.any(String), code: 'FENCE_HOLD_EXPIRED' });
    // The header the handler set before it hung does not describe this answer.
    expect(answer.headers['content-encoding']).toBeUndefined();
    expect(answer.headers.connection).toBe('close');
    await within(hung.closed, SLACK_MS, 'the server closing the connection after the 503');

    expect(handler.signal.aborted).toBe(true);
    expectHoldExpired(handler.signal.reason, 'doc:a', 11n);
    expect(spy.calls.find((c) => c.token === 11n)).toMatchObject({ outcome: 'admitted', settled: 'abort' });
    expect(await spy.current('doc:a')).toBe(11n);

    // The handler is still running, and the resource is free again.
    const next = await within(post(served.port, '/ok/a', { [H]: '11' }), SLACK_MS, 'the next request for doc:a');
    expect(next).toMatchObject({ status: 200, body: { token: '11', previous: '11' } });
    expect(handler.returned).toBe(false);
    expect((await post(served.port, '/ok/a', { [H]: '10' })).status).toBe(409);
  });

  it('a handler that sent part of its response and hangs: the connection is cut (a broken response, never a complete-looking one), the admission aborted, the signal aborted', async () => {
    const streaming = send(served.port, '/stream/b', { [H]: '20', 'x-key': 'b-20' });
    const handler = await t.stuck('b-20');
    stuckHandlers.push(handler);
    const outcome = await within(
      streaming.answer.then((answer) => ({ answered: answer }), (error: unknown) => ({ failed: error })),
      HOLD_MS + SLACK_MS,
      'the cut of a streaming handler past maxHoldMs',
    );
    expect(outcome).toMatchObject({ failed: { code: 'ECONNRESET' } });
    expectHoldExpired(handler.signal.reason, 'doc:b', 20n);
    expect(spy.calls.find((c) => c.token === 20n)).toMatchObject({ settled: 'abort' });
    const next = await within(post(served.port, '/ok/b', { [H]: '20' }), SLACK_MS, 'the next request for doc:b');
    expect(next).toMatchObject({ status: 200, body: { previous: '20' } });
    expect(handler.returned).toBe(false);
  });

  it('a handler that ignores its signal and answers late reaches no client, and leaves the next holder alone', async () => {
    const careless = send(served.port, '/careless/c', { [H]: '30', 'x-key': 'c-30' });
    const handler = await t.stuck('c-30');
    expect((await within(careless.answer, HOLD_MS + SLACK_MS, 'the 503')).status).toBe(503);
    const next = send(served.port, '/hang/c', { [H]: '31', 'x-key': 'c-31' });
    const second = await t.stuck('c-31');
    // The careless handler wakes while the next request holds the fence and
    // writes its late answer: Express refuses it (headers already sent).
    const errorsBefore = t.errors.length;
    handler.release.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    expect(handler.returned).toBe(true);
    expect(t.errors.slice(errorsBefore)).toMatchObject([{ code: 'ERR_HTTP_HEADERS_SENT' }]);
    expect(second.signal.aborted).toBe(false);
    expect(spy.calls.find((c) => c.token === 31n)).toMatchObject({ outcome: 'admitted', settled: undefined });
    second.release.resolve();
    expect(await next.answer).toMatchObject({ status: 200, body: { late: true } });
    expect(spy.calls.find((c) => c.token === 31n)).toMatchObject({ settled: 'commit' });
  });
});

describe('the maxHoldMs timer', () => {
  it('admissions share one unref\'d timer per maxHoldMs value (none per request), and each leaves the clock when its response finishes or its client leaves', async () => {
    // A value no other timer in this process uses, to pick fencing()'s timers out.
    const maxHoldMs = 43_210;
    const realSetTimeout = globalThis.setTimeout;
    const armed: NodeJS.Timeout[] = [];
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((callback: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      const timer = realSetTimeout(callback, ms, ...args);
      if (ms === maxHoldMs) armed.push(timer);
      return timer;
    }) as typeof setTimeout);
    const spy = new SpyStore(new MemoryFenceStore());
    const t = holdApp(spy, maxHoldMs);
    const s = await serve(t.app);
    const clock = holdClock(maxHoldMs);
    try {
      for (let i = 0; i < 5; i++) expect((await post(s.port, '/ok/t', { [H]: '40' })).status).toBe(200);
      expect(clock.held).toBe(0);
      // Refused: never admitted, never on the clock.
      expect((await post(s.port, '/ok/t', { [H]: '39' })).status).toBe(409);
      const gone = send(s.port, '/hang/t', { [H]: '40', 'x-key': 't-gone' });
      gone.answer.catch(() => undefined);
      const handler = await t.stuck('t-gone');
      expect(clock.held).toBe(1);
      gone.destroy();
      await spy.until((calls) => calls.filter((c) => c.settled !== undefined).length === 6);
      expect(handler.signal.reason).toMatchObject({ code: 'FENCE_RELEASED', reason: 'client_gone' });
      handler.release.resolve();
      expect(clock.held).toBe(0);

      // One timer for six admissions (it has not fired: 43 s), and it does not keep the process alive.
      expect(armed).toHaveLength(1);
      expect(armed[0]!.hasRef()).toBe(false);
    } finally {
      vi.restoreAllMocks();
      await s.close();
    }
  });

  it('maxHoldMs must be an integer number of ms a timer can hold', () => {
    const store = new MemoryFenceStore();
    for (const maxHoldMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, '1000' as unknown as number]) {
      expect(() => fencing({ store, resource: 'r', maxHoldMs }), String(maxHoldMs)).toThrow(InvalidArgumentError);
    }
    for (const maxHoldMs of [1, 30_000, 2 ** 31 - 1]) {
      expect(typeof fencing({ store, resource: 'r', maxHoldMs })).toBe('function');
    }
  });
});

// With PostgresFenceStore the stuck handler holds the fence row's
// transaction, and has a statement in flight on it: abort() must end that
// statement, roll back to the store's savepoint and commit the advance, so
// the row is free for the next request and the fence keeps the token.
describe('fencing({ maxHoldMs }) with PostgresFenceStore: a handler stuck in pg_sleep on req.fencing.transaction', () => {
  const databaseUrl = testServers().databaseUrl;
  const schema = uniqueId('fk_hold');
  const applicationName = uniqueId('fk_hold');
  const admin = new pg.Pool({ connectionString: databaseUrl, max: 2, options: `-c search_path=${schema}` });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4, application_name: applicationName, options: `-c search_path=${schema}` });
  // afterAll terminates this pool's backends, whatever state they are in: an
  // idle client's connection then fails, which the pool reports here.
  pool.on('error', () => undefined);
  const store = new SpyStore(new PostgresFenceStore(pool));
  const entered = deferred();
  const query: { issued: boolean; result: 'pending' | 'resolved' | 'rejected' } = { issued: false, result: 'pending' };
  const app = express();
  const fence = fencing({ store, resource: (req) => String(req.params['id']), maxHoldMs: 1000 });
  app.post('/stuck/:id', fence, async (req) => {
    const transaction = req.fencing!.transaction as pg.PoolClient;
    const sleeping = transaction.query('SELECT pg_sleep(120)');
    query.issued = true;
    entered.resolve();
    await sleeping.then(
      () => { query.result = 'resolved'; },
      () => { query.result = 'rejected'; },
    );
    // Never answers: the handler is stuck for as long as the statement runs.
  });
  app.post('/ok/:id', fence, (req, res) => {
    const f = req.fencing!;
    res.json({ token: String(f.token), previous: f.previous === null ? null : String(f.previous) });
  });
  let served: Served;

  beforeAll(async () => {
    await admin.query(`CREATE SCHEMA ${schema}`);
    await migrate(admin);
    served = await serve(app);
  });

  afterAll(async () => {
    await served?.close();
    // Whatever the store did, no backend of this test outlives it.
    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [applicationName]);
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  });

  it('answers 503, frees the fence row for the next request, and the fence keeps the token', async () => {
    const doc = uniqueId('stuck');
    expect((await post(served.port, `/ok/${doc}`, { [H]: '10' })).status).toBe(200);
    const stuck = send(served.port, `/stuck/${doc}`, { [H]: '11' });
    await entered.promise;

    const answer = await within(stuck.answer, 1000 + SLACK_MS, 'the 503 of a handler stuck in pg_sleep past maxHoldMs');
    expect(answer.status).toBe(503);
    expect(answer.body).toMatchObject({ code: 'FENCE_HOLD_EXPIRED' });
    // The scenario: when the hold expired, the handler's statement was in flight.
    expect(query.issued).toBe(true);
    expect(query.result).not.toBe('resolved');
    expect(store.calls.find((c) => c.token === 11n)).toMatchObject({ outcome: 'admitted', settled: 'abort' });

    // The row is free: the same holder's retry is admitted, and it finds the
    // stuck request's token kept as the mark.
    const next = await within(post(served.port, `/ok/${doc}`, { [H]: '11' }), SLACK_MS, 'the next request for the resource (the fence row still locked?)');
    expect(next).toMatchObject({ status: 200, body: { token: '11', previous: '11' } });
    const stale = await within(post(served.port, `/ok/${doc}`, { [H]: '10' }), SLACK_MS, 'a stale request');
    expect(stale).toMatchObject({ status: 409, body: { code: 'STALE_TOKEN', current: '11' } });
    expect(query.result).not.toBe('resolved');
  });
});
