// fencekeeper/express: refuse stale fencing tokens where an HTTP resource
// lives. How fencing() works, what it guarantees and where it stops: see
// middleware.ts and the README's "An HTTP service that refuses stale tokens".
export { fencing } from './middleware.js';
export type { FencingOptions } from './middleware.js';
export type { FencingContext } from './context.js';
export { MemoryFenceStore } from './memory-store.js';
export type { FencingProblem, IdempotencyProblemCode, ProblemCode } from './problem.js';
export { fencingHeaders, fencedFetch } from './client.js';
export type { FencedFetch, TokenHolder } from './client.js';
export { fencedHandler, hasFencing } from './fenced.js';
export type { FencedHandler, FencedRequest } from './fenced.js';
export { idempotency, keepRawBody, REPLAYED_HEADERS } from './idempotency.js';
export type { IdempotencyOptions } from './idempotency.js';
export { MemoryIdempotencyStore } from './memory-idempotency-store.js';
export type { MemoryIdempotencyStoreOptions } from './memory-idempotency-store.js';
