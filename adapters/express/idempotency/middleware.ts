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
import type { IncomingMessage, ServerResponse } from 'node:http';
import { debuglog } from 'node:util';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { InvalidArgumentError, type IdempotencyClaim } from '../../../src/index.js';
import { writeProblem } from '../../../src/shared/http/problem.js';
import {
  NO_KEY,
  UNREADABLE_BODY,
  fingerprint,
  giveBack,
  idempotencySettings,
  keep,
  lookUp,
  nodeScopedKey,
  throughFence,
  tooLarge,
  type IdempotencyGuardOptions,
  type IdempotencySettings,
  type ScopedKey,
} from '../../../src/shared/http/idempotency/core.js';
import { ResponseCapture, type Captured } from '../../../src/shared/http/idempotency/node-capture.js';
import { replayTo } from '../../../src/shared/http/idempotency/node-replay.js';

const debug = debuglog('fencekeeper');

/**
 * idempotency()'s options: `store`, `required`, `scope` (a function of the
 * Express request), `headers` (the response headers replayed), and the byte
 * limits `maxResponseBytes` and `maxRequestBytes` (each default 1 MiB).
 *
 * Which bytes are fingerprinted: the body as received when idempotency()
 * reads it, or when the body parser before it was given
 * `verify: keepRawBody`; a Buffer or string req.body as it is; otherwise
 * the JSON of the parsed req.body, so two bodies that parse alike (such as
 * numbers beyond a double's precision) count as the same request.
 */
export type IdempotencyOptions = IdempotencyGuardOptions<Request>;

export { REPLAYED_HEADERS } from '../../../src/shared/http/idempotency/core.js';

type Settings = IdempotencySettings<Request>;

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
  const settings = idempotencySettings<Request>('express', options);

  return function idempotencyMiddleware(req: Request, res: Response, next: NextFunction): void {
    const key = nodeScopedKey(settings, req, req);
    if (key === NO_KEY) return next();
    if ('status' in key) return writeProblem(res, key);
    handle(settings, req, res, next, key).catch((error: unknown) => {
      // Every store call is guarded; this is a bug of ours, still not a crash.
      debug('idempotency(): %o', error);
      writeProblem(res, { status: 503, code: 'IDEMPOTENCY_UNAVAILABLE', detail: 'the server could not check the Idempotency-Key; try again' });
    });
  };
}

async function handle(settings: Settings, req: Request, res: Response, next: NextFunction, key: ScopedKey): Promise<void> {
  const body = await requestBody(req, settings.maxRequestBytes);
  if (body === TOO_LARGE) {
    res.setHeader('connection', 'close');
    return writeProblem(res, tooLarge(settings));
  }
  if (body === UNREADABLE) return writeProblem(res, UNREADABLE_BODY);
  const print = fingerprint(req.method, req.originalUrl, body);
  // Behind fencing() with a store that has a transaction: write through it.
  const on = throughFence(req.fencing);
  const found = await lookUp(settings, key, print, on);
  if (found.kind === 'problem') return writeProblem(res, found.problem);
  if (found.kind === 'replay') return replayTo(res, found.response);
  const claim = found.claim;
  if (res.closed || res.writableEnded) {
    // Nobody to answer, nothing done: give the key back.
    await giveBack(settings, claim, on);
    return;
  }
  const capture = new ResponseCapture(res, settings.maxResponseBytes, (captured) => {
    void store(settings, res, capture, claim, captured, on);
  });
  next();
}

/** The handler ended its response: keep it (below 500) or give the key back, then let it out. */
async function store(settings: Settings, res: ServerResponse, capture: ResponseCapture, claim: IdempotencyClaim, captured: Captured, on: { transaction: unknown } | undefined): Promise<void> {
  const body = captured.body === null ? null : new Uint8Array(captured.body);
  const failed = await keep(settings, claim, captured.status, captured.headers, body, on);
  if (failed === undefined) {
    capture.release();
    return;
  }
  capture.release(false);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  writeProblem(res, failed);
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

