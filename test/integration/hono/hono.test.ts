// fencekeeper/hono over @hono/node-server on a real socket: the answers
// (repeated headers told apart through Node's rawHeaders), c.get('fencing'),
// the admission held until the body is read, a throwing route, a client that
// leaves, and idempotency replays.
import net from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { stream } from 'hono/streaming';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { MemoryFenceStore, MemoryIdempotencyStore, fencing, idempotency, type FencingContext, type FencingEnv } from '../../../adapters/hono/index.js';
import { FenceReleasedError } from '../../../src/index.js';
import { serve, type Served } from '../../helpers/serve.js';
import { rawStatus } from '../express/helpers.js';

const store = new MemoryFenceStore();
const app = new Hono<FencingEnv>();
const order: string[] = [];
let lastSignal: AbortSignal | undefined;
let releaseSlow: (() => void) | undefined;
let runs = 0;
let openGate: (() => void) | undefined;

app.put('/doc/:id', fencing({ store, resource: (c) => `hono/doc/${c.req.param('id')}` }), (c) => {
  const admitted = c.get('fencing');
  expectTypeOf(admitted).toMatchTypeOf<FencingContext<unknown>>();
  expectTypeOf(admitted.token).toEqualTypeOf<bigint>();
  return c.json({ resource: admitted.resource, token: String(admitted.token) });
});
app.post('/doc/:id', fencing({ store, resource: (c) => `hono/doc/${c.req.param('id')}` }), (c) => c.json({ token: String(c.get('fencing').token) }));
app.put('/stream', fencing({ store, resource: 'hono/stream' }), (c) => {
  order.push(`run ${c.get('fencing').token}`);
  return stream(c, async (s) => {
    await s.write(new Uint8Array([0, 1, 2, 255]));
    // The body is not complete until the test opens the gate: the fence must stay held until then.
    await new Promise<void>((resolve) => (openGate = resolve));
    await s.write('héllo');
  });
});
app.put('/throw', fencing({ store, resource: 'hono/throw' }), () => {
  throw new Error('boom');
});
app.put('/slow', fencing({ store, resource: 'hono/slow' }), async (c) => {
  lastSignal = c.get('fencing').signal;
  await new Promise<void>((resolve) => (releaseSlow = resolve));
  return c.text('late');
});
let releaseHang: (() => void) | undefined;
app.put('/hang/:way', fencing({ store, resource: (c) => `hono/hang/${c.req.param('way')}`, maxHoldMs: 100 }), async (c) => {
  // A header that describes the handler's answer, not the guard's.
  c.header('content-language', 'fr');
  if (c.get('fencing').token === 1n) await new Promise<void>((resolve) => (releaseHang = resolve));
  return c.text('late');
});
app.post('/orders', fencing({ store, resource: 'hono/orders' }), idempotency({ store: new MemoryIdempotencyStore(), maxRequestBytes: 64 }), async (c) => {
  runs++;
  const body = await c.req.text();
  return c.json({ runs, body }, 201, { etag: `"${runs}"` });
});

app.onError((_error, c) => c.text('failed', 500));

let served: Served;
beforeAll(async () => {
  served = await serve(getRequestListener(app.fetch));
});
afterAll(() => served.close());
const url = (path: string): string => `http://127.0.0.1:${served.port}${path}`;
const put = (path: string, token?: string, init: RequestInit = {}): Promise<Response> =>
  fetch(url(path), { method: 'PUT', ...init, headers: { ...(token === undefined ? {} : { 'fencing-token': token }), ...(init.headers as Record<string, string> | undefined) } });

describe('fencing() on Hono', () => {
  it('admits and sets c.get("fencing"); refuses missing, malformed, stale, and repeated (two header lines) tokens', async () => {
    const ok = await put('/doc/1', '7');
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ resource: 'hono/doc/1', token: '7' });
    const missing = await put('/doc/1');
    expect(missing.status).toBe(428);
    expect(missing.headers.get('content-type')).toBe('application/problem+json');
    expect(await missing.json()).toMatchObject({ code: 'MISSING_TOKEN' });
    expect(await (await put('/doc/1', '1e3')).json()).toMatchObject({ status: 400, code: 'INVALID_TOKEN' });
    expect(await (await put('/doc/1', '6')).json()).toMatchObject({ status: 409, code: 'STALE_TOKEN', resource: 'hono/doc/1', presented: '6', current: '7' });
    const repeated = await rawStatus(served.port, '/doc/1', [Buffer.from('fencing-token: 8'), Buffer.from('Fencing-Token: 8')]);
    expect(repeated.status).toBe(400);
    expect(JSON.parse(repeated.body)).toMatchObject({ code: 'REPEATED_TOKEN' });
    // One line holding a comma is a list, what repeated lines are once a hop
    // joins them (RFC 9110 section 5.3): REPEATED_TOKEN, under every guard.
    const comma = await rawStatus(served.port, '/doc/1', [Buffer.from('fencing-token: 8,9')]);
    expect(JSON.parse(comma.body)).toMatchObject({ code: 'REPEATED_TOKEN' });
  });

  it('holds the admission until the streamed body is read, and passes it through byte for byte', async () => {
    const first = await put('/stream', '1');
    const second = put('/stream', '2');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(order).toEqual(['run 1']);
    const gate = openGate!;
    openGate = undefined;
    gate();
    expect(Buffer.from(await first.arrayBuffer()).equals(Buffer.concat([Buffer.from([0, 1, 2, 255]), Buffer.from('héllo')]))).toBe(true);
    for (let i = 0; i < 100 && openGate === undefined; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    openGate!();
    await (await second).arrayBuffer();
    expect(order).toEqual(['run 1', 'run 2']);
  });

  it('a route that throws is answered 500 by Hono and its admission aborted; the mark stays', async () => {
    expect((await put('/throw', '5')).status).toBe(500);
    expect((await put('/throw', '4')).status).toBe(409);
    expect((await put('/throw', '5')).status).toBe(500);
  });

  it('a client that leaves while the route runs aborts c.get("fencing").signal and frees the fence', async () => {
    const socket = net.connect(served.port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write('PUT /slow HTTP/1.1\r\nHost: x\r\nfencing-token: 3\r\nContent-Length: 0\r\n\r\n');
    for (let i = 0; i < 100 && lastSignal === undefined; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    socket.destroy();
    for (let i = 0; i < 100 && !lastSignal!.aborted; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(lastSignal!.reason).toBeInstanceOf(FenceReleasedError);
    releaseSlow!();
    const next = put('/slow', '3');
    for (let i = 0; i < 100 && releaseSlow === undefined; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    await new Promise((resolve) => setTimeout(resolve, 20));
    releaseSlow!();
    expect((await next).status).toBe(200);
    expect((await put('/slow', '2')).status).toBe(409);
  });
});

describe('fencing() on Hono: maxHoldMs', () => {
  // On @hono/node-server (the Node response known) and through app.request (the Fetch API alone).
  const ways: [string, (token: string) => Promise<Response>][] = [
    ['on @hono/node-server', (token) => put('/hang/node', token)],
    ['through app.request', (token) => Promise.resolve(app.request('/hang/request', { method: 'PUT', headers: { 'fencing-token': token } }))],
  ];
  for (const [way, send] of ways) {
    it(`${way}: a route still running past it is answered 503 FENCE_HOLD_EXPIRED without the headers it had set, and the fence is free`, async () => {
      releaseHang = undefined;
      const answer = await send('1');
      expect(answer.status).toBe(503);
      expect(answer.headers.get('content-type')).toBe('application/problem+json');
      expect(answer.headers.get('content-language')).toBeNull();
      expect(await answer.json()).toMatchObject({ code: 'FENCE_HOLD_EXPIRED' });
      // The first route still hangs: the next token is admitted meanwhile.
      const next = await send('2');
      expect(next.status).toBe(200);
      expect(await next.text()).toBe('late');
      releaseHang!();
      // The mark is the next one's; the fence kept token 1 below it.
      expect((await send('1')).status).toBe(409);
    });
  }
});

describe('idempotency() on Hono', () => {
  const order = (key: string, body: string): Promise<Response> =>
    fetch(url('/orders'), { method: 'POST', body, headers: { 'fencing-token': '1', 'idempotency-key': key } });

  it('replays byte for byte with the kept headers, 422 for another body, 413 past maxRequestBytes', async () => {
    const first = await order('"o1"', '{"a":1}');
    expect(first.status).toBe(201);
    const firstBody = Buffer.from(await first.arrayBuffer());
    const again = await order('"o1"', '{"a":1}');
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('etag')).toBe(first.headers.get('etag'));
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(Buffer.from(await again.arrayBuffer()).equals(firstBody)).toBe(true);
    expect(JSON.parse(firstBody.toString())).toEqual({ runs: 1, body: '{"a":1}' });
    expect(await (await order('"o1"', '{"a":2}')).json()).toMatchObject({ status: 422, code: 'IDEMPOTENCY_KEY_REUSED' });
    const large = await order('"o2"', 'x'.repeat(65));
    expect(large.status).toBe(413);
    expect(runs).toBe(1);
  });
});
