// idempotency as a Fastify plugin, with fencekeeper/express's answers (the
// shared core: src/shared/http/idempotency/). The request body's bytes are
// read in a preParsing hook (up to maxRequestBytes: 413 past it) and handed
// on to Fastify's parser unchanged, so the fingerprint covers the bytes as
// sent, not a parsed value; the key is looked up in a preHandler hook (after
// the fencing plugin's, when that is registered first: then through the
// fence's transaction), and the handler's response is stored in an onSend
// hook, before Fastify writes it.
import { Readable } from 'node:stream';
import fp from 'fastify-plugin';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { IdempotencyClaim } from '../../src/index.js';
import {
  NO_KEY,
  UNREADABLE_BODY,
  fingerprint,
  giveBack,
  groupedHeaders,
  idempotencySettings,
  keep,
  lookUp,
  nodeScopedKey,
  throughFence,
  tooLarge,
  type IdempotencyGuardOptions,
  type ScopedKey,
} from '../../src/shared/http/idempotency/core.js';
import { PROBLEM_HEADERS, problemBody } from '../../src/shared/http/problem.js';
import { replyProblem } from './fencing.js';

/** idempotency's options, with `scope` a function of the Fastify request. */
export type FastifyIdempotencyOptions = IdempotencyGuardOptions<FastifyRequest>;

/** One request's way through the plugin's hooks. */
interface State {
  readonly key: ScopedKey;
  body: Buffer;
  claim?: IdempotencyClaim | undefined;
  on?: { transaction: unknown } | undefined;
}

const EMPTY = Buffer.alloc(0);

const plugin: FastifyPluginAsync<FastifyIdempotencyOptions> = async (instance, options) => {
  const settings = idempotencySettings<FastifyRequest>('fastify', options, 'idempotency plugin');
  const states = new WeakMap<FastifyRequest, State>();

  instance.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    const key = nodeScopedKey(settings, request.raw, request);
    if (key === NO_KEY) return undefined;
    if ('status' in key) return replyProblem(reply, key);
    states.set(request, { key, body: EMPTY });
    return undefined;
  });

  instance.addHook('preParsing', async (request: FastifyRequest, reply: FastifyReply, payload) => {
    const state = states.get(request);
    if (state === undefined) return payload;
    const read = await readLimited(payload, settings.maxRequestBytes);
    if (read === 'too large') {
      reply.header('connection', 'close');
      replyProblem(reply, tooLarge(settings));
      return payload;
    }
    if (read === 'unreadable') {
      replyProblem(reply, UNREADABLE_BODY);
      return payload;
    }
    state.body = read;
    // Fastify's parser gets the same bytes.
    return Object.assign(Readable.from(read.length === 0 ? [] : [read]), { receivedEncodedLength: read.length });
  });

  instance.addHook('preHandler', async (request: FastifyRequest, reply: FastifyReply) => {
    const state = states.get(request);
    if (state === undefined || reply.sent) return undefined;
    const print = fingerprint(request.method, request.url, state.body);
    const on = throughFence(request.fencing);
    const found = await lookUp(settings, state.key, print, on);
    if (found.kind === 'problem') return replyProblem(reply, found.problem);
    if (found.kind === 'replay') {
      const stored = found.response;
      reply.code(stored.status);
      for (const [name, values] of groupedHeaders(stored)) reply.header(name, values.length === 1 ? values[0]! : values);
      reply.header('idempotent-replayed', 'true');
      const body = stored.body ?? new Uint8Array(0);
      return reply.send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    }
    if (reply.raw.closed || reply.raw.writableEnded) {
      await giveBack(settings, found.claim, on);
      return undefined;
    }
    state.claim = found.claim;
    state.on = on;
    return undefined;
  });

  instance.addHook('onSend', async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const state = states.get(request);
    const claim = state?.claim;
    if (state === undefined || claim === undefined) return payload;
    state.claim = undefined; // once: a problem written below passes here again
    const headers: [string, string][] = [];
    for (const [name, value] of Object.entries(reply.getHeaders())) {
      if (value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) headers.push([name.toLowerCase(), String(one)]);
    }
    let body: Uint8Array | null;
    let out: unknown = payload;
    if (payload === null || payload === undefined) body = new Uint8Array(0);
    else if (typeof payload === 'string') body = new Uint8Array(Buffer.from(payload, 'utf8'));
    else if (payload instanceof Uint8Array) body = new Uint8Array(payload);
    else if (payload instanceof Readable) {
      const collected = await collect(payload, settings.maxResponseBytes);
      body = collected.whole ? collected.head : null;
      out = collected.whole ? collected.head : collected.rest;
    } else body = null;
    const failed = await keep(settings, claim, reply.statusCode, headers, body, state.on);
    if (failed === undefined) return out;
    // In the fence's transaction: the failed write undid the handler's, so its answer would be a lie.
    for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
    reply.code(failed.status);
    for (const [name, value] of PROBLEM_HEADERS) reply.header(name, value);
    return Buffer.from(problemBody(failed));
  });
};

/** The whole payload up to `limit` bytes; past it, the rest is left flowing. */
async function readLimited(payload: NodeJS.ReadableStream, limit: number): Promise<Buffer | 'too large' | 'unreadable'> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of payload as AsyncIterable<Buffer | string>) {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += bytes.length;
      if (size > limit) return 'too large';
      chunks.push(bytes);
    }
  } catch {
    return 'unreadable';
  }
  return Buffer.concat(chunks);
}

/** A response stream read up to `limit` bytes: all of it (`whole`), or a stream of what was read followed by the rest. */
async function collect(stream: Readable, limit: number): Promise<{ whole: true; head: Buffer } | { whole: false; rest: Readable }> {
  const chunks: Buffer[] = [];
  let size = 0;
  const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer | string>;
  for (;;) {
    const next = await iterator.next();
    if (next.done === true) return { whole: true, head: Buffer.concat(chunks) };
    const bytes = typeof next.value === 'string' ? Buffer.from(next.value) : next.value;
    chunks.push(bytes);
    size += bytes.length;
    if (size > limit) {
      async function* rest(): AsyncGenerator<Buffer> {
        yield* chunks;
        for (let n = await iterator.next(); n.done !== true; n = await iterator.next()) yield typeof n.value === 'string' ? Buffer.from(n.value) : n.value;
      }
      return { whole: false, rest: Readable.from(rest()) };
    }
  }
}

/**
 * The Idempotency-Key guard as a Fastify plugin: `await
 * app.register(idempotency, { store })`, after the fencing plugin when the
 * routes have one. The first request with a key runs the handler and its
 * response (below 500) is stored before Fastify writes it; a retry with the
 * same key and fingerprint (method, URL, body bytes) gets it back with
 * `idempotent-replayed: true`, one while the first runs 409, one with
 * another fingerprint 422, a body past maxRequestBytes 413; a missing
 * (when `required`), malformed or repeated key 400.
 */
export const idempotency = fp(plugin, { fastify: '4.x || 5.x', name: 'fencekeeper-idempotency' }) as FastifyPluginAsync<FastifyIdempotencyOptions>;
