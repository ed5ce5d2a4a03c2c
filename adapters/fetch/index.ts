// fencekeeper/fetch: the fencing and idempotency guards for any handler of
// the Fetch API (a Request in, a Response out). The framework-neutral parts
// live in src/shared/http/, shared with fencekeeper/express, /fastify and /hono.
export { withFencing, withIdempotency } from './guards.js';
export type { FencedFetchHandler, FetchFencingOptions, FetchIdempotencyOptions } from './guards.js';
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
