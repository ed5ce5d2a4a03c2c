// The idempotency guard's steps that no framework changes: its options
// checked once, the Idempotency-Key header read and parsed, the scope named,
// the fingerprint computed, the store asked, and what begin() found turned
// into the answer (a replay, 409, 422) or a claim for the handler to run
// under. What each answer means is told in full in
// adapters/express/idempotency/middleware.ts and the guides.
import { createHash } from 'node:crypto';
import { debuglog } from 'node:util';
import { InvalidArgumentError, type IdempotencyClaim, type IdempotencyStore, type StoredResponse } from '../../../index.js';
import { FIELD_NAME, REPEATED, nodeHeader, type HeaderValue } from '../header.js';
import type { Problem } from '../problem.js';
import { storeFailure, type HttpAdapter } from '../store-failure.js';
import { isKeyList, parseIdempotencyKey } from './key.js';

const debug = debuglog('fencekeeper');

/** The options every idempotency guard takes; `R` is what its framework calls a request. */
export interface IdempotencyGuardOptions<R> {
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
  readonly scope?: (req: R) => string;
  /** The response headers stored and replayed (lower-case names). Default: REPLAYED_HEADERS. */
  readonly headers?: readonly string[];
  /** The largest response body kept for replay, in bytes. Default 1 MiB. */
  readonly maxResponseBytes?: number;
  /**
   * The largest request body the guard reads itself to compute the
   * fingerprint, in bytes (413 IDEMPOTENCY_BODY_TOO_LARGE past it). Default 1 MiB.
   */
  readonly maxRequestBytes?: number;
}

/** What a replay carries over from the first response, unless `headers` says otherwise. */
export const REPLAYED_HEADERS: readonly string[] = Object.freeze([
  'content-type', 'content-language', 'content-encoding', 'content-location', 'location',
  'etag', 'last-modified', 'link', 'retry-after', 'cache-control', 'vary',
]);

/** The request header, lower case. */
export const IDEMPOTENCY_HEADER = 'idempotency-key';
const MIB = 1024 * 1024;
/** Framing headers describe one message on one connection: never replayed. */
const FRAMING = new Set(['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'trailer']);
const MAX_SCOPE_LENGTH = 1024;

/** What one guard needs per request, copied from its options. */
export interface IdempotencySettings<R> {
  readonly adapter: HttpAdapter;
  readonly store: IdempotencyStore<unknown>;
  readonly required: boolean;
  readonly scope: ((req: R) => string) | undefined;
  readonly headers: ReadonlySet<string>;
  readonly maxResponseBytes: number;
  readonly maxRequestBytes: number;
}

/** Check a guard's options (INVALID_ARGUMENT, before any request) and freeze what requests need. */
export function idempotencySettings<R>(adapter: HttpAdapter, options: IdempotencyGuardOptions<R>, who = 'idempotency()'): IdempotencySettings<R> {
  const store = options?.store;
  if (store === null || typeof store !== 'object' || typeof store.begin !== 'function' || typeof store.complete !== 'function' || typeof store.release !== 'function') {
    throw new InvalidArgumentError(`${who}: options.store must be an IdempotencyStore`);
  }
  if (options.required !== undefined && typeof options.required !== 'boolean') throw new InvalidArgumentError(`${who}: options.required must be a boolean`);
  if (options.scope !== undefined && typeof options.scope !== 'function') throw new InvalidArgumentError(`${who}: options.scope must be a function of the request`);
  const headers = options.headers ?? REPLAYED_HEADERS;
  if (!Array.isArray(headers) || !headers.every((h) => typeof h === 'string' && FIELD_NAME.test(h.toLowerCase()) && !FRAMING.has(h.toLowerCase()))) {
    throw new InvalidArgumentError(`${who}: options.headers must be header names other than content-length, transfer-encoding and the connection headers`);
  }
  return Object.freeze({
    adapter,
    store,
    required: options.required ?? false,
    scope: options.scope,
    headers: new Set(headers.map((h) => h.toLowerCase())),
    maxResponseBytes: byteLimit(options.maxResponseBytes, 'maxResponseBytes', who),
    maxRequestBytes: byteLimit(options.maxRequestBytes, 'maxRequestBytes', who),
  });
}

/** The request's key within its scope. */
export interface ScopedKey {
  readonly scope: string;
  readonly key: string;
}

/** Pass the request through untouched: it carries no key and the route does not require one. */
export const NO_KEY: unique symbol = Symbol('no key');

/** scopedKey() of a Node request, its header read from the raw header list (the Express middleware's and the Fastify plugin's first step). */
export function nodeScopedKey<R>(settings: IdempotencySettings<R>, raw: Parameters<typeof nodeHeader>[0], req: R): ScopedKey | typeof NO_KEY | Problem {
  return scopedKey(settings, nodeHeader(raw, IDEMPOTENCY_HEADER), req);
}

/** The key and scope of a request, NO_KEY, or the 400/500 answer for a missing, repeated or malformed key or a broken scope(). */
export function scopedKey<R>(settings: IdempotencySettings<R>, text: HeaderValue, req: R): ScopedKey | typeof NO_KEY | Problem {
  if (text === undefined) {
    if (settings.required) return { status: 400, code: 'IDEMPOTENCY_KEY_MISSING', detail: 'this request needs an Idempotency-Key header: a unique key (a UUID) per operation, the same on every retry of it' };
    return NO_KEY;
  }
  if (text === REPEATED || isKeyList(text)) return { status: 400, code: 'IDEMPOTENCY_KEY_REPEATED', detail: 'the Idempotency-Key header must appear once' };
  const parsed = parseIdempotencyKey(text);
  if (!parsed.ok) return { status: 400, code: 'IDEMPOTENCY_KEY_INVALID', detail: parsed.reason };
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
      return { status: 500, code: 'IDEMPOTENCY_SCOPE_UNRESOLVED', detail: 'the server could not determine whose key this is' };
    }
    scope = named;
  }
  return { scope, key: parsed.key };
}

/** The draft's fingerprint (section 2.4): SHA-256 over the method, the request target (path and query) and the body's bytes. */
export function fingerprint(method: string, target: string, body: Uint8Array): string {
  return createHash('sha256').update(`${method}\n${target}\n`).update(body).digest('hex');
}

/** The 413 for a body past maxRequestBytes. */
export function tooLarge<R>(settings: IdempotencySettings<R>): Problem {
  return { status: 413, code: 'IDEMPOTENCY_BODY_TOO_LARGE', detail: `the request body is larger than the ${settings.maxRequestBytes} bytes this route reads` };
}

/** The 400 for a body that could not be read. */
export const UNREADABLE_BODY: Problem = Object.freeze({ status: 400, code: 'IDEMPOTENCY_BODY_UNREADABLE', detail: 'the request body could not be read' });

/** What the store said of a key: run the handler under `claim`, replay `response`, or answer `problem`. */
export type Lookup =
  | { readonly kind: 'claimed'; readonly claim: IdempotencyClaim }
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  | { readonly kind: 'problem'; readonly problem: Problem };

/** Ask the store about the key (through the fence's transaction when there is one) and decide. */
export async function lookUp<R>(settings: IdempotencySettings<R>, key: ScopedKey, print: string, on: { transaction: unknown } | undefined): Promise<Lookup> {
  let found;
  try {
    found = await settings.store.begin(key, print, on);
  } catch (error) {
    debug('idempotency(): the store failed to look up a key: %o', error);
    return { kind: 'problem', problem: storeFailure({ adapter: settings.adapter, middleware: 'idempotency', operation: 'begin', error }, 'IDEMPOTENCY_UNAVAILABLE', 'the server could not check the Idempotency-Key; try again') };
  }
  switch (found.state) {
    case 'completed':
      if (!found.sameRequest) return { kind: 'problem', problem: REUSED };
      if (found.response.body === null) {
        return { kind: 'problem', problem: { status: 409, code: 'IDEMPOTENT_RESPONSE_NOT_KEPT', detail: `the request with this Idempotency-Key was processed (status ${found.response.status}), but its response was too large to keep for a replay` } };
      }
      return { kind: 'replay', response: found.response };
    case 'running':
      if (!found.sameRequest) return { kind: 'problem', problem: REUSED };
      return { kind: 'problem', problem: { status: 409, code: 'IDEMPOTENCY_KEY_IN_USE', detail: 'a request with this Idempotency-Key is still being processed; retry later' } };
    case 'claimed':
      return { kind: 'claimed', claim: found.claim };
  }
}

const REUSED: Problem = Object.freeze({ status: 422, code: 'IDEMPOTENCY_KEY_REUSED', detail: 'this Idempotency-Key was already used for a different request (another method, target or body); use a new key for a new request' });

/** The fence's transaction to write the key through, when the request holds a fence whose store has one. */
export function throughFence(fencing: unknown): { transaction: unknown } | undefined {
  const transaction = (fencing as { transaction?: unknown } | undefined)?.transaction;
  return transaction === undefined ? undefined : { transaction };
}

/** Give the key back (the request did not complete); a failure can only be reported. */
export async function giveBack<R>(settings: IdempotencySettings<R>, claim: IdempotencyClaim, on: { transaction: unknown } | undefined): Promise<void> {
  await settings.store.release(claim, on).catch((error: unknown) => debug('idempotency(): releasing a key failed: %o', error));
}

/**
 * Keep the handler's response (status below 500, only the selected headers)
 * or give the key back (5xx). 'stored' (or not stored because the claim
 * lapsed), or 'failed' with the answer to give instead when the store failed
 * inside the fence's transaction (the failed write takes the handler's
 * writes with it, so the handler's answer would be a lie). Outside a
 * transaction a failure leaves the handler's answer standing.
 */
export async function keep<R>(
  settings: IdempotencySettings<R>,
  claim: IdempotencyClaim,
  status: number,
  headers: readonly (readonly [string, string])[],
  body: Uint8Array | null,
  on: { transaction: unknown } | undefined,
): Promise<Problem | undefined> {
  if (status >= 500) {
    await giveBack(settings, claim, on);
    return undefined;
  }
  const response: StoredResponse = { status, headers: headers.filter(([name]) => settings.headers.has(name)), body };
  try {
    if (!(await settings.store.complete(claim, response, on))) {
      debug('idempotency(): the key %s was claimed by another request before this one answered: its response is not stored', claim.key);
    }
  } catch (error) {
    debug('idempotency(): the store failed to keep a response: %o', error);
    if (on === undefined) return undefined;
    return storeFailure({ adapter: settings.adapter, middleware: 'idempotency', operation: 'complete', error }, 'IDEMPOTENCY_UNAVAILABLE', 'the server could not keep the response for this Idempotency-Key, and undid the request; try again');
  }
  return undefined;
}

/** A stored response's headers grouped by name, in the order they were set. */
export function groupedHeaders(stored: StoredResponse): Map<string, string[]> {
  const grouped = new Map<string, string[]>();
  for (const [name, value] of stored.headers) grouped.set(name, [...(grouped.get(name) ?? []), value]);
  return grouped;
}

function byteLimit(value: unknown, what: string, who: string): number {
  if (value === undefined) return MIB;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new InvalidArgumentError(`${who}: options.${what} must be a non-negative integer (bytes), got ${String(value)}`);
  }
  return value;
}
