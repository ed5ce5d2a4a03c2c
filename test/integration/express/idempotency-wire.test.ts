// idempotency() and a handler that fails, read as bytes off a raw socket: the
// client must never get a malformed response (a Content-Length that does not
// match the bytes after it), which on a kept-alive or pipelined connection
// makes the next response unreadable. A handler that fails after it started
// its response (a write, a writeHead) gets what Express gives it without the
// middleware: the connection ends, and nothing is kept for a replay. One that
// fails before gets its error handler's answer, whole.
//
// The regression this guards: the capture held the handler's writes without
// making res.headersSent true, so Express's final handler (or an error handler
// of the app's) sent its own answer, with its own Content-Length, into the
// capture, behind the handler's partial body: 148 declared, 156 sent.
import net from 'node:net';
import type { ErrorRequestHandler, RequestHandler } from 'express';
import { express } from './variants.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryIdempotencyStore, fencing, idempotency } from '../../../adapters/express/index.js';
import { PostgresFenceStore, PostgresIdempotencyStore } from '../../../adapters/postgres/index.js';
import type { IdempotencyStore } from '../../../src/index.js';
import { serve, type Served } from './helpers.js';
import { adminPool, migratedSchema } from '../postgres/helpers.js';
import { until, within } from '../../helpers/wait.js';

const { pool } = migratedSchema(adminPool(), 'fk_idemwire', { max: 4 });

/** Short, so that the test sees a claim left by a failed request lapse; long enough for a loaded machine to ask twice within it. */
const MAX_RUNNING_MS = 3_000;
const SLACK_MS = 30_000;

const STORES: readonly { readonly name: string; make(): IdempotencyStore<unknown> }[] = [
  { name: 'MemoryIdempotencyStore', make: () => new MemoryIdempotencyStore({ maxRunningMs: MAX_RUNNING_MS }) },
  { name: 'PostgresIdempotencyStore', make: () => new PostgresIdempotencyStore(pool, { maxRunningMs: MAX_RUNNING_MS }) },
];

/** How the app answers an error: none of its own (Express's final handler), the Express guide's, or one that answers regardless. */
const ERROR_HANDLERS: readonly { readonly name: string; readonly handler: ErrorRequestHandler | undefined }[] = [
  { name: "Express's final handler", handler: undefined },
  {
    name: 'an error handler that checks res.headersSent',
    handler: (_err, _req, res, next) => {
      if (res.headersSent) return next(_err);
      res.status(500).type('text/plain').send('handler error');
    },
  },
  {
    name: 'an error handler that answers regardless',
    handler: (_err, _req, res, _next) => {
      res.status(500).type('text/plain').send('handler error');
    },
  },
];

interface WireRequest {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly key?: string;
  readonly headers?: Readonly<Record<string, string>>;
}

interface WireResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

interface Wire {
  /** Every complete response, in order, as its own framing delimits it. */
  readonly responses: WireResponse[];
  /** Bytes where a response should start but none does: the framing of the one before lied. */
  readonly malformed: string | undefined;
}

/**
 * The requests written in one go on one connection (pipelined; the last one
 * asks the server to close), and every byte the server sent until the
 * connection closed, parsed by the responses' own framing.
 */
async function exchange(port: number, requests: readonly WireRequest[]): Promise<Wire> {
  const socket = net.connect(port, '127.0.0.1');
  const chunks: Buffer[] = [];
  const closed = new Promise<void>((resolve) => {
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve());
  });
  socket.write(
    requests
      .map((r, i) => {
        const key = r.key === undefined ? '' : `Idempotency-Key: "${r.key}"\r\n`;
        const close = i === requests.length - 1 ? 'Connection: close\r\n' : '';
        const extra = Object.entries(r.headers ?? {}).map(([name, value]) => `${name}: ${value}\r\n`).join('');
        return `${r.method} ${r.path} HTTP/1.1\r\nHost: fencekeeper.test\r\nContent-Length: 0\r\n${key}${extra}${close}\r\n`;
      })
      .join(''),
  );
  await within(closed, SLACK_MS, 'the server to close the connection');
  return parseWire(Buffer.concat(chunks));
}

/** Strict HTTP/1.1 response framing: Content-Length or chunked; what follows a response must be the next one's start. */
function parseWire(bytes: Buffer): Wire {
  const responses: WireResponse[] = [];
  let rest = bytes;
  const STATUS = 'HTTP/1.1 ';
  for (;;) {
    if (rest.length === 0) return { responses, malformed: undefined };
    const start = rest.subarray(0, STATUS.length).toString('latin1');
    if (!STATUS.startsWith(start)) return { responses, malformed: rest.subarray(0, 80).toString('latin1') };
    const end = rest.indexOf('\r\n\r\n');
    if (end === -1) return { responses, malformed: undefined }; // cut off in its head: incomplete, not malformed
    const [statusLine, ...lines] = rest.subarray(0, end).toString('latin1').split('\r\n');
    const status = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine ?? '');
    if (status === null) return { responses, malformed: statusLine };
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    let at = end + 4;
    let body: Buffer;
    if (headers['transfer-encoding'] === 'chunked') {
      const parts: Buffer[] = [];
      for (;;) {
        const lineEnd = rest.indexOf('\r\n', at);
        if (lineEnd === -1) return { responses, malformed: undefined }; // incomplete
        const size = Number.parseInt(rest.subarray(at, lineEnd).toString('latin1'), 16);
        if (!Number.isInteger(size)) return { responses, malformed: rest.subarray(at, at + 80).toString('latin1') };
        if (rest.length < lineEnd + 2 + size + 2) return { responses, malformed: undefined }; // incomplete
        parts.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
        at = lineEnd + 2 + size + 2;
        if (size === 0) break;
      }
      body = Buffer.concat(parts);
    } else {
      const length = Number(headers['content-length'] ?? 0);
      if (rest.length < at + length) return { responses, malformed: undefined }; // incomplete
      body = rest.subarray(at, at + length);
      at += length;
    }
    responses.push({ status: Number(status[1]), headers, body: body.toString('utf8') });
    rest = rest.subarray(at);
  }
}

describe.each(STORES)('idempotency() with $name, a handler that fails, on the wire', (flavor) => {
  describe.each(ERROR_HANDLERS)('and $name', ({ handler: errorHandler }) => {
    let served: Served;
    /** Runs per key, per route. */
    const runs = new Map<string, number>();
    const run = (route: string, key: string): number => {
      const n = (runs.get(`${route} ${key}`) ?? 0) + 1;
      runs.set(`${route} ${key}`, n);
      return n;
    };
    const keyOf = (): string => crypto.randomUUID();

    beforeAll(async () => {
      const app = express();
      const store = flavor.make();
      // The first run for a key writes part of its body, then fails.
      const partial: RequestHandler = (req, res, next) => {
        const n = run(req.path, req.get('idempotency-key') ?? '');
        if (n > 1) return void res.json({ run: n });
        res.status(200).type('text/plain');
        res.write('PARTIAL-');
        next(new Error('failed in the middle of its response'));
      };
      app.post('/partial', idempotency({ store }), partial);
      // The same without the middleware: what Express itself does.
      app.post('/partial-plain', partial);
      // The first run for a key sets a header, then fails before writing anything.
      app.post('/early', idempotency({ store }), (req, res, next) => {
        const n = run(req.path, req.get('idempotency-key') ?? '');
        if (n > 1) return void res.json({ run: n });
        res.status(201).set('etag', '"not-this"');
        next(new Error('failed before its response'));
      });
      app.get('/ok', (_req, res) => void res.json({ ok: true }));
      if (errorHandler !== undefined) app.use(errorHandler);
      served = await serve(app);
    });
    afterAll(async () => {
      await served?.close();
    });

    it('a failure after the handler started its response ends the connection, as without the middleware, and keeps nothing for a replay', async () => {
      // Express without the middleware: the connection ends; the pipelined
      // request behind is never answered.
      const plain = await exchange(served.port, [{ method: 'POST', path: '/partial-plain' }, { method: 'GET', path: '/ok' }]);
      expect({ complete: plain.responses.map((r) => r.status), malformed: plain.malformed }).toEqual({ complete: [], malformed: undefined });

      const key = keyOf();
      const wire = await exchange(served.port, [{ method: 'POST', path: '/partial', key }, { method: 'GET', path: '/ok' }]);
      expect({ complete: wire.responses.map((r) => `${r.status} ${r.headers['content-length']} ${JSON.stringify(r.body.slice(0, 20))}`), malformed: wire.malformed })
        .toEqual({ complete: [], malformed: undefined });

      // Nothing was kept: the key stays claimed, as by a request still
      // running, until maxRunningMs; then a retry runs the handler again.
      const during = await exchange(served.port, [{ method: 'POST', path: '/partial', key }]);
      expect(during.malformed).toBeUndefined();
      expect(during.responses.map((r) => [r.status, r.headers['idempotent-replayed'], JSON.parse(r.body).code])).toEqual([[409, undefined, 'IDEMPOTENCY_KEY_IN_USE']]);
      let retry: Wire | undefined;
      await until(async () => {
        retry = await exchange(served.port, [{ method: 'POST', path: '/partial', key }]);
        return retry.responses[0]?.status !== 409;
      }, 'the failed request\'s claim to lapse', MAX_RUNNING_MS + SLACK_MS);
      expect(retry!.malformed).toBeUndefined();
      expect(retry!.responses.map((r) => [r.status, r.headers['idempotent-replayed'], JSON.parse(r.body)])).toEqual([[200, undefined, { run: 2 }]]);
      expect(runs.get(`/partial "${key}"`)).toBe(2);
    });

    it('a failure before the handler started its response: the error answer goes out whole, the next pipelined response is read correctly, and a retry runs again', async () => {
      const key = keyOf();
      const wire = await exchange(served.port, [{ method: 'POST', path: '/early', key }, { method: 'GET', path: '/ok' }]);
      expect(wire.malformed).toBeUndefined();
      expect(wire.responses.map((r) => r.status)).toEqual([500, 200]);
      const [failed, ok] = wire.responses as [WireResponse, WireResponse];
      expect(Buffer.byteLength(failed.body)).toBe(Number(failed.headers['content-length']));
      if (errorHandler !== undefined) expect(failed.body).toBe('handler error');
      expect(JSON.parse(ok.body)).toEqual({ ok: true });
      // A 5xx is not kept: the retry runs the handler again.
      const retry = await exchange(served.port, [{ method: 'POST', path: '/early', key }]);
      expect(retry.responses.map((r) => [r.status, r.headers['idempotent-replayed'], JSON.parse(r.body)])).toEqual([[200, undefined, { run: 2 }]]);
    });
  });
});

describe('fencing() and idempotency() on PostgreSQL, a handler that fails after starting its response', () => {
  let served: Served;
  let runs = 0;
  beforeAll(async () => {
    const app = express();
    app.post('/pay', fencing({ store: new PostgresFenceStore(pool), resource: 'wire-ledger' }), idempotency({ store: new PostgresIdempotencyStore(pool) }), (_req, res, next) => {
      runs += 1;
      if (runs > 1) return void res.json({ run: runs });
      res.write('PARTIAL-');
      next(new Error('failed in the middle of its response'));
    });
    served = await serve(app);
  });
  afterAll(async () => {
    await served?.close();
  });

  it('ends the connection, and the claim rolls back with the fence\'s transaction: a retry runs again at once', async () => {
    const key = crypto.randomUUID();
    const headers = { 'fencing-token': '7' };
    const wire = await exchange(served.port, [{ method: 'POST', path: '/pay', key, headers }, { method: 'GET', path: '/pay', headers }]);
    expect({ complete: wire.responses.map((r) => r.status), malformed: wire.malformed }).toEqual({ complete: [], malformed: undefined });
    const retry = await exchange(served.port, [{ method: 'POST', path: '/pay', key, headers }]);
    expect(retry.malformed).toBeUndefined();
    expect(retry.responses.map((r) => [r.status, r.headers['idempotent-replayed'], JSON.parse(r.body)])).toEqual([[200, undefined, { run: 2 }]]);
  });
});
