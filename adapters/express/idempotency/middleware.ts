// idempotency(): the server half of the IETF httpapi draft "The
// Idempotency-Key HTTP Header Field": a client that did not get an answer (a
// timeout, a reset connection) sends the request again with the same key,
// and gets the first answer again instead of a second execution.
//
// Per request carrying an Idempotency-Key (section 2.1; see ./key.ts):
// - first time (key and fingerprint not seen, section 2.6): the handler runs;
//   its status, selected headers and body are stored before the client sees
//   them, and replayed to every retry until the store's retention ends;
// - a retry after the first completed, same fingerprint: the stored response,
//   byte for byte, with `idempotent-replayed: true`;
// - a retry while the first is still running: 409 IDEMPOTENCY_KEY_IN_USE
//   (section 2.7: "the resource server MUST respond with a resource conflict");
// - the same key with another fingerprint: 422 IDEMPOTENCY_KEY_REUSED;
// - no key on a route that requires one: 400 IDEMPOTENCY_KEY_MISSING; a
//   malformed key, or the header sent twice: 400 IDEMPOTENCY_KEY_INVALID /
//   IDEMPOTENCY_KEY_REPEATED. Nothing a client sends answers 500.
// The fingerprint (section 2.4) is SHA-256 over the method, the request target
// (path and query) and the body (see "The body" below for which bytes).
//
// A response with a status of 500 or more is not stored: the claim is given
// up and a retry runs the handler again (behind fencing(), a 5xx also rolls
// back the writes made through req.fencing.transaction). The handler must
// then not have acted outside that transaction.
//
// A handler that fails after it started its response (a write, a writeHead)
// finds res.headersSent true, as without the middleware (see
// ./capture.ts), so Express closes the connection. Its response
// never ends, so nothing is stored, and the claim is left as a running
// request's (the handler may be one that is still running while its client
// left): a retry gets 409 until the store's maxRunningMs, then runs again.
// Behind fencing(), the connection's close aborts the fence's transaction,
// which takes a claim written through it along.
//
// With fencing() on the same route (fencing first, then idempotency) and a
// PostgresFenceStore, pass a PostgresIdempotencyStore on the same database:
// the claim and the stored response are written through
// req.fencing.transaction, so they commit or roll back with the handler's
// writes. A replay then never answers a success whose writes were rolled
// back: if the commit fails, the key is unknown again and a retry runs anew.
//
// The body. The draft fingerprints the request's bytes, and a parsed body
// cannot give them back: {"amount":10000000000000001} and
// {"amount":10000000000000000} parse to the same number, so a key reused for
// the second would be answered with the first's response instead of 422. So,
// in this order:
// - no body parser has read it: idempotency() reads it itself, up to
//   maxRequestBytes (413 past it), fingerprints those bytes and leaves them
//   in req.body as a Buffer, as express.raw() would;
// - a body-parser (express.json(), .urlencoded(), .text(), .raw()) given
//   `verify: keepRawBody` kept the bytes it read: those bytes (after any
//   Content-Encoding was undone);
// - req.body is a Buffer or a string (express.raw(), express.text()): its bytes;
// - otherwise req.body is a parsed value, and its JSON.stringify() is
//   fingerprinted: bodies that parse to the same value (another spacing, key
//   order aside, digits past a double's precision, a repeated key) share a
//   fingerprint. The bytes are gone by then; keepRawBody is the way to keep them.
// idempotency() cannot sit before a JSON or form parser: the parser would
// find the body consumed. Put it after, with keepRawBody.
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { debuglog } from 'node:util';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { InvalidArgumentError, type IdempotencyClaim, type IdempotencyStore, type StoredResponse } from '../../../src/index.js';
import { ResponseCapture, type Captured } from './capture.js';
import { REPEATED, parseIdempotencyKey, singleHeader } from './key.js';
import { sendProblem, type IdempotencyProblemCode } from '../problem.js';
import { answerStoreFailure } from '../store-failure.js';

const debug = debuglog('fencekeeper');

/**
 * idempotency()'s options: the response `store`, whether the key is `required`,
 * the `scope` that keeps one client's keys apart from another's, the headers
 * replayed, and the request and response size limits.
 */
export interface IdempotencyOptions {
  /** Where responses are kept: MemoryIdempotencyStore (one process), PostgresIdempotencyStore, or your own. */
  readonly store: IdempotencyStore<unknown>;
  /** Answer 400 to a request without an Idempotency-Key. Default false: such a request passes through untouched. */
  readonly required?: boolean;
  /**
   * The partition a client's keys live in, so one client can neither replay
   * nor block another's (the draft's security considerations: combine the
   * key with what the server knows of the client). A string of at most 1024
   * characters; default '' (one namespace for everyone).
   */
  readonly scope?: (req: Request) => string;
  /** The response headers stored and replayed (lower-case names). Default: REPLAYED_HEADERS. */
  readonly headers?: readonly string[];
  /** The largest response body kept for replay, in bytes. Default 1 MiB. */
  readonly maxResponseBytes?: number;
  /**
   * The largest request body idempotency() reads itself to compute the
   * fingerprint, in bytes (when no body parser has read it). Default 1 MiB.
   *
   * Which bytes are fingerprinted: the body as received when idempotency()
   * reads it, or when the body parser before it was given
   * `verify: keepRawBody`; a Buffer or string req.body as it is; otherwise
   * the JSON of the parsed req.body, so two bodies that parse alike (such as
   * numbers beyond a double's precision) count as the same request.
   */
  readonly maxRequestBytes?: number;
}

/** What a replay carries over from the first response, unless `headers` says otherwise. */
export const REPLAYED_HEADERS: readonly string[] = Object.freeze([
  'content-type', 'content-language', 'content-encoding', 'content-location', 'location',
  'etag', 'last-modified', 'link', 'retry-after', 'cache-control', 'vary',
]);

const HEADER = 'idempotency-key';
const MIB = 1024 * 1024;
/** RFC 9110 §5.1 field-name: a token. */
const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;
/** Framing headers describe one message on one connection: never replayed. */
const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'trailer']);
const MAX_SCOPE_LENGTH = 1024;

interface Settings {
  readonly store: IdempotencyStore<unknown>;
  readonly required: boolean;
  readonly scope: ((req: Request) => string) | undefined;
  readonly headers: ReadonlySet<string>;
  readonly maxResponseBytes: number;
  readonly maxRequestBytes: number;
}

/**
 * The server half of the Idempotency-Key header: the first request with a
 * key runs the handler and its response (below 500) is stored; a retry with
 * the same key and fingerprint gets it back (`idempotent-replayed: true`),
 * one while the first runs 409, one with another fingerprint 422. Place it
 * after fencing() (when the route has one) and after the body parser, and
 * give that parser `verify: keepRawBody` so the fingerprint covers the
 * body's bytes rather than its parsed value. A handler that fails after
 * starting its response gets the connection closed, as Express does; nothing
 * is stored. More in the header of idempotency.ts and the README.
 */
export function idempotency(options: IdempotencyOptions): RequestHandler {
  const store = options?.store;
  if (store === null || typeof store !== 'object' || typeof store.begin !== 'function' || typeof store.complete !== 'function' || typeof store.release !== 'function') {
    throw new InvalidArgumentError('idempotency(): options.store must be an IdempotencyStore');
  }
  if (options.required !== undefined && typeof options.required !== 'boolean') throw new InvalidArgumentError('idempotency(): options.required must be a boolean');
  if (options.scope !== undefined && typeof options.scope !== 'function') throw new InvalidArgumentError('idempotency(): options.scope must be a function of the request');
  const headers = options.headers ?? REPLAYED_HEADERS;
  if (!Array.isArray(headers) || !headers.every((h) => typeof h === 'string' && FIELD_NAME.test(h.toLowerCase()) && !FRAMING.has(h.toLowerCase()))) {
    throw new InvalidArgumentError('idempotency(): options.headers must be header names other than content-length, transfer-encoding and the connection headers');
  }
  const settings: Settings = Object.freeze({
    store,
    required: options.required ?? false,
    scope: options.scope,
    headers: new Set(headers.map((h) => h.toLowerCase())),
    maxResponseBytes: byteLimit(options.maxResponseBytes, 'maxResponseBytes'),
    maxRequestBytes: byteLimit(options.maxRequestBytes, 'maxRequestBytes'),
  });

  return function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    const text = singleHeader(req.rawHeaders ?? [], HEADER);
    if (text === undefined) {
      if (settings.required) return answer(res, 400, 'IDEMPOTENCY_KEY_MISSING', 'this request needs an Idempotency-Key header: a unique key (a UUID) per operation, the same on every retry of it');
      return next();
    }
    if (text === REPEATED) return answer(res, 400, 'IDEMPOTENCY_KEY_REPEATED', 'the Idempotency-Key header must appear once');
    const parsed = parseIdempotencyKey(text);
    if (!parsed.ok) return answer(res, 400, 'IDEMPOTENCY_KEY_INVALID', parsed.reason);
    let scope = '';
    if (settings.scope !== undefined) {
      let named: unknown;
      try {
        named = settings.scope(req);
      } catch (error) {
        debug('idempotency(): scope() threw: %o', error);
      }
      if (typeof named !== 'string' || named.length > MAX_SCOPE_LENGTH || named.includes('\u0000')) {
        debug('idempotency(): scope() returned %o, not a string of at most %d characters without NUL', named, MAX_SCOPE_LENGTH);
        return answer(res, 500, 'IDEMPOTENCY_SCOPE_UNRESOLVED', 'the server could not determine whose key this is');
      }
      scope = named;
    }
    handle(settings, req, res, next, scope, parsed.key).catch((error: unknown) => {
      // Every store call is guarded; this is a bug of ours, still not a crash.
      debug('idempotency(): %o', error);
      answer(res, 503, 'IDEMPOTENCY_UNAVAILABLE', 'the server could not check the Idempotency-Key; try again');
    });
  };
}

async function handle(settings: Settings, req: Request, res: Response, next: NextFunction, scope: string, key: string): Promise<void> {
  const body = await requestBody(req, settings.maxRequestBytes);
  if (body === TOO_LARGE) {
    res.setHeader('connection', 'close');
    return answer(res, 413, 'IDEMPOTENCY_BODY_TOO_LARGE', `the request body is larger than the ${settings.maxRequestBytes} bytes this route reads`);
  }
  if (body === UNREADABLE) return answer(res, 400, 'IDEMPOTENCY_BODY_UNREADABLE', 'the request body could not be read');
  const fingerprint = createHash('sha256').update(`${req.method}\n${req.originalUrl}\n`).update(body).digest('hex');
  // Behind fencing() with a store that has a transaction: write through it.
  const transaction = (req.fencing as { transaction?: unknown } | undefined)?.transaction;
  const on = transaction === undefined ? undefined : { transaction };
  let found;
  try {
    found = await settings.store.begin({ scope, key }, fingerprint, on);
  } catch (error) {
    debug('idempotency(): the store failed to look up a key: %o', error);
    return answerStoreFailure(res, { middleware: 'idempotency', operation: 'begin', error }, 'IDEMPOTENCY_UNAVAILABLE', 'the server could not check the Idempotency-Key; try again');
  }
  switch (found.state) {
    case 'completed':
      if (!found.sameRequest) return reused(res);
      return replay(res, found.response);
    case 'running':
      if (!found.sameRequest) return reused(res);
      return answer(res, 409, 'IDEMPOTENCY_KEY_IN_USE', 'a request with this Idempotency-Key is still being processed; retry later');
    case 'claimed':
      break;
  }
  const claim = found.claim;
  if (res.closed || res.writableEnded) {
    // Nobody to answer, nothing done: give the key back.
    await settings.store.release(claim, on).catch((error: unknown) => debug('idempotency(): releasing a key failed: %o', error));
    return;
  }
  const capture = new ResponseCapture(res, settings.maxResponseBytes, (captured) => {
    void store(settings, res, capture, claim, captured, on);
  });
  next();
}

/** The handler ended its response: keep it (below 500) or give the key back, then let it out. */
async function store(settings: Settings, res: ServerResponse, capture: ResponseCapture, claim: IdempotencyClaim, captured: Captured, on: { transaction: unknown } | undefined): Promise<void> {
  if (captured.status >= 500) {
    await settings.store.release(claim, on).catch((error: unknown) => debug('idempotency(): releasing a key failed: %o', error));
    capture.release();
    return;
  }
  const headers = captured.headers.filter(([name]) => settings.headers.has(name));
  const response: StoredResponse = { status: captured.status, headers, body: captured.body === null ? null : new Uint8Array(captured.body) };
  try {
    if (!(await settings.store.complete(claim, response, on))) {
      debug('idempotency(): the key %s was claimed by another request before this one answered: its response is not stored', claim.key);
    }
  } catch (error) {
    debug('idempotency(): the store failed to keep a response: %o', error);
    if (on === undefined) {
      // The handler's work stands whatever the store did: the client gets its answer.
      capture.release();
      return;
    }
    // In the fence's transaction: the failed write takes the handler's writes
    // with it, so the handler's answer would be a lie.
    capture.release(false);
    if (res.headersSent) {
      res.destroy();
      return;
    }
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    answerStoreFailure(res, { middleware: 'idempotency', operation: 'complete', error }, 'IDEMPOTENCY_UNAVAILABLE', 'the server could not keep the response for this Idempotency-Key, and undid the request; try again');
    return;
  }
  capture.release();
}

function reused(res: ServerResponse): void {
  answer(res, 422, 'IDEMPOTENCY_KEY_REUSED', 'this Idempotency-Key was already used for a different request (another method, target or body); use a new key for a new request');
}

function replay(res: ServerResponse, stored: StoredResponse): void {
  if (stored.body === null) {
    return answer(res, 409, 'IDEMPOTENT_RESPONSE_NOT_KEPT', `the request with this Idempotency-Key was processed (status ${stored.status}), but its response was too large to keep for a replay`);
  }
  if (res.headersSent || res.writableEnded) return;
  res.statusCode = stored.status;
  const grouped = new Map<string, string[]>();
  for (const [name, value] of stored.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
  for (const [name, values] of grouped) res.setHeader(name, values.length === 1 ? values[0]! : values);
  res.setHeader('idempotent-replayed', 'true');
  res.setHeader('content-length', stored.body.byteLength);
  res.end(Buffer.from(stored.body.buffer, stored.body.byteOffset, stored.body.byteLength));
}

function answer(res: ServerResponse, status: number, code: IdempotencyProblemCode, detail: string): void {
  // problem.ts spells its codes as fencing()'s; the answer's shape is the same.
  sendProblem(res, status, code, detail);
}

/** The bytes body-parser read, per request, as keepRawBody() was handed them. */
const rawBodies = new WeakMap<IncomingMessage, Buffer>();

/**
 * body-parser's `verify` hook that keeps the request body's bytes for
 * idempotency()'s fingerprint: `express.json({ verify: keepRawBody })` (or
 * `.urlencoded`, `.text`, `.raw`). Without it, idempotency() after a JSON or
 * form parser can only fingerprint the parsed value, and bodies that parse
 * alike (`{"amount":10000000000000001}` and `{"amount":10000000000000000}`)
 * count as the same request. With a `verify` of your own, call this from it.
 * The bytes are those body-parser saw, after any Content-Encoding was undone;
 * they are held no longer than the request. Not a middleware: throws
 * INVALID_ARGUMENT when called as one.
 */
export function keepRawBody(req: IncomingMessage, _res: ServerResponse, buf: Buffer): void {
  if (!Buffer.isBuffer(buf)) {
    throw new InvalidArgumentError('keepRawBody is body-parser\'s verify option (express.json({ verify: keepRawBody })), not a middleware: it was called without the body\'s bytes');
  }
  rawBodies.set(req, buf);
}

const TOO_LARGE: unique symbol = Symbol('too large');
const UNREADABLE: unique symbol = Symbol('unreadable');

/** The request body's bytes for the fingerprint: read here, kept by keepRawBody(), or from a body parser's req.body (see the file's header). */
async function requestBody(req: Request, limit: number): Promise<Buffer | typeof TOO_LARGE | typeof UNREADABLE> {
  const parsed = (req as { body?: unknown }).body;
  const hasBody = req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
  if (!hasBody) return EMPTY;
  if (!req.readableEnded && req.readable) {
    const read = await readBody(req, limit);
    if (Buffer.isBuffer(read)) {
      // As express.raw() would leave it; `_body` tells body-parser 1.x it is done.
      (req as { body?: unknown }).body = read;
      (req as { _body?: boolean })._body = true;
    }
    return read;
  }
  const raw = rawBodies.get(req);
  if (raw !== undefined) return raw;
  if (Buffer.isBuffer(parsed)) return parsed;
  if (parsed instanceof Uint8Array) return Buffer.from(parsed.buffer, parsed.byteOffset, parsed.byteLength);
  if (typeof parsed === 'string') return Buffer.from(parsed, 'utf8');
  if (parsed === undefined) return EMPTY;
  let json: string | undefined;
  try {
    json = JSON.stringify(parsed);
  } catch {
    json = undefined;
  }
  return Buffer.from(json ?? '', 'utf8');
}

const EMPTY = Buffer.alloc(0);

function readBody(req: IncomingMessage, limit: number): Promise<Buffer | typeof TOO_LARGE | typeof UNREADABLE> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (value: Buffer | typeof TOO_LARGE | typeof UNREADABLE): void => {
      req.off('data', onData).off('end', onEnd).off('error', onFail).off('close', onClose);
      resolve(value);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= limit) {
        chunks.push(chunk);
        return;
      }
      // Stop keeping it; let the rest drain so the connection can answer.
      finish(TOO_LARGE);
      req.resume();
    };
    const onEnd = (): void => finish(Buffer.concat(chunks));
    const onFail = (): void => finish(UNREADABLE);
    const onClose = (): void => finish(UNREADABLE);
    req.on('data', onData).on('end', onEnd).on('error', onFail).on('close', onClose);
  });
}

function byteLimit(value: unknown, what: string): number {
  if (value === undefined) return MIB;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new InvalidArgumentError(`idempotency(): options.${what} must be a non-negative integer (bytes), got ${String(value)}`);
  }
  return value;
}
