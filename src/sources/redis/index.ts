// The lock half of fencekeeper/redis: locks with fencing tokens over Redis,
// on the user's own ioredis clients. One client: the single-instance lock. An
// array of at least three independent servers: Redlock, with a
// quorum-counter token. The entry itself is adapters/redis/index.ts, which
// re-exports this public face beside the Redis fences.
export { acquireLock, tryAcquireLock, lockStatus, redisSource } from './source.js';
export type { RedisTarget, RedisSource, RedisLockStatusEntry } from './source.js';
export type { RedisLockSettings, RedisAcquireOptions, RedisTryAcquireOptions } from './options.js';
export type { RedisClient, RedisSubscriber } from '../../shared/redis/client.js';
export type { RedisLock } from './held-lock.js';
