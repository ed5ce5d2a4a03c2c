// A user's ioredis client fits fencekeeper/redis's structural interface, alone or as a Redlock set.
import { Redis } from 'ioredis';
import { expectTypeOf, it } from 'vitest';
import type { RedisClient, RedisTarget } from '../../src/sources/redis/index.js';

it('ioredis Redis is a RedisClient', () => {
  expectTypeOf<Redis>().toMatchTypeOf<RedisClient>();
  expectTypeOf<Redis[]>().toMatchTypeOf<RedisTarget>();
});
