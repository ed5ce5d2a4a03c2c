/**
 * Express middleware that refuses stale fencing tokens (fencing) and
 * implements the Idempotency-Key header (idempotency), with their stores and
 * the client half (fencingHeaders, fencedFetch). Guide: docs/express.md in the
 * package.
 *
 * @module fencekeeper/express
 */
// fencekeeper/express: refuse stale fencing tokens where an HTTP resource
// lives. How fencing() works, what it guarantees and where it stops: see
// fencing/middleware.ts and the README's "An HTTP service that refuses stale tokens".
export { fencing } from './fencing/middleware.js';
export type { FencingOptions } from './fencing/middleware.js';
export type { FencingContext } from './fencing/context.js';
export { MemoryFenceStore } from './fencing/memory-store.js';
export { verifyHolder } from './fencing/verify-holder.js';
export type { HolderVerifier } from './fencing/verify-holder.js';
export type { FencingProblem, IdempotencyProblemCode, ProblemCode, SetupProblemCode } from './problem.js';
export type { StoreFailedMessage } from './store-failure.js';
export { fencingHeaders, fencedFetch } from './fencing/client.js';
export type { FencedFetch, TokenHolder } from './fencing/client.js';
export { fencedHandler, hasFencing } from './fencing/fenced.js';
export type { FencedHandler, FencedRequest } from './fencing/fenced.js';
export { idempotency, keepRawBody, REPLAYED_HEADERS } from './idempotency/middleware.js';
export type { IdempotencyOptions } from './idempotency/middleware.js';
export { MemoryIdempotencyStore } from './idempotency/memory-store.js';
export type { MemoryIdempotencyStoreOptions } from './idempotency/memory-store.js';
