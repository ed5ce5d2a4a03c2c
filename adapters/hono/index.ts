// fencekeeper/hono: fencing() and idempotency() as Hono middlewares, over
// the Fetch API guards' core shared with fencekeeper/fetch (src/shared/http/).
// A Hono server's needs only: a client calling a fenced service takes
// fencingHeaders / fencedFetch from fencekeeper/fetch.
export { fencing, idempotency } from './middleware.js';
export type { FencingEnv, HonoFencingOptions, HonoIdempotencyOptions } from './middleware.js';
export * from '../../src/shared/http/guard-face.js';
