// fencekeeper/fastify: fencing and idempotency as Fastify plugins (wrapped
// with fastify-plugin), over the framework-neutral core shared with
// fencekeeper/express, /fetch and /hono (src/shared/http/).
export { fencing } from './fencing.js';
export type { FastifyFencingOptions } from './fencing.js';
export { idempotency } from './idempotency.js';
export type { FastifyIdempotencyOptions } from './idempotency.js';
export type { FencingContext } from '../../src/shared/http/exchange.js';
export { MemoryFenceStore } from '../../src/shared/http/memory-fence-store.js';
export { MemoryIdempotencyStore } from '../../src/shared/http/idempotency/memory-store.js';
export type { MemoryIdempotencyStoreOptions } from '../../src/shared/http/idempotency/memory-store.js';
export { REPLAYED_HEADERS } from '../../src/shared/http/idempotency/core.js';
export { verifyHolder } from '../../src/shared/http/verify-holder.js';
export type { HolderVerifier } from '../../src/shared/http/verify-holder.js';
export { fencingHeaders, fencedFetch } from '../../src/shared/http/client.js';
export type { FencedFetch, TokenHolder } from '../../src/shared/http/client.js';
export type { FencingProblem, IdempotencyProblemCode, ProblemCode, SetupProblemCode } from '../../src/shared/http/problem.js';
export type { StoreFailedMessage } from '../../src/shared/http/store-failure.js';
