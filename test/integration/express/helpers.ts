// Shared by the express integration tests: a real HTTP server on port 0, a
// client that can send repeated headers and raw bytes, and a spying store.
import http from 'node:http';
import net from 'node:net';
import type { Express } from 'express';
import type { FenceAdmission, FenceStore, FencingToken } from '../../../src/index.js';
import { MemoryFenceStore, fencing } from '../../../adapters/express/index.js';
import { afterAll, beforeAll } from 'vitest';
import { serve, type Served } from '../../helpers/serve.js';
import { deferred, type Deferred } from '../../helpers/wait.js';

// serve() lives apart from the vitest hooks below: the compare and fault scripts run it outside a test worker.
export { serve, type Served };

/**
 * `app` served (serve()) from the beforeAll of the file or suite this is
 * called in, after the hooks registered before it, until its afterAll. Read
 * `port` and `server` inside tests.
 */
export function servedDuring(app: Express | http.RequestListener): Served {
  let served: Served | undefined;
  beforeAll(async () => {
    served = await serve(app);
  });
  afterAll(() => served?.close());
  const now = (): Served => {
    if (served === undefined) throw new Error('servedDuring: the server starts in beforeAll; use it inside a test');
    return served;
  };
  return {
    get server() {
      return now().server;
    },
    get port() {
      return now().port;
    },
    close: () => now().close(),
  };
}

/**
 * `app` with one fenced route, PUT /<resource> answering 204 (a
 * MemoryFenceStore of its own), served as servedDuring() serves; `url` is
 * the route's.
 */
export function fencedPutService(app: Express, resource: string): { readonly url: string } {
  beforeAll(() => {
    app.put(`/${resource}`, fencing({ store: new MemoryFenceStore(), resource }), (_req, res) => void res.status(204).end());
  });
  const served = servedDuring(app);
  return {
    get url() {
      return `http://127.0.0.1:${served.port}/${resource}`;
    },
  };
}

export interface Answer {
  status: number;
  contentType: string | undefined;
  headers: http.IncomingHttpHeaders;
  body: unknown;
}

export interface Sent {
  answer: Promise<Answer>;
  /** Resolves when the connection has closed (from either side). */
  closed: Promise<void>;
  /** Tear the connection down from the client side. */
  destroy(): void;
}

/** One request on its own connection; an array value sends the header repeatedly. */
export function send(port: number, path: string, headers: Record<string, string | string[]> = {}): Sent {
  let request!: http.ClientRequest;
  const closed = deferred();
  const answer = new Promise<Answer>((resolve, reject) => {
    request = http.request({ host: '127.0.0.1', port, path, method: 'POST', headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], headers: res.headers, body: parseBody(text) });
      });
      res.on('error', reject);
    });
    request.on('socket', (socket) => socket.once('close', () => closed.resolve()));
    request.on('error', reject);
    request.end();
  });
  return { answer, closed: closed.promise, destroy: () => request.destroy() };
}

function parseBody(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text; // not JSON: keep the text
  }
}

/** One response read off a raw connection. */
export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

export interface Pipelined {
  /** Every response the server sent on the connection, in order, once it has closed. */
  answers: Promise<RawAnswer[]>;
  /** Resolves with the number of complete responses received so far, once there are at least `n`. */
  received(n: number): Promise<void>;
  destroy(): void;
}

/**
 * Several POSTs written in one go on one connection (HTTP/1.1 pipelining):
 * Node runs their handlers as it parses them and sends the answers in order.
 * Each request is [path, headers]; the last one carries `Connection: close`,
 * so the server closes the connection after the last answer.
 */
export function pipeline(port: number, requests: [string, Record<string, string>][]): Pipelined {
  const socket = net.connect(port, '127.0.0.1');
  let buffer = Buffer.alloc(0);
  const parsed: RawAnswer[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const parse = (): void => {
    for (;;) {
      const end = buffer.indexOf('\r\n\r\n');
      if (end === -1) return;
      const [statusLine, ...lines] = buffer.subarray(0, end).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      const length = Number(headers['content-length'] ?? 0);
      if (buffer.length < end + 4 + length) return;
      const body = buffer.subarray(end + 4, end + 4 + length).toString('utf8');
      buffer = buffer.subarray(end + 4 + length);
      parsed.push({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0), headers, body: parseBody(body) });
      for (const w of waiters.filter((w) => parsed.length >= w.n)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  };
  const answers = new Promise<RawAnswer[]>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      parse();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(parsed));
  });
  const text = requests
    .map(([path, headers], i) => {
      const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
      const close = i === requests.length - 1 ? 'Connection: close\r\n' : '';
      return `POST ${path} HTTP/1.1\r\nHost: fencekeeper.test\r\nContent-Length: 0\r\n${close}${lines}\r\n`;
    })
    .join('');
  socket.write(text);
  return {
    answers,
    received: (n) => (parsed.length >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }))),
    destroy: () => socket.destroy(),
  };
}

export function post(port: number, path: string, headers: Record<string, string | string[]> = {}): Promise<Answer> {
  return send(port, path, headers).answer;
}

/**
 * Header lines as raw bytes over a socket: values Node's client refuses to
 * send (and header names in odd case) reach the server exactly as given.
 * Answers the status code (Node's own 400 for bytes its parser rejects).
 */
export function rawStatus(port: number, path: string, headerLines: Buffer[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const match = /^HTTP\/1\.1 (\d{3}) /.exec(text);
      if (match === null) return reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const at = text.indexOf('\r\n\r\n');
      resolve({ status: Number(match[1]), body: at === -1 ? '' : text.slice(at + 4) });
    });
    const head = Buffer.from(`POST ${path} HTTP/1.1\r\nHost: fencekeeper.test\r\nConnection: close\r\nContent-Length: 0\r\n`, 'latin1');
    const lines = headerLines.flatMap((line) => [line, Buffer.from('\r\n', 'latin1')]);
    // write(), not end(): a half-close is the client leaving (Node's server
    // aborts the request on the client's FIN unless httpAllowHalfOpen), and a
    // store that admits asynchronously (PostgresFenceStore) would then
    // rightly answer nobody. `Connection: close` makes the server close after
    // its answer, which ends this exchange.
    socket.write(Buffer.concat([head, ...lines, Buffer.from('\r\n', 'latin1')]));
  });
}

/** One admit() a SpyStore saw: how the store answered, and how the admission was settled. */
export interface SpiedCall {
  readonly resource: string;
  readonly token: FencingToken;
  outcome: 'pending' | 'admitted' | 'refused';
  /** The first of commit() / abort() called on the admission (undefined: not settled yet). */
  settled: 'commit' | 'abort' | undefined;
  /** commit() / abort() of the inner store has finished. */
  done: boolean;
}

/** A store that records each admit(), how it ended and how it was settled; delegates to a real store. */
export class SpyStore<T> implements FenceStore<T> {
  readonly calls: SpiedCall[] = [];
  readonly #inner: FenceStore<T>;
  #changes: Deferred[] = [];

  constructor(inner: FenceStore<T>) {
    this.#inner = inner;
  }

  async admit(resource: string, token: FencingToken, options?: { signal?: AbortSignal }): Promise<FenceAdmission<T>> {
    const call: SpiedCall = { resource, token, outcome: 'pending', settled: undefined, done: false };
    this.calls.push(call);
    this.#notify();
    let admission: FenceAdmission<T>;
    try {
      admission = await this.#inner.admit(resource, token, options);
      call.outcome = 'admitted';
    } catch (error) {
      call.outcome = 'refused';
      throw error;
    } finally {
      this.#notify();
    }
    const settle = (how: 'commit' | 'abort'): Promise<void> => {
      call.settled ??= how;
      this.#notify();
      return admission[how]().finally(() => {
        call.done = true;
        this.#notify();
      });
    };
    return {
      resource: admission.resource,
      token: admission.token,
      previous: admission.previous,
      transaction: admission.transaction,
      commit: () => settle('commit'),
      abort: () => settle('abort'),
    };
  }

  current(resource: string): Promise<FencingToken | null> {
    return this.#inner.current(resource);
  }

  /** Resolves once `predicate` holds over the calls (checked on every change). */
  async until(predicate: (calls: SpyStore<T>['calls']) => boolean): Promise<void> {
    while (!predicate(this.calls)) {
      const change = deferred();
      this.#changes.push(change);
      await change.promise;
    }
  }

  #notify(): void {
    const changes = this.#changes;
    this.#changes = [];
    for (const change of changes) change.resolve();
  }
}

/**
 * Whether `promise` has settled, asked after every callback already queued has
 * run (a macrotask turn): a pending request stays pending here, a settled one
 * reports true. Not a timing assertion: it reads the state, it does not wait for one.
 */
export function settledYet(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(
    () => { settled = true; },
    () => { settled = true; },
  );
  return new Promise((resolve) => setImmediate(() => resolve(settled)));
}

/**
 * A store that knows when every admission it handed out has settled.
 * fencing() commits or aborts on the response's 'close', after the response
 * went out, so a client holding its answer cannot yet read the committed mark
 * from a store whose commit is a round trip (PostgresFenceStore); idle()
 * waits for that instead of sleeping.
 */
export class SettlingStore<T> implements FenceStore<T> {
  readonly #inner: FenceStore<T>;
  #unsettled = 0;
  #idle: Deferred[] = [];

  constructor(inner: FenceStore<T>) {
    this.#inner = inner;
  }

  async admit(resource: string, token: FencingToken, options?: { signal?: AbortSignal }): Promise<FenceAdmission<T>> {
    const admission = await this.#inner.admit(resource, token, options);
    this.#unsettled++;
    let settling: Promise<void> | undefined;
    const settle = (how: () => Promise<void>): Promise<void> =>
      (settling ??= how().finally(() => {
        if (--this.#unsettled === 0) for (const d of this.#idle.splice(0)) d.resolve();
      }));
    return {
      resource: admission.resource,
      token: admission.token,
      previous: admission.previous,
      transaction: admission.transaction,
      commit: () => settle(() => admission.commit()),
      abort: () => settle(() => admission.abort()),
    };
  }

  current(resource: string): Promise<FencingToken | null> {
    return this.#inner.current(resource);
  }

  /** Resolves once no admission is held (every commit/abort has finished). */
  idle(): Promise<void> {
    if (this.#unsettled === 0) return Promise.resolve();
    const d = deferred();
    this.#idle.push(d);
    return d.promise;
  }
}
