// fencekeeper/fetch called directly with Request objects (no server): the
// answers, the admission held until the body is read or cancelled, the body
// passed through unchanged, and what a throwing handler, a client that left,
// maxHoldMs and the Idempotency-Key guard do.
import { describe, expect, it } from 'vitest';
import { MemoryFenceStore, MemoryIdempotencyStore, withFencing, withIdempotency, type FencingContext } from '../../../adapters/fetch/index.js';
import { FenceReleasedError } from '../../../src/index.js';

const URL_ = 'http://fetch.test/doc';
const put = (token?: string | string[], init: RequestInit = {}): Request => {
  const headers = new Headers(init.headers);
  for (const t of token === undefined ? [] : Array.isArray(token) ? token : [token]) headers.append('fencing-token', t);
  return new Request(URL_, { method: 'PUT', ...init, headers });
};
const json = async (response: Response): Promise<Record<string, unknown>> => JSON.parse(await response.text()) as Record<string, unknown>;
const tick = (ms = 20): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('withFencing()', () => {
  it('admits a token and hands the handler its admission; refuses missing, malformed, repeated and stale tokens as problem+json', async () => {
    const store = new MemoryFenceStore();
    const seen: FencingContext[] = [];
    const guarded = withFencing({ store, resource: 'fetch/doc' }, (_request, fencing) => {
      seen.push(fencing);
      return new Response('ok');
    });
    const ok = await guarded(put('7'));
    expect(ok.status).toBe(200);
    expect(await ok.text()).toBe('ok');
    expect(seen[0]).toMatchObject({ resource: 'fetch/doc', token: 7n, previous: null });

    const cases: [Request, number, string][] = [
      [put(), 428, 'MISSING_TOKEN'],
      [put('07x'), 400, 'INVALID_TOKEN'],
      [put(['8', '8']), 400, 'REPEATED_TOKEN'],
      [put('6'), 409, 'STALE_TOKEN'],
    ];
    for (const [request, status, code] of cases) {
      const response = await guarded(request);
      expect(response.status).toBe(status);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.headers.get('cache-control')).toBe('no-store');
      expect(await json(response)).toMatchObject({ type: 'about:blank', status, code });
    }
    const stale = await json(await guarded(put('6')));
    expect(stale).toMatchObject({ resource: 'fetch/doc', presented: '6', current: '7' });
    expect(seen).toHaveLength(1);
  });

  it('verify: only true admits (403), a throw is 503', async () => {
    const store = new MemoryFenceStore();
    const handler = (): Response => new Response('ok');
    expect((await withFencing({ store, resource: 'fetch/v', verify: () => false }, handler)(put('1'))).status).toBe(403);
    expect((await withFencing({ store, resource: 'fetch/v', verify: () => Promise.reject(new Error('down')) }, handler)(put('1'))).status).toBe(503);
    expect(await store.current('fetch/v')).toBeNull();
    expect((await withFencing({ store, resource: 'fetch/v', verify: (token) => token === 1n }, handler)(put('1'))).status).toBe(200);
  });

  it('holds the admission until the response body has been read, and passes a streamed body through byte for byte', async () => {
    const store = new MemoryFenceStore();
    const chunks = [new Uint8Array([0, 1, 2, 255]), new TextEncoder().encode('héllo'), new Uint8Array(70_000).fill(7)];
    const order: string[] = [];
    const guarded = withFencing({ store, resource: 'fetch/stream' }, (request) => {
      order.push(`run ${request.headers.get('fencing-token')}`);
      let i = 0;
      return new Response(new ReadableStream<Uint8Array>({
        pull(controller) {
          const next = chunks[i++];
          if (next === undefined) controller.close();
          else controller.enqueue(next);
        },
      }));
    });
    const first = await guarded(put('1'));
    const second = guarded(put('2'));
    await tick();
    // The first handler has returned, its body is unread: the second waits.
    expect(order).toEqual(['run 1']);
    const bytes = new Uint8Array(await first.arrayBuffer());
    expect(Buffer.from(bytes).equals(Buffer.concat(chunks))).toBe(true);
    await (await second).arrayBuffer();
    expect(order).toEqual(['run 1', 'run 2']);
  });

  it('a cancelled body releases the admission and aborts the signal; the mark stays', async () => {
    const store = new MemoryFenceStore();
    let signal: AbortSignal | undefined;
    const guarded = withFencing({ store, resource: 'fetch/cancel' }, (_request, fencing) => {
      signal = fencing.signal;
      return new Response(new ReadableStream({ pull: (c) => c.enqueue(new Uint8Array(8)) }));
    });
    const first = await guarded(put('5'));
    await first.body!.cancel();
    expect(signal!.aborted).toBe(true);
    expect(signal!.reason).toBeInstanceOf(FenceReleasedError);
    expect((await guarded(put('4'))).status).toBe(409);
    const next = await guarded(put('5'));
    expect(next.status).toBe(200);
    await next.body!.cancel();
  });

  it('a handler that throws has its admission aborted and the error thrown on; one whose body fails mid-way is broken off', async () => {
    const store = new MemoryFenceStore();
    const boom = new Error('boom');
    await expect(withFencing({ store, resource: 'fetch/throw' }, () => { throw boom; })(put('3'))).rejects.toBe(boom);
    // Released: the next request is admitted at once; the mark kept.
    const failing = withFencing({ store, resource: 'fetch/throw' }, () => new Response(new ReadableStream({
      start(controller) {
        controller.enqueue(new Uint8Array([1]));
        controller.error(boom);
      },
    })));
    const broken = await failing(put('3'));
    expect(broken.status).toBe(200);
    await expect(broken.arrayBuffer()).rejects.toBe(boom);
    expect((await withFencing({ store, resource: 'fetch/throw' }, () => new Response('ok'))(put('2'))).status).toBe(409);
    expect((await withFencing({ store, resource: 'fetch/throw' }, () => new Response('ok'))(put('3'))).status).toBe(200);
  });

  it('a handler whose promise rejects has its admission aborted and the rejection passed on', async () => {
    const store = new MemoryFenceStore();
    const boom = new Error('boom');
    const rejecting = withFencing({ store, resource: 'fetch/reject' }, async () => {
      await tick();
      throw boom;
    });
    await expect(rejecting(put('3'))).rejects.toBe(boom);
    // Released: the next requests are answered at once (a held admission would keep them waiting); the mark kept.
    expect((await withFencing({ store, resource: 'fetch/reject' }, () => new Response('ok'))(put('2'))).status).toBe(409);
    expect((await withFencing({ store, resource: 'fetch/reject' }, () => new Response('ok'))(put('3'))).status).toBe(200);
    // (the bound: a held admission would keep the last request waiting maxHoldMs, 30 s)
  }, 10_000);

  it('a request aborted while its handler runs releases the admission and aborts the signal', async () => {
    const store = new MemoryFenceStore();
    const client = new AbortController();
    let signal: AbortSignal | undefined;
    let finish: (() => void) | undefined;
    const guarded = withFencing({ store, resource: 'fetch/abort' }, async (_request, fencing) => {
      signal = fencing.signal;
      await new Promise<void>((resolve) => (finish = resolve));
      return new Response('late');
    });
    const pending = guarded(put('9', { signal: client.signal }));
    await tick();
    client.abort();
    expect(signal!.aborted).toBe(true);
    const next = await withFencing({ store, resource: 'fetch/abort' }, () => new Response('next'))(put('9'));
    expect(await next.text()).toBe('next');
    finish!();
    await pending;
  });

  it('past maxHoldMs a handler that has not returned gets 503 FENCE_HOLD_EXPIRED in its place', async () => {
    const store = new MemoryFenceStore();
    let signal: AbortSignal | undefined;
    const guarded = withFencing({ store, resource: 'fetch/hold', maxHoldMs: 50 }, async (_request, fencing) => {
      signal = fencing.signal;
      await tick(300);
      return new Response('too late');
    });
    const response = await guarded(put('1'));
    expect(response.status).toBe(503);
    expect(await json(response)).toMatchObject({ code: 'FENCE_HOLD_EXPIRED' });
    expect((signal!.reason as FenceReleasedError).reason).toBe('hold_expired');
  });

  it('serializes two concurrent admissions of one resource: their handlers never overlap', async () => {
    const store = new MemoryFenceStore();
    let inside = 0;
    let overlapped = false;
    const guarded = withFencing({ store, resource: 'fetch/serial' }, async () => {
      inside++;
      if (inside > 1) overlapped = true;
      await tick(30);
      inside--;
      return new Response('ok');
    });
    // Each body read as it comes: the next admission waits for that read.
    const read = (): Promise<string> => guarded(put('1')).then((r) => r.text());
    expect(await Promise.all([read(), read(), read()])).toEqual(['ok', 'ok', 'ok']);
    expect(overlapped).toBe(false);
  });

  it('bad options are refused before any request', () => {
    expect(() => withFencing({ store: {} as never, resource: 'x' }, () => new Response())).toThrow(/store/);
    expect(() => withFencing({ store: new MemoryFenceStore(), resource: '' }, () => new Response())).toThrow(/resource/);
    expect(() => withFencing({ store: new MemoryFenceStore(), resource: 'x', maxHoldMs: 0 }, () => new Response())).toThrow(/maxHoldMs/);
  });
});

describe('withIdempotency()', () => {
  const post = (key: string | undefined, body: string, extra: Record<string, string> = {}): Request =>
    new Request('http://fetch.test/orders?x=1', { method: 'POST', body, headers: { ...(key === undefined ? {} : { 'idempotency-key': key }), ...extra } });

  it('replays the first response byte for byte with idempotent-replayed; 422 for another body; 409 while running', async () => {
    const store = new MemoryIdempotencyStore();
    let runs = 0;
    let release: (() => void) | undefined;
    const guarded = withIdempotency({ store }, async (request) => {
      runs++;
      if ((await request.text()) === 'slow') await new Promise<void>((resolve) => (release = resolve));
      return new Response(new Uint8Array([1, 2, 3, runs]), { status: 201, headers: { 'content-type': 'application/octet-stream', etag: '"a"', 'x-other': 'no' } });
    });
    const first = await guarded(post('"k1"', 'one'), undefined);
    const firstBytes = Buffer.from(await first.arrayBuffer());
    const again = await guarded(post('"k1"', 'one'), undefined);
    expect(again.status).toBe(201);
    expect(Buffer.from(await again.arrayBuffer()).equals(firstBytes)).toBe(true);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('etag')).toBe('"a"');
    expect(again.headers.get('x-other')).toBeNull();
    expect(runs).toBe(1);
    const reused = await guarded(post('"k1"', 'two'), undefined);
    expect(reused.status).toBe(422);
    expect(await json(reused)).toMatchObject({ code: 'IDEMPOTENCY_KEY_REUSED' });

    const slow = guarded(post('k2', 'slow'), undefined);
    await tick();
    const busy = await guarded(post('k2', 'slow'), undefined);
    expect(busy.status).toBe(409);
    expect(await json(busy)).toMatchObject({ code: 'IDEMPOTENCY_KEY_IN_USE' });
    release!();
    expect((await slow).status).toBe(201);
  });

  it('413 past maxRequestBytes, 400 for a repeated or malformed key, untouched without one', async () => {
    const store = new MemoryIdempotencyStore();
    const guarded = withIdempotency({ store, maxRequestBytes: 8 }, () => new Response('ran'));
    const large = await guarded(post('k', '123456789'), undefined);
    expect(large.status).toBe(413);
    expect(await json(large)).toMatchObject({ code: 'IDEMPOTENCY_BODY_TOO_LARGE' });
    const repeated = new Request('http://fetch.test/o', { method: 'POST', body: 'x', headers: [['idempotency-key', 'a'], ['idempotency-key', 'b']] });
    expect(await json(await guarded(repeated, undefined))).toMatchObject({ code: 'IDEMPOTENCY_KEY_REPEATED' });
    expect(await json(await guarded(post('"a', 'x'), undefined))).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID' });
    expect(await (await guarded(post(undefined, 'x'), undefined)).text()).toBe('ran');
  });

  it('behind withFencing: the handler gets the fencing context and the body bytes', async () => {
    const guarded = withFencing({ store: new MemoryFenceStore(), resource: 'fetch/both' }, withIdempotency({ store: new MemoryIdempotencyStore() }, async (request, fencing: FencingContext) => {
      return new Response(`${fencing.token}:${await request.text()}`);
    }));
    const request = (): Request => new Request('http://fetch.test/both', { method: 'POST', body: 'payload', headers: { 'fencing-token': '4', 'idempotency-key': 'k' } });
    expect(await (await guarded(request())).text()).toBe('4:payload');
    const replayed = await guarded(request());
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect(await replayed.text()).toBe('4:payload');
  });
});
