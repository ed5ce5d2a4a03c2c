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
// The framework-neutral parts (header rules, admission, answers, the memory
// stores) live in src/shared/http/, shared with fencekeeper/fastify, /fetch and /hono.
export { fencing } from './fencing/middleware.js';
export type { FencingOptions } from './fencing/middleware.js';
export type { FencingContext } from '../../src/shared/http/exchange.js';
export { MemoryFenceStore } from '../../src/shared/http/memory-fence-store.js';
export { verifyHolder } from '../../src/shared/http/verify-holder.js';
export type { HolderVerifier } from '../../src/shared/http/verify-holder.js';
export type { FencingProblem, IdempotencyProblemCode, ProblemCode, SetupProblemCode } from '../../src/shared/http/problem.js';
export type { StoreFailedMessage } from '../../src/shared/http/store-failure.js';
export { fencingHeaders, fencedFetch } from '../../src/shared/http/client.js';
export type { FencedFetch, TokenHolder } from '../../src/shared/http/client.js';
export { fencedHandler, hasFencing } from './fencing/fenced.js';
export type { FencedHandler, FencedRequest } from './fencing/fenced.js';
export { idempotency, keepRawBody, REPLAYED_HEADERS } from './idempotency/middleware.js';
export type { IdempotencyOptions } from './idempotency/middleware.js';
export { MemoryIdempotencyStore } from '../../src/shared/http/idempotency/memory-store.js';
export type { MemoryIdempotencyStoreOptions } from '../../src/shared/http/idempotency/memory-store.js';
