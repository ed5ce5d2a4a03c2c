// fencekeeper/hono: fencing() and idempotency() as Hono middlewares, over
// the Fetch API guards' core shared with fencekeeper/fetch (src/shared/http/).
export { fencing, idempotency } from './middleware.js';
export type { FencingEnv, HonoFencingOptions, HonoIdempotencyOptions } from './middleware.js';
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
