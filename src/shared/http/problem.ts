// Answers as RFC 9457 problem details (application/problem+json).
//
// The type is "about:blank" (RFC 9457 §4.2.1): the status code carries the
// meaning and the title is its reason phrase. fencekeeper owns no resolvable
// URI to name its own problem types with, so instead of inventing one it adds
// an extension member `code` (a stable string, like the core's error codes)
// for clients that must tell the cases apart; the 409 also carries `resource`,
// `presented` and `current` as decimal strings (RFC 9457 §3.2 extensions);
// the SEQUENCER_MISMATCH 409 carries `resource` and `bound` (the fence's lock).
// A 500 SCHEMA_MISSING (either guard) is a store whose migrations were never
// applied: not worth a retry, unlike a 503.
import type { ServerResponse } from 'node:http';
import { STATUS_CODES } from 'node:http';

/** The `code` of an application/problem+json answer of fencing() or idempotency() (STALE_TOKEN, MISSING_TOKEN, FENCE_HOLD_EXPIRED, IDEMPOTENCY_KEY_IN_USE, ...). */
export type ProblemCode =
  | 'MISSING_TOKEN'
  | 'INVALID_TOKEN'
  | 'REPEATED_TOKEN'
  | 'TOKEN_REFUSED'
  | 'STALE_TOKEN'
  | 'VERIFY_UNAVAILABLE'
  | 'FENCE_UNAVAILABLE'
  | 'RESOURCE_REFUSED'
  | 'RESOURCE_UNRESOLVED'
  | 'CONFLICTING_TOKEN'
  | 'FENCE_DEADLOCK'
  | 'FENCE_HOLD_EXPIRED'
  | 'SEQUENCER_MISMATCH'
  | SetupProblemCode
  | IdempotencyProblemCode;

/** A 500 from either guard: the server's setup is wrong and no retry can fix it (the store's schema is missing). */
export type SetupProblemCode = 'SCHEMA_MISSING';

/** The answers idempotency() gives in place of the handler's (application/problem+json with a `code`). */
export type IdempotencyProblemCode =
  | 'IDEMPOTENCY_KEY_MISSING'
  | 'IDEMPOTENCY_KEY_INVALID'
  | 'IDEMPOTENCY_KEY_REPEATED'
  | 'IDEMPOTENCY_KEY_IN_USE'
  | 'IDEMPOTENCY_KEY_REUSED'
  | 'IDEMPOTENT_RESPONSE_NOT_KEPT'
  | 'IDEMPOTENCY_BODY_TOO_LARGE'
  | 'IDEMPOTENCY_BODY_UNREADABLE'
  | 'IDEMPOTENCY_UNAVAILABLE'
  | 'IDEMPOTENCY_SCOPE_UNRESOLVED';

/** The body of an answer the middleware gives in place of the handler's. */
export interface FencingProblem {
  readonly type: 'about:blank';
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly code: ProblemCode;
  readonly resource?: string;
  readonly presented?: string;
  readonly current?: string | null;
  /** SEQUENCER_MISMATCH: the lock the fence is bound to. */
  readonly bound?: { readonly kind: string; readonly lock: string; readonly source: { readonly kind: string; readonly id: string } };
}

/** One answer a guard gives in place of the handler's, before it is written in a framework's terms. */
export interface Problem {
  readonly status: number;
  readonly code: ProblemCode;
  readonly detail: string;
  readonly extra?: Pick<FencingProblem, 'resource' | 'presented' | 'current' | 'bound'> | undefined;
}

/** The headers every problem answer carries besides its content-length. */
export const PROBLEM_HEADERS: readonly (readonly [string, string])[] = Object.freeze([
  ['content-type', 'application/problem+json'],
  ['cache-control', 'no-store'],
] as const);

/** The JSON text of a problem answer's body. */
export function problemBody(problem: Problem): string {
  const body: FencingProblem = {
    type: 'about:blank',
    title: STATUS_CODES[problem.status] ?? 'Error',
    status: problem.status,
    detail: problem.detail,
    code: problem.code,
    ...problem.extra,
  };
  return JSON.stringify(body);
}

/**
 * Write the problem as the whole response. Only what Node's ServerResponse
 * offers, so the same code answers under Express 4 and 5 and under Fastify
 * (its reply.raw).
 */
export function sendProblem(
  res: ServerResponse,
  status: number,
  code: ProblemCode,
  detail: string,
  extra?: Pick<FencingProblem, 'resource' | 'presented' | 'current' | 'bound'>,
): void {
  writeProblem(res, { status, code, detail, extra });
}

/** sendProblem() for a Problem value. */
export function writeProblem(res: ServerResponse, problem: Problem): void {
  if (res.headersSent || res.writableEnded) return;
  const body = problemBody(problem);
  res.statusCode = problem.status;
  res.setHeader('content-type', 'application/problem+json');
  res.setHeader('content-length', Buffer.byteLength(body));
  res.setHeader('cache-control', 'no-store');
  res.end(body);
}

/** The problem as a Fetch API Response. */
export function problemResponse(problem: Problem, headers?: Iterable<readonly [string, string]>): Response {
  const body = problemBody(problem);
  const all = new Headers(PROBLEM_HEADERS as [string, string][]);
  all.set('content-length', String(Buffer.byteLength(body)));
  if (headers !== undefined) for (const [name, value] of headers) all.set(name, value);
  return new Response(body, { status: problem.status, headers: all });
}
