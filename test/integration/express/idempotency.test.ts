// idempotency() over real HTTP, with MemoryIdempotencyStore and with
// PostgresIdempotencyStore on a real PostgreSQL: replays are byte for byte
// the first answer, a retry while the first runs is 409, another request
// under the same key 422, a missing key (where required) or a bad header
// 400, and nothing a client sends is answered 500.
import type { Request } from 'express';
import { express } from './variants.js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryIdempotencyStore, idempotency, keepRawBody, type IdempotencyOptions } from '../../../adapters/express/index.js';
import { PostgresIdempotencyStore } from '../../../adapters/postgres/index.js';
import type { IdempotencyStore } from '../../../src/index.js';
import { rawStatus, serve, type Served } from './helpers.js';
import { adminPool, migratedSchema } from '../postgres/helpers.js';
import { deferred, within } from '../../helpers/wait.js';

const { pool } = migratedSchema(adminPool(), 'fk_idem', { max: 8 });

interface Flavor {
  readonly name: string;
  make(options?: { retentionMs?: number; maxRunningMs?: number }): IdempotencyStore<unknown>;
}

const FLAVORS: readonly Flavor[] = [
  { name: 'MemoryIdempotencyStore', make: (options) => new MemoryIdempotencyStore(options) },
  { name: 'PostgresIdempotencyStore', make: (options) => new PostgresIdempotencyStore(pool, options) },
];

interface Answer {
  status: number;
  headers: Headers;
  bytes: Buffer;
  json(): unknown;
}

async function call(url: string, init: { method?: string; key?: string; body?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.key !== undefined) headers['idempotency-key'] = init.key;
  if (init.body !== undefined) headers['content-type'] ??= 'application/json';
  const res = await fetch(url, { method: init.method ?? 'POST', headers, ...(init.body === undefined ? {} : { body: init.body }) });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, bytes, json: () => JSON.parse(bytes.toString('utf8')) as unknown };
}

const keyOf = (): string => `"${crypto.randomUUID()}"`;

describe.each(FLAVORS)('idempotency() with $name', (flavor) => {
  let served: Served;
  let base: string;
  /** Handler runs, per route. */
  const runs = new Map<string, number>();
  const count = (route: string): number => {
    const n = (runs.get(route) ?? 0) + 1;
    runs.set(route, n);
    return n;
  };
  let gate = deferred();
  let entered = deferred();

  const app = (options: Omit<IdempotencyOptions, 'store'> & { store?: IdempotencyStore<unknown> } = {}) => idempotency({ store: options.store ?? flavor.make(), ...options });

  beforeAll(async () => {
    const server = express();
    server.use(express.json());
    const store = flavor.make();
    server.post('/orders', app({ store }), (req, res) => {
      const n = count('orders');
      // Bytes that differ on every run: a replay must give back exactly these.
      res.status(201).set('etag', `"v${n}"`).set('x-not-replayed', String(n)).type('application/json')
        .send(Buffer.from(`{"order":${JSON.stringify(req.body)},"run":${n},"nonce":"${crypto.randomUUID()}"}\n`));
    });
    server.post('/slow', app({ store }), async (_req, res) => {
      count('slow');
      entered.resolve();
      await gate.promise;
      res.json({ done: true });
    });
    server.all('/any', app({ store }), (_req, res) => {
      res.json({ run: count('any') });
    });
    server.post('/required', app({ store, required: true }), (_req, res) => {
      res.json({ run: count('required') });
    });
    server.post('/optional', app({ store }), (_req, res) => {
      res.json({ run: count('optional') });
    });
    let failFirst = true;
    server.post('/flaky', app({ store }), (_req, res) => {
      count('flaky');
      if (failFirst) {
        failFirst = false;
        res.status(503).json({ error: 'try later' });
        return;
      }
      res.json({ ok: true });
    });
    let throwFirst = true;
    server.post('/throws', app({ store }), (_req, res) => {
      count('throws');
      if (throwFirst) {
        throwFirst = false;
        throw new Error('handler bug');
      }
      res.json({ ok: true });
    });
    server.post('/refused', app({ store }), (_req, res) => {
      res.status(402).json({ run: count('refused'), error: 'card declined' });
    });
    server.post('/big', app({ store, maxResponseBytes: 1000 }), (_req, res) => {
      count('big');
      res.type('text/plain').send('x'.repeat(5000));
    });
    server.post('/streamed', app({ store }), (_req, res) => {
      const n = count('streamed');
      res.status(200).setHeader('content-type', 'text/plain');
      res.write('part one; ');
      res.write(Buffer.from(`run ${n}; `));
      res.end('the end');
    });
    server.post('/tenant', app({ store, scope: (req: Request) => String(req.headers['x-tenant'] ?? '') }), (_req, res) => {
      res.json({ run: count('tenant') });
    });
    served = await serve(server);
    base = `http://127.0.0.1:${served.port}`;
  });
  afterAll(async () => {
    await served?.close();
  });

  it('replays the first response byte for byte: status, selected headers and body, without running the handler again', async () => {
    const key = keyOf();
    const before = runs.get('orders') ?? 0;
    const first = await call(`${base}/orders`, { key, body: '{"item":"book","qty":2}' });
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const again = await call(`${base}/orders`, { key, body: '{"item":"book","qty":2}' });
    const third = await call(`${base}/orders`, { key, body: '{"item":"book","qty":2}' });
    expect(runs.get('orders')).toBe(before + 1);
    for (const replay of [again, third]) {
      expect(replay.status).toBe(201);
      expect(replay.bytes.equals(first.bytes)).toBe(true);
      expect(replay.headers.get('etag')).toBe(first.headers.get('etag'));
      expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
      expect(replay.headers.get('content-length')).toBe(String(first.bytes.length));
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      // Not among the selected headers: not replayed.
      expect(replay.headers.get('x-not-replayed')).toBeNull();
    }
    // A new key is a new request.
    const other = await call(`${base}/orders`, { key: keyOf(), body: '{"item":"book","qty":2}' });
    expect(other.status).toBe(201);
    expect(other.bytes.equals(first.bytes)).toBe(false);
    expect(runs.get('orders')).toBe(before + 2);
  });

  it('replays a streamed response (several writes) as the same bytes, and a 4xx as the same 4xx', async () => {
    const key = keyOf();
    const first = await call(`${base}/streamed`, { key });
    const replay = await call(`${base}/streamed`, { key });
    expect(first.status).toBe(200);
    expect(first.bytes.toString()).toMatch(/^part one; run \d+; the end$/);
    expect(replay.bytes.equals(first.bytes)).toBe(true);
    const refusedKey = keyOf();
    const refused = await call(`${base}/refused`, { key: refusedKey });
    const refusedAgain = await call(`${base}/refused`, { key: refusedKey });
    expect(refused.status).toBe(402);
    expect(refusedAgain.status).toBe(402);
    expect(refusedAgain.bytes.equals(refused.bytes)).toBe(true);
    expect(runs.get('refused')).toBe(1);
  });

  it('answers 422 for the same key with another body, target or method, and runs nothing', async () => {
    const key = keyOf();
    expect((await call(`${base}/orders`, { key, body: '{"item":"pen"}' })).status).toBe(201);
    const before = runs.get('orders');
    for (const [path, init] of [
      ['/orders', { key, body: '{"item":"ink"}' }],
      ['/orders?express=1', { key, body: '{"item":"pen"}' }],
    ] as const) {
      const answer = await call(`${base}${path}`, init);
      expect(answer.status).toBe(422);
      expect(answer.headers.get('content-type')).toBe('application/problem+json');
      expect(answer.json()).toMatchObject({ status: 422, code: 'IDEMPOTENCY_KEY_REUSED' });
    }
    expect(runs.get('orders')).toBe(before);
    const methodKey = keyOf();
    expect((await call(`${base}/any`, { key: methodKey, method: 'POST' })).status).toBe(200);
    const put = await call(`${base}/any`, { key: methodKey, method: 'PUT' });
    expect(put.status).toBe(422);
    expect(put.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
    expect(runs.get('any')).toBe(1);
  });

  it('answers 409 to a retry while the first request is still running, then replays once it has answered', async () => {
    gate = deferred();
    entered = deferred();
    const key = keyOf();
    const first = call(`${base}/slow`, { key });
    await within(entered.promise, 20_000, 'the first request to reach its handler');
    const during = await call(`${base}/slow`, { key });
    expect(during.status).toBe(409);
    expect(during.json()).toMatchObject({ status: 409, code: 'IDEMPOTENCY_KEY_IN_USE' });
    // Another body while it runs is a misuse of the key, not a wait.
    expect((await call(`${base}/slow`, { key, body: '{"other":true}' })).status).toBe(422);
    gate.resolve();
    const done = await first;
    expect(done.status).toBe(200);
    const after = await call(`${base}/slow`, { key });
    expect(after.status).toBe(200);
    expect(after.bytes.equals(done.bytes)).toBe(true);
    expect(runs.get('slow')).toBe(1);
  });

  it('400 for a missing key where required; without required a request without a key runs every time', async () => {
    const missing = await call(`${base}/required`);
    expect(missing.status).toBe(400);
    expect(missing.headers.get('content-type')).toBe('application/problem+json');
    expect(missing.json()).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_MISSING' });
    expect(runs.get('required')).toBeUndefined();
    expect((await call(`${base}/required`, { key: keyOf() })).status).toBe(200);
    const a = await call(`${base}/optional`);
    const b = await call(`${base}/optional`);
    expect([a.json(), b.json()]).toEqual([{ run: 1 }, { run: 2 }]);
  });

  it('does not keep a 5xx or a thrown handler: the retry runs again', async () => {
    const key = keyOf();
    expect((await call(`${base}/flaky`, { key })).status).toBe(503);
    const retry = await call(`${base}/flaky`, { key });
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect((await call(`${base}/flaky`, { key })).headers.get('idempotent-replayed')).toBe('true');
    expect(runs.get('flaky')).toBe(2);

    const thrownKey = keyOf();
    expect((await call(`${base}/throws`, { key: thrownKey })).status).toBe(500);
    expect((await call(`${base}/throws`, { key: thrownKey })).status).toBe(200);
    expect(runs.get('throws')).toBe(2);
  });

  it('passes a response larger than maxResponseBytes through, and answers its replay 409 IDEMPOTENT_RESPONSE_NOT_KEPT', async () => {
    const key = keyOf();
    const first = await call(`${base}/big`, { key });
    expect(first.status).toBe(200);
    expect(first.bytes.toString()).toBe('x'.repeat(5000));
    const replay = await call(`${base}/big`, { key });
    expect(replay.status).toBe(409);
    expect(replay.json()).toMatchObject({ code: 'IDEMPOTENT_RESPONSE_NOT_KEPT' });
    expect(runs.get('big')).toBe(1);
  });

  it('keeps the keys of one scope apart from another\'s', async () => {
    const key = keyOf();
    const a = await call(`${base}/tenant`, { key, headers: { 'x-tenant': 'a' } });
    const b = await call(`${base}/tenant`, { key, headers: { 'x-tenant': 'b' } });
    const a2 = await call(`${base}/tenant`, { key, headers: { 'x-tenant': 'a' } });
    expect(a.json()).not.toEqual(b.json());
    expect(a2.bytes.equals(a.bytes)).toBe(true);
    expect(runs.get('tenant')).toBe(2);
  });

  it('answers 400 for a malformed or repeated header, and an unquoted key names the same key as its quoted form', async () => {
    for (const bad of ['""', '"unterminated', 'two words', `"${'k'.repeat(256)}"`]) {
      const answer = await call(`${base}/optional`, { key: bad });
      expect({ bad, status: answer.status }).toEqual({ bad, status: 400 });
      expect(answer.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
    }
    // A list of keys on one line is what repeated lines are once a hop joins
    // them (RFC 9110 section 5.3): answered as repeated, as the Fetch guard must.
    const list = await call(`${base}/optional`, { key: '"a", "b"' });
    expect(list.status).toBe(400);
    expect(list.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REPEATED' });
    const repeated = await rawStatus(served.port, '/optional', [Buffer.from('Idempotency-Key: "a"'), Buffer.from('idempotency-key: "a"')]);
    expect(repeated.status).toBe(400);
    expect(JSON.parse(repeated.body)).toMatchObject({ code: 'IDEMPOTENCY_KEY_REPEATED' });
    const id = crypto.randomUUID();
    const quoted = await call(`${base}/orders`, { key: `"${id}"`, body: '{}' });
    const unquoted = await call(`${base}/orders`, { key: id, body: '{}' });
    expect(unquoted.headers.get('idempotent-replayed')).toBe('true');
    expect(unquoted.bytes.equals(quoted.bytes)).toBe(true);
  });

  it('runs the handler again once the retention period has passed', async () => {
    const server = express();
    let n = 0;
    server.post('/short', idempotency({ store: flavor.make({ retentionMs: 100 }) }), (_req, res) => {
      res.json({ run: ++n });
    });
    const short = await serve(server);
    try {
      const key = keyOf();
      const url = `http://127.0.0.1:${short.port}/short`;
      expect((await call(url, { key })).json()).toEqual({ run: 1 });
      // Well past the retention: the key is unknown again.
      await new Promise((r) => setTimeout(r, 400));
      expect((await call(url, { key })).json()).toEqual({ run: 2 });
    } finally {
      await short.close();
    }
  });

  it('lets another request claim a key whose first request ran past maxRunningMs; the late first answer is not kept', async () => {
    const server = express();
    let n = 0;
    const hold = deferred();
    const holding = deferred();
    server.post('/stuck', idempotency({ store: flavor.make({ maxRunningMs: 100 }) }), async (_req, res) => {
      const run = ++n;
      if (run === 1) {
        holding.resolve();
        await hold.promise;
      }
      res.json({ run });
    });
    const stuck = await serve(server);
    try {
      const key = keyOf();
      const url = `http://127.0.0.1:${stuck.port}/stuck`;
      const first = call(url, { key });
      await within(holding.promise, 20_000, 'the first request to hold the key');
      await new Promise((r) => setTimeout(r, 400));
      const second = await call(url, { key });
      expect(second.json()).toEqual({ run: 2 });
      hold.resolve();
      expect((await first).json()).toEqual({ run: 1 });
      const third = await call(url, { key });
      expect(third.headers.get('idempotent-replayed')).toBe('true');
      expect(third.json()).toEqual({ run: 2 });
    } finally {
      await stuck.close();
    }
  });

  it('reads a body no parser has read, fingerprints it, and leaves it in req.body as a Buffer', async () => {
    const server = express();
    const seen: string[] = [];
    server.post('/raw', idempotency({ store: flavor.make() }), (req, res) => {
      seen.push(Buffer.isBuffer(req.body) ? `buffer:${(req.body as Buffer).toString()}` : typeof req.body);
      res.json({ n: seen.length });
    });
    const raw = await serve(server);
    try {
      const key = keyOf();
      const url = `http://127.0.0.1:${raw.port}/raw`;
      const headers = { 'content-type': 'text/plain' };
      expect((await call(url, { key, body: 'first body', headers })).json()).toEqual({ n: 1 });
      expect((await call(url, { key, body: 'first body', headers })).json()).toEqual({ n: 1 });
      expect((await call(url, { key, body: 'other body', headers })).status).toBe(422);
      expect(seen).toEqual(['buffer:first body']);
    } finally {
      await raw.close();
    }
  });

  it('behind express.json({ verify: keepRawBody }) fingerprints the bytes: bodies that parse alike are different requests; without it, as documented, the parsed value', async () => {
    const server = express();
    const handled: unknown[] = [];
    const handler = (req: Request, res: express.Response): void => {
      handled.push(req.body);
      res.status(201).json({ n: handled.length });
    };
    server.post('/bytes', express.json({ verify: keepRawBody }), idempotency({ store: flavor.make() }), handler);
    server.post('/parsed', express.json(), idempotency({ store: flavor.make() }), handler);
    const app = await serve(server);
    try {
      const url = (path: string): string => `http://127.0.0.1:${app.port}${path}`;
      // Equal as doubles, different as bytes.
      const first = '{"amount":10000000000000001}';
      const second = '{"amount":10000000000000000}';
      const key = keyOf();
      expect((await call(url('/bytes'), { key, body: first })).status).toBe(201);
      const reused = await call(url('/bytes'), { key, body: second });
      expect(reused.status).toBe(422);
      expect(reused.json()).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });
      // Another spacing of the same value is other bytes too; the same bytes replay.
      expect((await call(url('/bytes'), { key, body: '{"amount": 10000000000000001}' })).status).toBe(422);
      const again = await call(url('/bytes'), { key, body: first });
      expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
      expect(handled).toHaveLength(1);

      // Without the hook the bytes are gone: the parsed value is fingerprinted.
      const parsedKey = keyOf();
      expect((await call(url('/parsed'), { key: parsedKey, body: first })).status).toBe(201);
      const alike = await call(url('/parsed'), { key: parsedKey, body: second });
      expect([alike.status, alike.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
      expect(handled).toHaveLength(2);
    } finally {
      await app.close();
    }
  });

  it('keepRawBody used as a middleware instead of body-parser\'s verify: INVALID_ARGUMENT', () => {
    const next = (): void => undefined;
    expect(() => keepRawBody({} as never, {} as never, next as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('verify') }));
  });

  it('fuzzed Idempotency-Key headers (fast-check): never a 500, and a refused one runs nothing', async () => {
    const server = express();
    let handled = 0;
    server.post('/fuzz', idempotency({ store: flavor.make(), required: true }), (_req, res) => {
      handled += 1;
      res.json({ ok: true });
    });
    const fuzz = await serve(server);
    const value = fc
      .oneof(
        fc.string({ unit: 'binary', maxLength: 60 }).map((t) => Buffer.from(t, 'utf8')),
        fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a)),
        fc.string({ unit: fc.constantFrom('"', '\\', ';', '=', ',', ' ', 'a', '1', '-', ':', '?', '*', '\t', 'é'), maxLength: 40 }).map((t) => Buffer.from(t, 'utf8')),
        fc.uuid().map((u) => Buffer.from(`"${u}"`)),
        fc.integer({ min: 200, max: 12_000 }).map((n) => Buffer.from(`"${'k'.repeat(n)}"`)),
      )
      .filter((bytes) => !bytes.includes(0x0d) && !bytes.includes(0x0a));
    const names = fc.constantFrom('Idempotency-Key', 'idempotency-key', 'IDEMPOTENCY-KEY');
    const headers = fc.array(fc.record({ name: names, value }), { minLength: 0, maxLength: 3 }).filter((list) => list.reduce((s, h) => s + h.name.length + h.value.length + 4, 0) < 14_000);
    try {
      await fc.assert(
        fc.asyncProperty(headers, async (list) => {
          const before = handled;
          const { status } = await rawStatus(fuzz.port, '/fuzz', list.map((h) => Buffer.concat([Buffer.from(`${h.name}: `), h.value])));
          expect([200, 400, 409, 422]).toContain(status);
          if (status === 400) expect(handled).toBe(before);
        }),
        { numRuns: flavor.name === 'MemoryIdempotencyStore' ? 400 : 150 },
      );
    } finally {
      await fuzz.close();
    }
  });
});
