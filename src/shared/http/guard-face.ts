// What every server-side HTTP entry over the shared core hands its users
// besides its own guards (fencekeeper/fastify, /fetch, /hono re-export it
// whole, so the list is written once): the fencing context's type, the
// memory stores, the replayed headers, verifyHolder and the answers' types.
// The client half (fencingHeaders, fencedFetch) is not here: the entries
// whose audience calls fenced services export it themselves.
export type { FencingContext } from './exchange.js';
export { MemoryFenceStore } from './memory-fence-store.js';
export { MemoryIdempotencyStore } from './idempotency/memory-store.js';
export type { MemoryIdempotencyStoreOptions } from './idempotency/memory-store.js';
export { REPLAYED_HEADERS } from './idempotency/core.js';
export { verifyHolder } from './verify-holder.js';
export type { HolderVerifier } from './verify-holder.js';
export type { FencingProblem, IdempotencyProblemCode, ProblemCode, SetupProblemCode } from './problem.js';
export type { StoreFailedMessage } from './store-failure.js';
