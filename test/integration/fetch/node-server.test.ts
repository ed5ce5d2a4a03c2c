// The Fetch guard and the Hono middleware served by @hono/node-server on a
// real socket: the handler's Response handed to node-server as it was made
// (a string body is not turned into a stream), the admission held until the
// response has been written, maxHoldMs passing mid-body, and clients that
// leave: mid-response, while the handler runs (whether or not it ever reads
// fencing.signal), and while waiting behind another holder. There the guard
// watches the Node response, not the request's signal (reading that builds
// the full Request): these tests hold it to releasing the admission every
// time all the same, and to a signal that aborts even when it is first read
// after the client left.
import net from 'node:net';
import { inspect } from 'node:util';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryFenceStore, withFencing, type FencingContext } from '../../../adapters/fetch/index.js';
import { fencing, type FencingEnv } from '../../../adapters/hono/index.js';
import { FenceReleasedError, type FenceAdmission, type FenceStore, type FencingToken, type Sequencer } from '../../../src/index.js';
import { serve, type Served } from '../../helpers/serve.js';

/** MemoryFenceStore, recording how each admission of a resource settled. */
class RecordingStore implements FenceStore<undefined> {
  readonly inner = new MemoryFenceStore();
  readonly settled: string[] = [];
  async admit(resource: string, presented: FencingToken | Sequencer, options?: object): Promise<FenceAdmission<undefined>> {
    const admission = await this.inner.admit(resource, presented, options);
    const settled = this.settled;
    return {
      resource: admission.resource,
      token: admission.token,
      previous: admission.previous,
      transaction: undefined,
      commit: () => (settled.push(`${resource} commit`), admission.commit()),
      abort: () => (settled.push(`${resource} abort`), admission.abort()),
    };
  }
  current(resource: string): Promise<FencingToken | null> {
    return this.inner.current(resource);
  }
}

/** A gate a handler waits at until the test opens it. */
function gate(): { wait: Promise<void>; open(): void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => (open = resolve));
  return { wait, open };
}

const until = async (what: () => boolean, ms = 2000): Promise<void> => {
  for (const end = performance.now() + ms; !what(); ) {
    if (performance.now() > end) throw new Error(`timed out after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
};

/** What each app's routes share with the test. */
interface Scene {
  store: RecordingStore;
  gates: Map<string, ReturnType<typeof gate>>;
  signals: Map<string, AbortSignal>;
  ran: string[];
  built: string[];
  /** Per path, the Response the route made and the one the guard handed on (they must be one object). */
  made: Map<string, Response>;
  handed: Map<string, Response>;
}

/** A body larger than the socket buffers on both ends: its writing waits for the client to read. */
const BIG = 'x'.repeat(32 * 1024 * 1024);

/**
 * One route per path: `/stream` sends a chunk and waits for its gate,
 * `/quiet` waits for its gate without reading the signal then returns a
 * body (`/quiet-empty`: no body), `/late-signal` reads the signal only after its gate, `/signal` reads
 * it first, `/quick` answers at once and notes whether the full Request was
 * built. maxHoldMs 20 s: a release the tests wait for is never maxHoldMs's.
 */
async function route(scene: Scene, path: string, request: Request, admitted: FencingContext<unknown>): Promise<Response> {
  scene.ran.push(`${path} ${admitted.token}`);
  const g = scene.gates.get(path) ?? gate();
  scene.gates.set(path, g);
  if (path === '/quick') {
    scene.built.push(inspect(request).includes('nativeRequest: undefined') ? 'lightweight' : 'built');
    return new Response(null, { status: 204 });
  }
  if (path === '/json' || path === '/big') {
    const made = path === '/json' ? new Response(JSON.stringify({ ok: true }), { headers: { 'content-type': 'application/json' } }) : new Response(BIG);
    scene.made.set(path, made);
    return made;
  }
  if (path === '/stream' || path === '/expire') {
    return new Response(new ReadableStream<Uint8Array>({
      start: (controller) => controller.enqueue(new TextEncoder().encode('first chunk;')),
      pull: async (controller) => {
        await g.wait;
        controller.enqueue(new TextEncoder().encode('rest'));
        controller.close();
      },
    }));
  }
  if (path === '/signal') scene.signals.set(path, admitted.signal);
  await g.wait;
  if (path === '/late-signal') {
    // Whether it had aborted when the handler first read it (checked later, the guard's own end would abort it).
    scene.signals.set(path, admitted.signal);
    scene.ran.push(`/late-signal aborted when read: ${admitted.signal.aborted}`);
  }
  if (path === '/quiet-empty') return new Response(null, { status: 204 });
  return new Response(new ReadableStream({ start: (c) => (c.enqueue(new Uint8Array([1, 2, 3])), c.close()) }));
}

function fetchApp(scene: Scene): (request: Request, env?: unknown) => Promise<Response> {
  const guarded = new Map<string, (request: Request, env?: unknown) => Promise<Response>>();
  return (request, env) => {
    const path = new URL(request.url).pathname;
    let g = guarded.get(path);
    if (g === undefined) {
      g = withFencing({ store: scene.store, resource: path, maxHoldMs: path === '/expire' ? 300 : 20_000 }, (r, admitted) => route(scene, path, r, admitted));
      guarded.set(path, g);
    }
    return g(request, env).then((response) => (scene.handed.set(path, response), response));
  };
}

function honoApp(scene: Scene): Hono<FencingEnv> {
  const app = new Hono<FencingEnv>();
  // What the guard handed on, as the middleware outside it sees it.
  app.use('*', async (c, next) => {
    await next();
    scene.handed.set(c.req.path, c.res);
  });
  app.all('/expire', fencing({ store: scene.store, resource: (c) => c.req.path, maxHoldMs: 300 }), (c) => route(scene, c.req.path, c.req.raw, c.get('fencing')));
  app.all('*', fencing({ store: scene.store, resource: (c) => c.req.path, maxHoldMs: 20_000 }), (c) => route(scene, c.req.path, c.req.raw, c.get('fencing')));
  return app;
}

/**
 * Send a GET on a socket of its own; `leave()` destroys the socket.
 * `paused`: nothing is read until `read()` (the response's writing waits).
 */
function sendRaw(port: number, path: string, token: string, paused = false): { received: () => string; closed: Promise<void>; leave(): void; read(): void } {
  const socket = net.connect(port, '127.0.0.1');
  let text = '';
  socket.setEncoding('latin1');
  if (paused) socket.pause();
  socket.on('data', (chunk: string) => (text += chunk));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nfencing-token: ${token}\r\n\r\n`);
  return { received: () => text, closed, leave: () => socket.destroy(), read: () => void socket.resume() };
}

for (const kind of ['fetch', 'hono'] as const) {
  describe(`${kind === 'fetch' ? 'withFencing()' : 'Hono fencing()'} on @hono/node-server: clients that leave`, () => {
    const scene: Scene = { store: new RecordingStore(), gates: new Map(), signals: new Map(), ran: [], built: [], made: new Map(), handed: new Map() };
    let served: Served;
    beforeAll(async () => {
      served = await serve(getRequestListener(kind === 'fetch' ? fetchApp(scene) : honoApp(scene).fetch));
    });
    afterAll(() => served.close());
    const get = (path: string, token: string): Promise<Response> => fetch(`http://127.0.0.1:${served.port}${path}`, { headers: { 'fencing-token': token } });

    it('an admitted request that nothing asks about costs no full Request: the signal is not read', async () => {
      const answer = await get('/quick', '1');
      expect(answer.status).toBe(204);
      expect(scene.built).toEqual(['lightweight']);
      expect(scene.store.settled).toEqual(['/quick commit']);
    });

    it("hands node-server the handler's Response as it was made: a JSON body is not read, copied or turned into a stream", async () => {
      const answer = await get('/json', '1');
      expect(answer.status).toBe(200);
      expect(await answer.json()).toEqual({ ok: true });
      expect(scene.handed.get('/json')).toBe(scene.made.get('/json'));
      // Nothing read its body: it is still node-server's lightweight Response, written without a stream.
      expect(inspect(scene.made.get('/json'))).toContain('nativeResponse: undefined');
      await until(() => scene.store.settled.includes('/json commit'));
    });

    it('holds the admission until a body the client reads slowly has been written; then, or when the client leaves mid-way, it is settled once and the fence is free', async () => {
      const reader = sendRaw(served.port, '/big', '2', true);
      await until(() => scene.ran.includes('/big 2'));
      await new Promise((resolve) => setTimeout(resolve, 200));
      // 32 MB wait in the socket buffers and node's own: the response has not finished.
      expect(scene.store.settled.filter((s) => s.startsWith('/big'))).toEqual([]);
      reader.read();
      await until(() => reader.received().length >= BIG.length, 10_000);
      await until(() => scene.store.settled.includes('/big commit'));
      reader.leave();
      // A client that leaves mid-body of a string: node-server handed Node the
      // whole body at once, and Node counts such a response finished (as for
      // Express and Fastify): it is settled then, once.
      const leaver = sendRaw(served.port, '/big', '3', true);
      await until(() => scene.ran.includes('/big 3'));
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(scene.store.settled.filter((s) => s.startsWith('/big'))).toEqual(['/big commit']);
      leaver.leave();
      await until(() => scene.store.settled.filter((s) => s.startsWith('/big')).length === 2);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(scene.store.settled.filter((s) => s.startsWith('/big'))).toEqual(['/big commit', '/big commit']);
      const next = sendRaw(served.port, '/big', '4');
      await until(() => scene.ran.includes('/big 4'));
      next.leave();
    });

    it('a pipelined response queued behind an earlier one is settled when the connection closes before its turn', async () => {
      // Node runs the second request's handler as it parses it, and queues its answer behind the first's.
      const socket = net.connect(served.port, '127.0.0.1');
      socket.on('error', () => undefined);
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      socket.write('GET /held HTTP/1.1\r\nHost: x\r\nfencing-token: 1\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\nfencing-token: 5\r\n\r\n');
      await until(() => scene.ran.includes('/held 1') && scene.handed.has('/json') && scene.made.get('/json') === scene.handed.get('/json') && scene.ran.includes('/json 5'));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(scene.store.settled.filter((s) => s.startsWith('/held') || s.endsWith('/json abort'))).toEqual([]);
      // Node drops the queued response without a 'close' of its own: the connection's settles it.
      socket.destroy();
      await closed;
      await until(() => scene.store.settled.includes('/held abort') && scene.store.settled.includes('/json abort'));
      scene.gates.get('/held')!.open();
    });

    it('past maxHoldMs with the body still being written: the response is broken off (no complete-looking one) and the admission aborted', async () => {
      const client = sendRaw(served.port, '/expire', '4');
      await until(() => client.received().includes('first chunk;'));
      await client.closed;
      expect(scene.store.settled.filter((s) => s.startsWith('/expire'))).toEqual(['/expire abort']);
      // Chunked and never ended: no terminating zero-length chunk.
      expect(client.received()).toMatch(/transfer-encoding: chunked/i);
      expect(client.received()).not.toMatch(/\r\n0\r\n\r\n$/);
      scene.gates.get('/expire')!.open();
    });

    it('a client that leaves mid-response (part of a streamed body out) has its admission aborted at once', async () => {
      const client = sendRaw(served.port, '/stream', '5');
      await until(() => client.received().includes('first chunk;'));
      client.leave();
      await until(() => scene.store.settled.includes('/stream abort'));
      expect(scene.store.settled.filter((s) => s.startsWith('/stream'))).toEqual(['/stream abort']);
      // The fence is free: the next holder is admitted while the first body's gate is still shut.
      scene.gates.delete('/stream');
      const next = get('/stream', '5');
      await until(() => scene.ran.filter((r) => r === '/stream 5').length === 2);
      scene.gates.get('/stream')!.open();
      expect(await (await next).text()).toBe('first chunk;rest');
      expect((await get('/stream', '4')).status).toBe(409);
    });

    for (const path of ['/quiet', '/quiet-empty']) {
      it(`a client that leaves while the handler runs, which never reads the signal, has its admission aborted (${path === '/quiet' ? 'a body' : 'no body'})`, async () => {
        const client = sendRaw(served.port, path, '7');
        await until(() => scene.ran.includes(`${path} 7`));
        client.leave();
        await client.closed;
        await new Promise((resolve) => setTimeout(resolve, 20));
        scene.gates.get(path)!.open();
        await until(() => scene.store.settled.some((s) => s.startsWith(`${path} `)));
        expect(scene.store.settled.filter((s) => s.startsWith(`${path} `))).toEqual([`${path} abort`]);
        expect((await get(path, '7')).status).toBe(path === '/quiet' ? 200 : 204);
      });
    }

    it('a signal first read after the client left is aborted (client_gone), and the admission released', async () => {
      const client = sendRaw(served.port, '/late-signal', '3');
      await until(() => scene.ran.includes('/late-signal 3'));
      client.leave();
      await client.closed;
      await new Promise((resolve) => setTimeout(resolve, 20));
      scene.gates.get('/late-signal')!.open();
      await until(() => scene.signals.has('/late-signal'));
      const signal = scene.signals.get('/late-signal')!;
      expect(signal.aborted).toBe(true);
      expect((signal.reason as FenceReleasedError).reason).toBe('client_gone');
      expect(scene.ran).toContain('/late-signal aborted when read: true');
      expect(scene.store.settled.filter((s) => s.startsWith('/late-signal'))).toEqual(['/late-signal abort']);
    });

    it('a signal read while the client is there aborts when it leaves, while the handler still runs', async () => {
      const client = sendRaw(served.port, '/signal', '2');
      await until(() => scene.signals.has('/signal'));
      const signal = scene.signals.get('/signal')!;
      expect(signal.aborted).toBe(false);
      client.leave();
      await until(() => signal.aborted);
      expect(signal.reason).toBeInstanceOf(FenceReleasedError);
      expect(scene.store.settled.filter((s) => s.startsWith('/signal'))).toEqual(['/signal abort']);
      scene.gates.get('/signal')!.open();
    });

    it('a client that leaves while waiting behind another holder gives up its wait: its handler never runs', async () => {
      scene.gates.delete('/quiet');
      const holder = get('/quiet', '8');
      await until(() => scene.ran.includes('/quiet 8'));
      const waiter = sendRaw(served.port, '/quiet', '9');
      await new Promise((resolve) => setTimeout(resolve, 30));
      waiter.leave();
      await waiter.closed;
      await new Promise((resolve) => setTimeout(resolve, 20));
      scene.gates.get('/quiet')!.open();
      expect((await holder).status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(scene.ran).not.toContain('/quiet 9');
      // The waiter left nothing behind: the mark is the holder's.
      expect(await scene.store.current('/quiet')).toBe(8n);
    });
  });
}
