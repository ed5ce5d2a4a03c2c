// fencekeeper/fastify on Fastify 5 and 4 (the devDependency alias
// fastify4), on a real socket: the answers, the plugin's encapsulation,
// request.fencing, serialization, a throwing handler, a client that leaves,
// and idempotency replays.
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { MemoryFenceStore, MemoryIdempotencyStore, fencing, idempotency, type FencingContext } from '../../../adapters/fastify/index.js';
import { FenceReleasedError } from '../../../src/index.js';
import { until, within } from '../../helpers/wait.js';

const tick = (ms = 10): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe.each([
  ['Fastify 5', () => import('fastify')],
  ['Fastify 4', () => import('fastify4')],
] as const)('%s', (_name, load) => {
  let app: FastifyInstance;
  let port: number;
  const store = new MemoryFenceStore();
  let inside = 0;
  let overlapped = false;
  let slowSignal: AbortSignal | undefined;
  let releaseSlow: (() => void) | undefined;
  let runs = 0;
  let releaseOrder: (() => void) | undefined;
  let lateRuns = 0;
  let lateResponse: { readonly closed: boolean } | undefined;
  let releaseLate: (() => void) | undefined;

  beforeAll(async () => {
    const Fastify = (await load()).default as unknown as (options?: object) => FastifyInstance;
    app = Fastify();
    app.get('/open', async (request) => ({ fenced: request.fencing !== undefined }));
    await app.register(async (scope) => {
      await scope.register(fencing, { store, resource: (request) => `fastify/${(request.params as { id: string }).id}` });
      scope.put('/doc/:id', async (request) => {
        expectTypeOf(request.fencing).toEqualTypeOf<FencingContext | undefined>();
        return { resource: request.fencing!.resource, token: String(request.fencing!.token) };
      });
      scope.put('/serial/:id', async () => {
        inside++;
        if (inside > 1) overlapped = true;
        await tick(30);
        inside--;
        return 'ok';
      });
      scope.put('/throw/:id', async () => {
        throw new Error('boom');
      });
      scope.put('/slow/:id', async (request) => {
        slowSignal = request.fencing!.signal;
        await new Promise<void>((resolve) => (releaseSlow = resolve));
        return 'late';
      });
    });
    // A context whose onRequest hook (an application's authentication, say) holds
    // a request marked x-gate until the test lets it go, before the guard is reached.
    await app.register(async (scope) => {
      scope.addHook('onRequest', async (request, reply) => {
        if (request.headers['x-gate'] === undefined) return;
        lateResponse = reply.raw;
        await new Promise<void>((resolve) => (releaseLate = resolve));
      });
      await scope.register(fencing, { store, resource: (request) => `fastify/${(request.params as { id: string }).id}`, maxHoldMs: 20_000 });
      scope.put('/late/:id', async () => {
        lateRuns++;
        return 'ran';
      });
    });
    // A sibling context: idempotency only (behind a fence, a retry of one resource waits for the first instead of 409).
    await app.register(async (orders) => {
      await orders.register(idempotency, { store: new MemoryIdempotencyStore(), maxRequestBytes: 64 });
      orders.post('/orders/:id', async (request, reply) => {
        runs++;
        if ((request.body as { slow?: boolean }).slow === true) await new Promise<void>((resolve) => (releaseOrder = resolve));
        reply.code(201).header('etag', `"${runs}"`);
        return { runs, body: request.body };
      });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as net.AddressInfo).port;
  });
  afterAll(() => app.close());

  const url = (path: string): string => `http://127.0.0.1:${port}${path}`;
  const put = (path: string, token?: string): Promise<Response> => fetch(url(path), { method: 'PUT', headers: token === undefined ? {} : { 'fencing-token': token } });

  it('guards the routes of its context only; answers missing, malformed, repeated and stale tokens as Express does', async () => {
    expect(await (await fetch(url('/open'))).json()).toEqual({ fenced: false });
    const ok = await put('/doc/a', '7');
    expect(await ok.json()).toEqual({ resource: 'fastify/a', token: '7' });
    const missing = await put('/doc/a');
    expect(missing.status).toBe(428);
    expect(missing.headers.get('content-type')).toBe('application/problem+json');
    expect(missing.headers.get('cache-control')).toBe('no-store');
    expect(await missing.json()).toMatchObject({ type: 'about:blank', code: 'MISSING_TOKEN' });
    expect(await (await put('/doc/a', '0x7')).json()).toMatchObject({ status: 400, code: 'INVALID_TOKEN' });
    expect(await (await put('/doc/a', '6')).json()).toMatchObject({ status: 409, code: 'STALE_TOKEN', resource: 'fastify/a', presented: '6', current: '7' });
    const repeatedPut = await rawPut(port, '/doc/a', ['fencing-token: 8', 'FENCING-TOKEN: 8']);
    expect(repeatedPut.status).toBe(400);
    expect(JSON.parse(repeatedPut.body)).toMatchObject({ code: 'REPEATED_TOKEN' });
  });

  it('two concurrent admissions of one resource never overlap', async () => {
    const responses = await Promise.all([put('/serial/s', '1'), put('/serial/s', '1'), put('/serial/s', '2')]);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(overlapped).toBe(false);
  });

  it('a handler that throws gets Fastify\'s 500 and its admission aborted; the mark stays', async () => {
    expect((await put('/throw/t', '5')).status).toBe(500);
    expect((await put('/throw/t', '4')).status).toBe(409);
  });

  it('a client that leaves aborts request.fencing.signal and frees the fence', async () => {
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('PUT /slow/x HTTP/1.1\r\nHost: x\r\nfencing-token: 3\r\nContent-Length: 0\r\n\r\n');
    for (let i = 0; i < 200 && slowSignal === undefined; i++) await tick();
    socket.destroy();
    for (let i = 0; i < 200 && !slowSignal!.aborted; i++) await tick();
    expect(slowSignal!.reason).toBeInstanceOf(FenceReleasedError);
    releaseSlow!();
    releaseSlow = undefined;
    const next = put('/slow/x', '3');
    for (let i = 0; i < 200 && releaseSlow === undefined; i++) await tick();
    releaseSlow!();
    expect((await next).status).toBe(200);
    expect((await put('/slow/x', '2')).status).toBe(409);
  });

  it('a client that left before the guard was reached (an earlier hook still running) is not admitted: the fence stays free', async () => {
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('PUT /late/g HTTP/1.1\r\nHost: x\r\nx-gate: 1\r\nfencing-token: 4\r\nContent-Length: 0\r\n\r\n');
    await until(() => releaseLate !== undefined, 'the request held in the onRequest hook');
    socket.destroy();
    await until(() => lateResponse!.closed, "Node's response closing with the connection");
    releaseLate!();
    // Admitted, it would hold the fence until its maxHoldMs (20 s) with nobody to
    // answer: the next request of the resource would wait that long.
    const next = await within(put('/late/g', '4'), 10_000, 'the next request of the resource');
    expect(next.status).toBe(200);
    expect(lateRuns).toBe(1);
  });

  it('idempotency: a byte-identical replay with the kept headers, 409 while running, 422 for another body, 413 past maxRequestBytes', async () => {
    const order = (key: string, body: string): Promise<Response> =>
      fetch(url('/orders/o'), { method: 'POST', body, headers: { 'idempotency-key': key, 'content-type': 'application/json' } });
    const first = await order('"k1"', '{"a":1}');
    expect(first.status).toBe(201);
    const bytes = Buffer.from(await first.arrayBuffer());
    const again = await order('"k1"', '{"a":1}');
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('etag')).toBe(first.headers.get('etag'));
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(Buffer.from(await again.arrayBuffer()).equals(bytes)).toBe(true);
    // Bytes, not the parsed value: the same JSON spaced differently is another request.
    expect(await (await order('"k1"', '{"a": 1}')).json()).toMatchObject({ status: 422, code: 'IDEMPOTENCY_KEY_REUSED' });
    expect((await order('"k2"', `{"pad":"${'x'.repeat(80)}"}`)).status).toBe(413);
    const slow = order('"k3"', '{"slow":true}');
    for (let i = 0; i < 200 && releaseOrder === undefined; i++) await tick();
    expect(await (await order('"k3"', '{"slow":true}')).json()).toMatchObject({ status: 409, code: 'IDEMPOTENCY_KEY_IN_USE' });
    releaseOrder!();
    expect((await slow).status).toBe(201);
    expect(runs).toBe(2);
  });
});

/** A PUT with the header lines as given (fetch would join repeats into one line). */
function rawPut(port: number, path: string, lines: string[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const at = text.indexOf('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]), body: at === -1 ? '' : text.slice(at + 4) });
    });
    socket.write(`PUT ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n${lines.map((l) => `${l}\r\n`).join('')}\r\n`);
  });
}
