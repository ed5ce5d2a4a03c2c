// Holding a handler's response back until it has been stored.
//
// idempotency() must store a response before the client sees it: with a
// fence's transaction the stored response has to be written inside that
// transaction, which commits only after the response has gone out. So the
// handler's writeHead/write/end are taken over on the response object
// itself: status, headers and body bytes are collected, nothing is sent, and
// when the handler ends the response the middleware stores it and then lets
// it out in one piece. Only what Node's ServerResponse offers is used, so it
// works under Express 4 and 5 and for anything that writes to `res` (res.json,
// res.send, a piped stream).
//
// A body larger than the limit is not kept: what was collected goes out at
// once and the rest passes straight through; the middleware still hears
// about the end, and stores the status and headers without the body.
//
// To the handler and everything after it, the response behaves as Node's
// does once its head is out: from the first writeHead/write/flushHeaders/end
// on, res.headersSent is true, setHeader/appendHeader/removeHeader throw
// ERR_HTTP_HEADERS_SENT and the status is the one it had then. Express's
// error path depends on it: a handler that wrote part of its body and then
// failed must find res.headersSent true, so that Express's final handler
// ends the connection (as it does without idempotency()) instead of sending
// its own answer, with its own Content-Length, behind the part already
// written (the capture would then let out both in one malformed message).
// Such a response never ends, so nothing is stored for it.
import type { OutgoingHttpHeader, OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** The response as the handler ended it. */
export interface Captured {
  readonly status: number;
  /** Every header set on the response, lower-case names. */
  readonly headers: readonly (readonly [string, string])[];
  /** The body's bytes; null when it was larger than the limit (it has gone out already). */
  readonly body: Buffer | null;
}

type Callback = (error?: Error | null) => void;

/** Node's own methods, called with the arguments Node documents (their overloads collapse to this). */
type Method = (this: ServerResponse, ...args: unknown[]) => unknown;

interface Originals {
  readonly write: Method;
  readonly end: Method;
}

/** The own properties the capture puts on `res` (and release() takes off again). */
const TAKEN = ['writeHead', 'write', 'end', 'flushHeaders', 'headersSent', 'setHeader', 'appendHeader', 'removeHeader'] as const;

/** The head as the handler started it (Node fixes it at that moment too). */
interface Head {
  readonly status: number;
  readonly message: string;
}

export class ResponseCapture {
  readonly #res: ServerResponse;
  readonly #limit: number;
  readonly #onEnd: (captured: Captured) => void;
  readonly #originals: Originals;
  /** What `res` had as its own properties before (another middleware's wrappers, such as compression's), put back by release(). */
  readonly #own = new Map<string, PropertyDescriptor>();
  /** Set when the handler started its response: from then on it is "sent" as far as the handler can tell. */
  #head: Head | undefined;
  #chunks: Buffer[] = [];
  #size = 0;
  /** The body outgrew the limit and is passing through. */
  #overflowed = false;
  #ended = false;
  #released = false;
  readonly #callbacks: Callback[] = [];

  constructor(res: ServerResponse, limit: number, onEnd: (captured: Captured) => void) {
    this.#res = res;
    this.#limit = limit;
    this.#onEnd = onEnd;
    this.#originals = { write: res.write as Method, end: res.end as Method };
    for (const name of TAKEN) {
      const own = Object.getOwnPropertyDescriptor(res, name);
      if (own !== undefined) this.#own.set(name, own);
    }
    // Own properties shadow the prototype's (or replace another wrapper's); release() puts back what was there.
    const capture = this;
    res.writeHead = function writeHead(this: ServerResponse, status: number, reason?: string | OutgoingHttpHeaders | OutgoingHttpHeader[], headers?: OutgoingHttpHeaders | OutgoingHttpHeader[]) {
      capture.#writeHead(status, reason, headers);
      return this;
    } as ServerResponse['writeHead'];
    res.write = function write(this: ServerResponse, chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
      return capture.#write(chunk, encoding, callback);
    } as ServerResponse['write'];
    res.end = function end(this: ServerResponse, chunk?: unknown, encoding?: unknown, callback?: unknown) {
      capture.#end(chunk, encoding, callback);
      return this;
    } as ServerResponse['end'];
    res.flushHeaders = () => void capture.#start();
    const proto: object = Object.getPrototypeOf(res) as object;
    Object.defineProperty(res, 'headersSent', {
      configurable: true,
      enumerable: false,
      get: () => capture.#head !== undefined || Reflect.get(proto, 'headersSent', res) === true,
    });
    // After the head is out Node refuses header changes; so does the capture,
    // or an error handler's answer would be merged into a started response.
    for (const name of ['setHeader', 'appendHeader', 'removeHeader'] as const) {
      const previous = res[name] as Method | undefined;
      if (typeof previous !== 'function') continue;
      (res as unknown as Record<string, unknown>)[name] = function (this: ServerResponse, ...args: unknown[]): unknown {
        if (capture.#head !== undefined) throw headersSent(name === 'setHeader' ? 'set' : name === 'appendHeader' ? 'append' : 'remove');
        return previous.apply(this, args);
      };
    }
  }

  /**
   * Give the response back to Node and send what was held: the captured
   * response as it stands on `res`, or nothing when `send` is false (the
   * caller answers something else). Idempotent.
   */
  release(send = true): void {
    if (this.#released) return;
    this.#released = true;
    this.#restore();
    const res = this.#res;
    const callbacks = this.#callbacks.splice(0);
    const done = (error?: Error | null): void => {
      for (const callback of callbacks) callback(error);
    };
    if (!send || res.writableEnded || res.destroyed) {
      if (callbacks.length > 0) queueMicrotask(() => done());
      return;
    }
    if (this.#overflowed) {
      this.#originals.end.call(res, done);
      return;
    }
    this.#restoreHead();
    const body = Buffer.concat(this.#chunks);
    this.#chunks = [];
    this.#originals.end.call(res, body, done);
  }

  #restore(names: readonly string[] = TAKEN): void {
    const res = this.#res as unknown as Record<string, unknown>;
    for (const name of names) {
      const own = this.#own.get(name);
      if (own !== undefined) Object.defineProperty(res, name, own);
      else delete res[name];
    }
  }

  /** The handler started its response: its status is fixed from here on, as Node's would be. */
  #start(): void {
    if (this.#head !== undefined) return;
    this.#head = { status: this.#res.statusCode, message: this.#res.statusMessage };
  }

  /** Before Node writes the head: the status as it was when the handler started (a later res.status() changes nothing on the wire). */
  #restoreHead(): void {
    if (this.#head === undefined) return;
    this.#res.statusCode = this.#head.status;
    this.#res.statusMessage = this.#head.message;
  }

  #writeHead(status: number, reason: string | OutgoingHttpHeaders | OutgoingHttpHeader[] | undefined, headers: OutgoingHttpHeaders | OutgoingHttpHeader[] | undefined): void {
    const res = this.#res;
    // Once started, a second writeHead is ignored rather than refused as
    // Node's explicit one would be: wrappers such as compression call
    // _implicitHeader() (and so this) whenever `res._header` is unset, which
    // under the capture it always is.
    if (this.#ended || this.#head !== undefined) return;
    if (typeof reason === 'string') res.statusMessage = reason;
    else headers = reason;
    res.statusCode = status;
    if (Array.isArray(headers)) {
      // writeHead's flat form: [name, value, name, value, ...].
      for (let i = 0; i + 1 < headers.length; i += 2) res.setHeader(String(headers[i]), headers[i + 1] as OutgoingHttpHeader);
    } else if (headers !== undefined) {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value);
    }
    this.#start();
  }

  #write(chunk: unknown, encoding: unknown, callback: unknown): boolean {
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    if (this.#ended) return false; // written after end: Node refuses it too
    this.#start(); // Node sends the head on the first write, even an empty one
    if (chunk !== undefined && chunk !== null) this.#append(toBuffer(chunk, encoding));
    if (typeof callback === 'function') {
      if (this.#overflowed) queueMicrotask(() => (callback as Callback)());
      else this.#callbacks.push(callback as Callback);
    }
    return true;
  }

  #end(chunk: unknown, encoding: unknown, callback: unknown): void {
    if (typeof chunk === 'function') [callback, chunk] = [chunk, undefined];
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    if (this.#ended) return;
    this.#start();
    if (chunk !== undefined && chunk !== null) this.#append(toBuffer(chunk, encoding));
    this.#ended = true;
    if (typeof callback === 'function') this.#callbacks.push(callback as Callback);
    const res = this.#res;
    const headers: [string, string][] = [];
    for (const [name, value] of Object.entries(res.getHeaders())) {
      if (value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) headers.push([name, String(one)]);
    }
    this.#onEnd(Object.freeze({ status: this.#head!.status, headers, body: this.#overflowed ? null : Buffer.concat(this.#chunks) }));
  }

  #append(bytes: Buffer): void {
    if (this.#overflowed) {
      this.#originals.write.call(this.#res, bytes);
      return;
    }
    this.#chunks.push(bytes);
    this.#size += bytes.length;
    if (this.#size <= this.#limit) return;
    // Too large to keep: what was collected goes out now, the rest follows as it comes.
    this.#overflowed = true;
    // Node's write() sends the head through res.writeHead: it must be Node's own again.
    this.#restore(['writeHead', 'flushHeaders']);
    this.#restoreHead();
    const held = Buffer.concat(this.#chunks);
    this.#chunks = [];
    this.#originals.write.call(this.#res, held);
    for (const callback of this.#callbacks.splice(0)) queueMicrotask(() => callback());
  }
}

/** Node's ERR_HTTP_HEADERS_SENT, as code that handles Node's own expects it (not a fencekeeper error: it stands in for Node's). */
function headersSent(what: 'set' | 'append' | 'remove'): Error {
  return Object.assign(new Error(`Cannot ${what} headers after they are sent to the client`), { code: 'ERR_HTTP_HEADERS_SENT' });
}

function toBuffer(chunk: unknown, encoding: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return Buffer.from(String(chunk), typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');
}
