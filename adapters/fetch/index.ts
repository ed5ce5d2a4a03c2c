// fencekeeper/fetch: the fencing and idempotency guards for any handler of
// the Fetch API (a Request in, a Response out), and the client half
// (fencingHeaders, fencedFetch) for code that calls a fenced service with
// fetch. The framework-neutral parts live in src/shared/http/, shared with
// fencekeeper/express, /fastify and /hono.
export { withFencing, withIdempotency } from './guards.js';
export type { FencedFetchHandler, FetchFencingOptions, FetchIdempotencyOptions } from './guards.js';
export * from '../../src/shared/http/guard-face.js';
export { fencingHeaders, fencedFetch } from '../../src/shared/http/client.js';
export type { FencedFetch, TokenHolder } from '../../src/shared/http/client.js';
