// The fencing plugin's maxHoldMs on Fastify 5 and 4, what the option
// promises (as test/integration/express/hold.test.ts shows for Express): a
// handler that holds its resource's fence past maxHoldMs from admission has
// its admission aborted (the fence keeps the token), request.fencing.signal
// aborts with FenceReleasedError('hold_expired'), the client is answered 503
// FENCE_HOLD_EXPIRED (none of the handler's headers, connection: close) if
// nothing was sent yet or has the connection cut if part of the answer is
// out, and the next request for the resource is admitted while the stuck
// handler still runs; a handler that ignores its signal and answers late
// reaches no client and leaves the next holder alone.
import { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryFenceStore, fencing } from '../../../adapters/fastify/index.js';
import { FenceReleasedError } from '../../../src/index.js';
import { post, send, SpyStore } from '../express/helpers.js';
import { deferred, within, type Deferred } from '../../helpers/wait.js';

const H = 'fencing-token';
/** maxHoldMs of the apps below: short, so that the tests reach it. */
const HOLD_MS = 300;
/** How long a test waits for what maxHoldMs must bring about before calling it a hang (a loaded 2-core machine). */
const SLACK_MS = 15_000;

interface Stuck {
  readonly signal: AbortSignal;
  readonly release: Deferred;
  returned: boolean;
}

function expectHoldExpired(reason: unknown, resource: string, token: bigint): void {
  expect(reason).toBeInstanceOf(FenceReleasedError);
  expect(reason).toMatchObject({ code: 'FENCE_RELEASED', reason: 'hold_expired', resource, token });
}

describe.each([
  ['Fastify 5', () => import('fastify')],
  ['Fastify 4', () => import('fastify4')],
] as const)('%s: fencing plugin with maxHoldMs', (_name, load) => {
  const spy = new SpyStore(new MemoryFenceStore());
  const stuck = new Map<string, Deferred<Stuck>>();
  const entry = (key: string): Deferred<Stuck> => {
    let d = stuck.get(key);
    if (d === undefined) stuck.set(key, (d = deferred<Stuck>()));
    return d;
  };
  const hang = async (key: string, signal: AbortSignal): Promise<Stuck> => {
    const s: Stuck = { signal, release: deferred(), returned: false };
    entry(key).resolve(s);
    await s.release.promise;
    s.returned = true;
    return s;
  };
  /** What Fastify's error handler saw (a late reply is not one of them). */
  const errors: unknown[] = [];
  let app: FastifyInstance;
  let port: number;

  beforeAll(async () => {
    const Fastify = (await load()).default as unknown as (options?: object) => FastifyInstance;
    app = Fastify();
    app.setErrorHandler(async (error, _request, reply) => {
      errors.push(error);
      return reply.code(500).send({ crashed: true });
    });
    await app.register(async (scope) => {
      await scope.register(fencing, { store: spy, resource: (request) => `doc:${(request.params as { id: string }).id}`, maxHoldMs: HOLD_MS });
      scope.post('/ok/:id', async (request) => {
        const f = request.fencing!;
        return { token: String(f.token), previous: f.previous === null ? null : String(f.previous) };
      });
      scope.post('/hang/:id', async (request, reply) => {
        reply.header('content-encoding', 'gzip');
        const signal = request.fencing!.signal;
        await hang(String(request.headers['x-key']), signal);
        // What a handler does once its signal has aborted: stop, and answer nothing more.
        if (signal.aborted) return reply;
        return { late: true };
      });
      scope.post('/stream/:id', async (request, reply) => {
        const body = new Readable({ read() {} });
        body.push('part of an answer');
        void hang(String(request.headers['x-key']), request.fencing!.signal);
        return reply.type('text/plain').send(body);
      });
      // Ignores its signal and answers once released, whatever happened meanwhile.
      scope.post('/careless/:id', async (request) => {
        await hang(String(request.headers['x-key']), request.fencing!.signal);
        return { late: true };
      });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as { port: number }).port;
  });
  afterAll(async () => {
    for (const d of stuck.values()) void d.promise.then((s) => s.release.resolve());
    await app.close();
  });

  it('a handler that never answers: 503 FENCE_HOLD_EXPIRED, the connection closes, the admission is aborted, the signal aborts, the fence keeps the token and the next request is admitted while the handler still hangs', async () => {
    expect((await post(port, '/ok/a', { [H]: '10' })).status).toBe(200);
    const hung = send(port, '/hang/a', { [H]: '11', 'x-key': 'a-11' });
    const handler = await entry('a-11').promise;

    const answer = await within(hung.answer, HOLD_MS + SLACK_MS, 'the 503 of a handler past maxHoldMs');
    expect(answer.status).toBe(503);
    expect(answer.contentType).toBe('application/problem+json');
    expect(answer.headers['cache-control']).toBe('no-store');
    expect(answer.body).toEqual({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: expect.any(String), code: 'FENCE_HOLD_EXPIRED' });
    // The header the handler set before it hung does not describe this answer.
    expect(answer.headers['content-encoding']).toBeUndefined();
    expect(answer.headers.connection).toBe('close');
    await within(hung.closed, SLACK_MS, 'the server closing the connection after the 503');

    expect(handler.signal.aborted).toBe(true);
    expectHoldExpired(handler.signal.reason, 'doc:a', 11n);
    expect(spy.calls.find((c) => c.resource === 'doc:a' && c.token === 11n)).toMatchObject({ outcome: 'admitted', settled: 'abort' });
    expect(await spy.current('doc:a')).toBe(11n);

    // The handler is still running, and the resource is free again.
    const next = await within(post(port, '/ok/a', { [H]: '11' }), SLACK_MS, 'the next request for doc:a');
    expect(next).toMatchObject({ status: 200, body: { token: '11', previous: '11' } });
    expect(handler.returned).toBe(false);
    expect((await post(port, '/ok/a', { [H]: '10' })).status).toBe(409);
    // Woken, it sees its signal aborted and stops: nothing is written twice, nothing fails.
    handler.release.resolve();
    await new Promise((resolve) => setImmediate(resolve));
    expect(handler.returned).toBe(true);
    expect(errors).toEqual([]);
  });

  it('a handler that sent part of its response and hangs: the connection is cut (a broken response, never a complete-looking one), the admission aborted, the signal aborted', async () => {
    const streaming = send(port, '/stream/b', { [H]: '20', 'x-key': 'b-20' });
    const handler = await entry('b-20').promise;
    const outcome = await within(
      streaming.answer.then((answer) => ({ answered: answer }), (error: unknown) => ({ failed: error })),
      HOLD_MS + SLACK_MS,
      'the cut of a streaming handler past maxHoldMs',
    );
    expect(outcome).toMatchObject({ failed: { code: 'ECONNRESET' } });
    expectHoldExpired(handler.signal.reason, 'doc:b', 20n);
    expect(spy.calls.find((c) => c.resource === 'doc:b' && c.token === 20n)).toMatchObject({ settled: 'abort' });
    const next = await within(post(port, '/ok/b', { [H]: '20' }), SLACK_MS, 'the next request for doc:b');
    expect(next).toMatchObject({ status: 200, body: { previous: '20' } });
    expect(handler.returned).toBe(false);
    handler.release.resolve();
  });

  it('a handler that ignores its signal and answers late reaches no client, and leaves the next holder alone', async () => {
    const careless = send(port, '/careless/c', { [H]: '30', 'x-key': 'c-30' });
    const handler = await entry('c-30').promise;
    expect((await within(careless.answer, HOLD_MS + SLACK_MS, 'the 503')).status).toBe(503);
    const next = send(port, '/hang/c', { [H]: '31', 'x-key': 'c-31' });
    const second = await entry('c-31').promise;
    // The careless handler wakes while the next request holds the fence and
    // returns its late answer: Fastify drops it (the reply is sent already).
    handler.release.resolve();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(handler.returned).toBe(true);
    expect(second.signal.aborted).toBe(false);
    expect(spy.calls.find((c) => c.resource === 'doc:c' && c.token === 31n)).toMatchObject({ outcome: 'admitted', settled: undefined });
    second.release.resolve();
    expect(await next.answer).toMatchObject({ status: 200, body: { late: true } });
    await spy.until((calls) => calls.find((c) => c.resource === 'doc:c' && c.token === 31n)?.settled !== undefined);
    expect(spy.calls.find((c) => c.resource === 'doc:c' && c.token === 31n)).toMatchObject({ settled: 'commit' });
  });
});
