// When a guard's store fails, the client is answered in place of the handler,
// and the operator must be able to see why: the underlying error is published
// on fencekeeper:express:store-failed by every HTTP guard (the channel's
// name predates the others; `adapter` says which framework's guard it was).
// It never goes to the client, whose answer says only what it may do.
//
// Most store failures are passing (a lost connection, a failover): 503 and
// "try again". A failure of the server's setup is not: the store's schema is
// missing (SCHEMA_MISSING: its migrations were never applied), and every
// retry would meet it again, so a 503 would only send clients into a retry
// loop while nothing is logged. Those are answered 500 with the error's code.
import { channel } from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import { CHANNELS, FencekeeperError, type ErrorCode } from '../../index.js';
import { writeProblem, type Problem, type ProblemCode } from './problem.js';

/** The HTTP guards by framework: where a message came from. */
export type HttpAdapter = 'express' | 'fastify' | 'fetch' | 'hono';

/** The codes of failures no retry can fix: the server must be set up first. */
const SETUP_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['SCHEMA_MISSING']);

/** What `fencekeeper:express:store-failed` publishes, for every HTTP guard (Express, Fastify, Fetch, Hono). */
export interface StoreFailedMessage {
  /** The framework whose guard it was. */
  readonly adapter: HttpAdapter;
  /** The guard whose store failed. */
  readonly middleware: 'fencing' | 'idempotency';
  /** What the store was asked: admit (fencing), begin or complete (idempotency). */
  readonly operation: 'admit' | 'begin' | 'complete';
  /** The status the client was answered (500: a setup failure; 503: try again). */
  readonly status: 500 | 503;
  /** The `code` of the problem answered. */
  readonly code: ProblemCode;
  /** The store's error, as thrown. */
  readonly error: unknown;
}

const storeFailed = channel(CHANNELS.expressStoreFailed);

/** The error's code when it is a setup failure (no retry can fix it), else undefined. */
export function setupFailure(error: unknown): ErrorCode | undefined {
  return error instanceof FencekeeperError && SETUP_CODES.has(error.code) ? error.code : undefined;
}

/**
 * The answer to a store failure: 500 with the error's code for a setup
 * failure, else 503 with `unavailable` and `detail`; publishes the error
 * either way.
 */
export function storeFailure(
  failure: Omit<StoreFailedMessage, 'status' | 'code'>,
  unavailable: ProblemCode,
  detail: string,
): Problem {
  const setup = setupFailure(failure.error);
  const status = setup === undefined ? 503 : 500;
  const code: ProblemCode = setup === undefined ? unavailable : (setup as ProblemCode);
  if (storeFailed.hasSubscribers) storeFailed.publish({ ...failure, status, code } satisfies StoreFailedMessage);
  if (setup === undefined) return { status: 503, code: unavailable, detail };
  return { status: 500, code, detail: `the server is not set up to serve this request (${setup}); its operator must fix that, retrying will not help` };
}

/** storeFailure(), written to a Node response. */
export function answerStoreFailure(
  res: ServerResponse,
  failure: Omit<StoreFailedMessage, 'status' | 'code'>,
  unavailable: ProblemCode,
  detail: string,
): void {
  writeProblem(res, storeFailure(failure, unavailable, detail));
}
