/**
 * Redis in both roles over your ioredis clients: single-instance and Redlock
 * locks with fencing tokens, and Redis keys as a fenced resource (fencedSet,
 * fencedGet, fencedDelete, RedisFenceStore). Guide: docs/redis.md in the
 * package.
 *
 * @module fencekeeper/redis
 */
// fencekeeper/redis: the Redis family's one entry. Redis plays both roles:
// the lock source (src/sources/redis/, re-exported here: its public face
// only) and a fenced resource (Redis keys, and RedisFenceStore for the HTTP
// guards), so its entry is this enforcement folder's index
// (test/unit/layers.test.ts allows exactly this re-export).
export * from '../../src/sources/redis/index.js';
export { fencedSet, fencedGet, fencedDelete, readFence, bindFence } from './keys.js';
export type { FencedWriteOptions, FencedValue } from './keys.js';
export { RedisFenceStore } from './store.js';
export type { RedisFenceStoreOptions } from './store.js';
export type { RedisCommands } from '../../src/shared/redis/client.js';
