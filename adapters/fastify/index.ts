// fencekeeper/fastify: fencing and idempotency as Fastify plugins (wrapped
// with fastify-plugin), over the framework-neutral core shared with
// fencekeeper/express, /fetch and /hono (src/shared/http/).
export { fencing } from './fencing.js';
export type { FastifyFencingOptions } from './fencing.js';
export { idempotency } from './idempotency.js';
export type { FastifyIdempotencyOptions } from './idempotency.js';
export * from '../../src/shared/http/guard-face.js';
export { fencingHeaders, fencedFetch } from '../../src/shared/http/client.js';
export type { FencedFetch, TokenHolder } from '../../src/shared/http/client.js';
