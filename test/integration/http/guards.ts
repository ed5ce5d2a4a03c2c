// The guards under test, one a framework, each on the same routes: the
// guards table (guards-table.test.ts) and its property test
// (guards-property.test.ts) send them the same requests. The servers get raw
// bytes over a socket (a repeated header is two header lines); the Fetch
// guard gets a Request whose Headers were appended to twice (the Fetch API
// joins them with ", ").
import type { IncomingMessage, ServerResponse } from 'node:http';
import net from 'node:net';
import { createRequire } from 'node:module';
import { getRequestListener } from '@hono/node-server';
import type expressType from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import * as expressGuards from '../../../adapters/express/index.js';
import * as fastifyGuards from '../../../adapters/fastify/index.js';
import * as fetchGuards from '../../../adapters/fetch/index.js';
import * as honoGuards from '../../../adapters/hono/index.js';
import type { FencingToken } from '../../../src/index.js';
import { serve, type Served } from '../../helpers/serve.js';

const require = createRequire(import.meta.url);
const BINDING = { kind: 'lock', lock: 'table-lock', source: { kind: 'zookeeper', id: 'table' } } as const;
const verify = (token: FencingToken): boolean => token !== 666n;
export const MAX_REQUEST_BYTES = 16;

export interface Input {
  readonly method: 'PUT' | 'POST';
  readonly path: string;
  readonly headers: readonly (readonly [string, string])[];
  readonly body?: string;
}

export interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | undefined>;
  readonly body: string;
}

/** What a guard under test is: a name and a way to send it one request. */
export interface Guard {
  readonly name: string;
  send(input: Input): Promise<Answer>;
  close(): Promise<void>;
}

/** Per guard: how many /slow handlers run at once, and whether two ever overlapped. */
export const slow = new Map<string, { inside: number; overlapped: boolean; runs: number }>();
async function slowly(name: string): Promise<void> {
  const state = slow.get(name) ?? { inside: 0, overlapped: false, runs: 0 };
  slow.set(name, state);
  state.inside++;
  state.runs++;
  if (state.inside > 1) state.overlapped = true;
  await new Promise((resolve) => setTimeout(resolve, 25));
  state.inside--;
}

const SEEN = ['content-type', 'cache-control', 'idempotent-replayed', 'etag'];

/** One request as raw bytes over a socket. */
export function rawRequest(port: number, input: Input): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const at = text.indexOf('\r\n\r\n');
      const head = text.slice(0, at).split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of head.slice(1)) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      let body = text.slice(at + 4);
      if (headers['transfer-encoding'] === 'chunked') body = dechunk(body);
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head[0]!)?.[1]), headers: pick(headers), body: Buffer.from(body, 'latin1').toString('utf8') });
    });
    const body = Buffer.from(input.body ?? '', 'utf8');
    const lines = [`${input.method} ${input.path} HTTP/1.1`, 'Host: table.test', 'Connection: close', `Content-Length: ${body.length}`, ...input.headers.map(([n, v]) => `${n}: ${v}`)];
    socket.write(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
  });
}

function dechunk(text: string): string {
  let out = '';
  for (let at = 0; ;) {
    const eol = text.indexOf('\r\n', at);
    const size = parseInt(text.slice(at, eol), 16);
    if (!(size > 0)) return out;
    out += text.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
}

function pick(headers: Record<string, string | undefined>): Record<string, string | undefined> {
  return Object.fromEntries(SEEN.map((name) => [name, headers[name]]));
}

function served(name: string, listener: Parameters<typeof serve>[0]): Promise<Guard> {
  return serve(listener).then((s: Served) => ({ name, send: (input) => rawRequest(s.port, input), close: () => s.close() }));
}

async function expressGuard(name: string, pkg: string): Promise<Guard> {
  const express = require(pkg) as typeof expressType;
  const store = new expressGuards.MemoryFenceStore();
  await store.bind(`table/bound`, BINDING);
  const app = express();
  app.put('/fence/:id', expressGuards.fencing({ store, resource: (req) => `table/${req.params.id}`, verify }), (_req, res) => void res.type('text/plain').send('ok'));
  app.put('/bound', expressGuards.fencing({ store, resource: 'table/bound' }), (_req, res) => void res.send('ok'));
  app.put('/throw/:id', expressGuards.fencing({ store, resource: (req) => `table/${req.params.id}`, verify }), () => {
    throw new Error('the handler failed');
  });
  app.put('/slow/:id', expressGuards.fencing({ store, resource: (req) => `table/${req.params.id}` }), (_req, res) => void slowly(name).then(() => res.send('ok')));
  app.use(((_error, _req, res, _next) => void res.status(500).send('failed')) as expressType.ErrorRequestHandler);
  app.post('/idem', expressGuards.idempotency({ store: new expressGuards.MemoryIdempotencyStore(), maxRequestBytes: MAX_REQUEST_BYTES }), (req, res) => {
    res.status(201).set('etag', '"e1"').type('text/plain').send(`got:${String(req.body)}`);
  });
  return served(name, app);
}

async function fastifyGuard(): Promise<Guard> {
  const store = new fastifyGuards.MemoryFenceStore();
  await store.bind(`table/bound`, BINDING);
  const app = Fastify();
  app.setErrorHandler(async (_error, _request, reply) => reply.code(500).type('text/plain').send('failed'));
  await app.register(async (scope) => {
    await scope.register(fastifyGuards.fencing, { store, resource: (request) => `table/${(request.params as { id: string }).id}`, verify });
    scope.put('/fence/:id', async () => 'ok');
    scope.put('/throw/:id', async () => {
      throw new Error('the handler failed');
    });
    scope.put('/slow/:id', async () => {
      await slowly('Fastify 5');
      return 'ok';
    });
  });
  await app.register(async (scope) => {
    await scope.register(fastifyGuards.fencing, { store, resource: 'table/bound' });
    scope.put('/bound', async () => 'ok');
  });
  await app.register(async (scope) => {
    await scope.register(fastifyGuards.idempotency, { store: new fastifyGuards.MemoryIdempotencyStore(), maxRequestBytes: MAX_REQUEST_BYTES });
    scope.post('/idem', async (request, reply) => {
      reply.code(201).header('etag', '"e1"').type('text/plain; charset=utf-8');
      return `got:${String(request.body)}`;
    });
  });
  await app.ready();
  return served('Fastify 5', (req: IncomingMessage, res: ServerResponse) => app.routing(req, res));
}

async function honoGuard(): Promise<Guard> {
  const store = new honoGuards.MemoryFenceStore();
  await store.bind(`table/bound`, BINDING);
  const app = new Hono<honoGuards.FencingEnv>();
  app.put('/fence/:id', honoGuards.fencing({ store, resource: (c) => `table/${c.req.param('id')}`, verify }), (c) => c.text('ok'));
  app.put('/bound', honoGuards.fencing({ store, resource: 'table/bound' }), (c) => c.text('ok'));
  app.put('/throw/:id', honoGuards.fencing({ store, resource: (c) => `table/${c.req.param('id')}`, verify }), () => {
    throw new Error('the handler failed');
  });
  app.put('/slow/:id', honoGuards.fencing({ store, resource: (c) => `table/${c.req.param('id')}` }), async (c) => {
    await slowly('Hono (node-server)');
    return c.text('ok');
  });
  app.onError((_error, c) => c.text('failed', 500));
  app.post('/idem', honoGuards.idempotency({ store: new honoGuards.MemoryIdempotencyStore(), maxRequestBytes: MAX_REQUEST_BYTES }), async (c) =>
    c.body(`got:${await c.req.text()}`, 201, { etag: '"e1"', 'content-type': 'text/plain; charset=utf-8' }));
  return served('Hono (node-server)', getRequestListener(app.fetch));
}

async function fetchGuard(): Promise<Guard> {
  const store = new fetchGuards.MemoryFenceStore();
  await store.bind(`table/bound`, BINDING);
  const fenced = fetchGuards.withFencing({ store, resource: (request) => `table/${new URL(request.url).pathname.split('/')[2]}`, verify }, () => new Response('ok'));
  const bound = fetchGuards.withFencing({ store, resource: 'table/bound' }, () => new Response('ok'));
  const resource = (request: Request): string => `table/${new URL(request.url).pathname.split('/')[2]}`;
  const throwing = fetchGuards.withFencing({ store, resource, verify }, () => {
    throw new Error('the handler failed');
  });
  const slowed = fetchGuards.withFencing({ store, resource }, async () => {
    await slowly('Fetch (direct)');
    return new Response('ok');
  });
  const idem = fetchGuards.withIdempotency({ store: new fetchGuards.MemoryIdempotencyStore(), maxRequestBytes: MAX_REQUEST_BYTES }, async (request) =>
    new Response(`got:${await request.text()}`, { status: 201, headers: { etag: '"e1"', 'content-type': 'text/plain; charset=utf-8' } }));
  return {
    name: 'Fetch (direct)',
    send: async (input) => {
      const headers = new Headers();
      for (const [n, v] of input.headers) headers.append(n, v);
      const request = new Request(`http://table.test${input.path}`, { method: input.method, headers, ...(input.body === undefined ? {} : { body: input.body }) });
      const handler = input.path.startsWith('/fence/') ? fenced : input.path.startsWith('/throw/') ? throwing : input.path.startsWith('/slow/') ? slowed : input.path === '/bound' ? bound : (r: Request) => idem(r, undefined);
      let response: Response;
      try {
        response = await handler(request);
      } catch {
        // What a runtime does with a handler's throw (the guard throws it on).
        response = new Response('failed', { status: 500 });
      }
      return { status: response.status, headers: pick(Object.fromEntries(response.headers)), body: await response.text() };
    },
    close: async () => undefined,
  };
}

/** Every guard of the table, served: Express 5, Express 4, Fastify 5, Hono (node-server), Fetch (direct). */
export async function allGuards(): Promise<Guard[]> {
  return [await expressGuard('Express 5', 'express'), await expressGuard('Express 4', 'express4'), await fastifyGuard(), await honoGuard(), await fetchGuard()];
}
