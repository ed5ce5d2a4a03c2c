// The fencing guard's steps that no framework changes: its options checked
// once, the resource named, verify asked, the store's admission waited for
// (with the nesting rules), and every refusal as a Problem for the adapter to
// write in its framework's terms. The guarantee, the settling rules and the
// limits are the same for every guard; they are told in full in
// adapters/express/fencing/middleware.ts and the guides.
import { debuglog } from 'node:util';
import {
  InvalidArgumentError,
  SequencerMismatchError,
  StaleTokenError,
  formatToken,
  type FenceAdmission,
  type FenceStore,
  type FencingToken,
  type Sequencer,
} from '../../index.js';
import { publishRefused, traceAdmit } from '../../extend.js';
import { admitTraced } from '../../diagnostics.js';
import type { Fencing } from './exchange.js';
import { headerOption } from './header.js';
import { ADMIT_NOW, type AdmitsNow } from './memory-fence-store.js';
import type { Problem } from './problem.js';
import { storeFailure, type HttpAdapter } from './store-failure.js';

const debug = debuglog('fencekeeper');

/** The options every fencing guard takes; `R` is what its framework calls a request. */
export interface FencingGuardOptions<Transaction, R> {
  /** Where the fence lives: MemoryFenceStore (one process), PostgresFenceStore, or your own. */
  readonly store: FenceStore<Transaction>;
  /**
   * The resource a request writes: a fixed name, or a function of the request.
   * The function must return a non-empty string for every request. To refuse
   * a request it cannot map (an unknown id), throw an error carrying a 4xx
   * `status` or `statusCode` (the http-errors convention): that status is
   * answered. Any other throw, or a result that is not a non-empty string, is
   * the application's bug and answered 500.
   */
  readonly resource: string | ((req: R) => string);
  /**
   * The request header carrying the token: a bare decimal token, or a
   * sequencer's text form (`fk1:...`, see formatSequencer), which the store
   * checks against the fence's binding. Default 'fencing-token'.
   */
  readonly header?: string;
  /**
   * Check the token with the lock service before the fence may advance
   * (Chubby's CheckSequencer). Only `true` admits; anything else answers 403.
   * A throw or rejection means the lock service could not answer: 503.
   * `sequencer` is the header's sequencer (null for a bare token), for a
   * verify that checks the lock's name and source as well as the token.
   */
  readonly verify?: (token: FencingToken, resource: string, req: R, sequencer: Sequencer | null) => boolean | Promise<boolean>;
  /**
   * The longest a request may hold the resource's fence, in ms from its
   * admission, before the admission is aborted, the context's signal aborts
   * and the client is answered 503 FENCE_HOLD_EXPIRED. An integer in
   * 1..2147483647 (a timer's range). Default 30000.
   */
  readonly maxHoldMs?: number;
}

/** What one guard needs per request, copied from its options. */
export interface FencingSettings<R> {
  readonly adapter: HttpAdapter;
  readonly store: FenceStore<unknown>;
  readonly resource: string | ((req: R) => string);
  readonly header: string;
  readonly verify: ((token: FencingToken, resource: string, req: R, sequencer: Sequencer | null) => boolean | Promise<boolean>) | undefined;
  readonly maxHoldMs: number;
}

/** See "maxHoldMs" in adapters/express/fencing/middleware.ts for why 30 s. */
const DEFAULT_MAX_HOLD_MS = 30_000;
/** The largest delay setTimeout keeps (a larger one fires after 1 ms). */
const MAX_TIMER_MS = 2_147_483_647;

/** Check a guard's options (INVALID_ARGUMENT, before any request) and freeze what requests need. */
export function fencingSettings<R>(adapter: HttpAdapter, options: FencingGuardOptions<unknown, R>, who = 'fencing()'): FencingSettings<R> {
  const store = options?.store;
  if (store === null || typeof store !== 'object' || typeof store.admit !== 'function') {
    throw new InvalidArgumentError(`${who}: options.store must be a FenceStore`);
  }
  const resource = options.resource;
  if (typeof resource === 'string' ? resource.length === 0 : typeof resource !== 'function') {
    throw new InvalidArgumentError(`${who}: options.resource must be a non-empty string or a function of the request`);
  }
  const header = headerOption(options.header, 'fencing-token', who);
  const verify = options.verify;
  if (verify !== undefined && typeof verify !== 'function') {
    throw new InvalidArgumentError(`${who}: options.verify must be a function`);
  }
  const maxHoldMs = options.maxHoldMs ?? DEFAULT_MAX_HOLD_MS;
  if (typeof maxHoldMs !== 'number' || !Number.isInteger(maxHoldMs) || maxHoldMs < 1 || maxHoldMs > MAX_TIMER_MS) {
    throw new InvalidArgumentError(`${who}: options.maxHoldMs must be an integer in 1..${MAX_TIMER_MS}, got ${String(options.maxHoldMs)}`);
  }
  return Object.freeze({ adapter, store: store as FenceStore<unknown>, resource, header, verify, maxHoldMs });
}

/** The request's resource, or the answer when the `resource` function refused it (4xx) or failed (500). */
export function resourceOf<R>(settings: FencingSettings<R>, req: R): string | Problem {
  const resource = settings.resource;
  if (typeof resource === 'string') return resource;
  let named: unknown;
  try {
    named = resource(req);
  } catch (error) {
    const status = clientStatusOf(error);
    if (status !== undefined) return { status, code: 'RESOURCE_REFUSED', detail: exposedMessage(error) ?? 'this request names no fenced resource' };
    debug('fencing(): resource() threw: %o', error);
    return { status: 500, code: 'RESOURCE_UNRESOLVED', detail: 'the server could not determine the resource of this request' };
  }
  if (typeof named !== 'string' || named.length === 0) {
    debug('fencing(): resource() returned %o, not a non-empty string', named);
    return { status: 500, code: 'RESOURCE_UNRESOLVED', detail: 'the server could not determine the resource of this request' };
  }
  return named;
}

/** The request is gone (or answered) while the guard waited: nothing to answer. */
export const CLOSED: unique symbol = Symbol('closed');

/**
 * Verify, then wait for the store's admission of `exchange`. The admission,
 * or the answer to give instead, or CLOSED when the exchange closed while
 * waiting (nothing is held for it).
 */
export async function admitExchange<R>(
  settings: FencingSettings<R>,
  req: R,
  exchange: Fencing,
  token: FencingToken,
  presented: FencingToken | Sequencer,
): Promise<FenceAdmission<unknown> | Problem | typeof CLOSED> {
  const resource = exchange.resource;
  if (settings.verify !== undefined) {
    const refused = await verified(settings, token, resource, req, exchange, presented);
    if (refused !== undefined) return refused;
  }
  const cycle = exchange.enterWait();
  if (cycle !== undefined) {
    return {
      status: 503,
      code: 'FENCE_DEADLOCK',
      detail: `waiting for the fence of ${resource} would deadlock: it is held by a request that waits, through ${cycle.join(' -> ')}, for a fence this request holds; take fences in one order everywhere; try again`,
    };
  }
  let admission: FenceAdmission<unknown>;
  try {
    // (Promise.resolve: a store of the user's may hand back a thenable, and a trace needs a promise)
    admission = await traceAdmit(settings.adapter, resource, token, () => Promise.resolve(settings.store.admit(resource, presented, exchange)));
  } catch (error) {
    exchange.leaveWait();
    if (exchange.closed) return CLOSED; // the client left while waiting; the store holds nothing for it
    return refusal(settings, resource, token, error);
  }
  exchange.leaveWait();
  return admission;
}

/**
 * The admission of `exchange` in the same tick, when it needs nothing that
 * takes one: no verify, no fence held further out (nesting), nobody tracing
 * admissions, and a store that can admit without a promise
 * (MemoryFenceStore's ADMIT_NOW) finding the fence free. The admission, or
 * the answer to give instead (a refusal is the same as admitExchange's), or
 * undefined: then call admitExchange (the store would have to wait, or the
 * guard must). What an uncontended request behind the guard saves is every
 * promise and async step of the admission: measured, the largest part of the
 * guard's own cost over an empty route.
 */
export function admitNow<R>(settings: FencingSettings<R>, exchange: Fencing, token: FencingToken, presented: FencingToken | Sequencer): FenceAdmission<unknown> | Problem | undefined {
  const now = (settings.store as Partial<AdmitsNow>)[ADMIT_NOW];
  if (now === undefined || settings.verify !== undefined || exchange.nested || admitTraced()) return undefined;
  const resource = exchange.resource;
  try {
    return now.call(settings.store, resource, presented);
  } catch (error) {
    return refusal(settings, resource, token, error);
  }
}

/** The answer to a store's refusal (or failure) to admit `token` for `resource`. */
function refusal<R>(settings: FencingSettings<R>, resource: string, token: FencingToken, error: unknown): Problem {
  if (error instanceof StaleTokenError) {
    publishRefused(settings.adapter, error);
    return {
      status: 409,
      code: 'STALE_TOKEN',
      detail: `a larger fencing token has been admitted for ${resource}`,
      extra: { resource, presented: formatToken(token), current: error.current === null ? null : formatToken(error.current) },
    };
  }
  if (error instanceof SequencerMismatchError) {
    publishRefused(settings.adapter, error, token);
    return {
      status: 409,
      code: 'SEQUENCER_MISMATCH',
      detail: `the fence of ${resource} is guarded by another lock than the one this token belongs to`,
      extra: { resource, bound: { kind: error.bound.kind, lock: error.bound.lock, source: error.bound.source } },
    };
  }
  debug('fencing(): store.admit failed: %o', error);
  return storeFailure({ adapter: settings.adapter, middleware: 'fencing', operation: 'admit', error }, 'FENCE_UNAVAILABLE', 'the fence store could not admit the request; try again');
}

/**
 * A guard again for a fence the request holds: passes (undefined) with the
 * same token, after this guard's own verify; else the answer, or CLOSED.
 */
export async function rejoinExchange<R>(
  settings: FencingSettings<R>,
  req: R,
  held: Fencing,
  token: FencingToken,
  presented: FencingToken | Sequencer,
): Promise<Problem | typeof CLOSED | undefined> {
  if (token !== held.token) {
    return { status: 400, code: 'CONFLICTING_TOKEN', detail: `this request already holds the fence of ${held.resource} with another fencing token` };
  }
  if (settings.verify !== undefined) {
    const refused = await verified(settings, token, held.resource, req, held, presented);
    if (refused !== undefined) return refused;
  }
  return held.closed ? CLOSED : undefined;
}

/** Run verify: undefined when it returned true and the exchange is still open, else the answer or CLOSED. */
async function verified<R>(
  settings: FencingSettings<R>,
  token: FencingToken,
  resource: string,
  req: R,
  exchange: Fencing,
  presented: FencingToken | Sequencer,
): Promise<Problem | typeof CLOSED | undefined> {
  let verdict: unknown;
  try {
    verdict = await settings.verify!(token, resource, req, typeof presented === 'bigint' ? null : presented);
  } catch (error) {
    debug('fencing(): verify threw: %o', error);
    return { status: 503, code: 'VERIFY_UNAVAILABLE', detail: 'the lock service could not check the fencing token; try again' };
  }
  if (exchange.closed) return CLOSED;
  if (verdict !== true) return { status: 403, code: 'TOKEN_REFUSED', detail: `the fencing token is not the current holder's for ${resource}` };
  return undefined;
}

function clientStatusOf(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { status, statusCode } = error as { status?: unknown; statusCode?: unknown };
  const code = typeof status === 'number' ? status : statusCode;
  return typeof code === 'number' && Number.isInteger(code) && code >= 400 && code <= 499 ? code : undefined;
}

function exposedMessage(error: unknown): string | undefined {
  const { message, expose } = error as { message?: unknown; expose?: unknown };
  return expose !== false && typeof message === 'string' && message.length > 0 ? message : undefined;
}
