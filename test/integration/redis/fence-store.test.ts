// RedisFenceStore on its own, against FK_REDIS: what the HTTP guards' shared
// cases (express-fuzz.test.ts) and the replicas test do not reach: a corrupt
// mark, bad input, an aborted wait, settling twice.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisFenceStore } from '../../../adapters/redis/index.js';
import { uniqueId } from '../../helpers/unique.js';
import { RedisPool } from './helpers.js';

const pool = new RedisPool();
let redis: ReturnType<RedisPool['single']>;
beforeAll(() => {
  redis = pool.single();
});
afterAll(() => pool.closeAll());

const codeOf = (promise: Promise<unknown>): Promise<string> => promise.then(() => 'admitted', (e: { code?: string; message: string }) => e.code ?? e.message);
const markKey = (resource: string): string => `fencekeeper:fence:{${resource}}`;
const holdKey = (resource: string): string => `fencekeeper:fence-hold:{${resource}}`;

describe('RedisFenceStore', () => {
  it('admits equal and larger, refuses smaller with the mark, and keeps the advance after abort', async () => {
    const store = new RedisFenceStore(redis);
    const r = uniqueId('store');
    const a = await store.admit(r, 5n);
    expect(a.previous).toBeNull();
    await a.abort();
    await a.commit(); // settled already: idempotent
    expect(await store.current(r)).toBe(5n);
    const b = await store.admit(r, 5n);
    expect(b.previous).toBe(5n);
    await b.commit();
    const stale = await store.admit(r, 4n).catch((e: unknown) => e);
    expect(stale).toMatchObject({ code: 'STALE_TOKEN', presented: 4n, current: 5n });
    expect(await redis.exists(holdKey(r))).toBe(0);
  });

  it.each(['not a token', '0', '-5', '0012', '9223372036854775808'])('a mark that is not a token (%j): CorruptFenceError, nothing taken or written', async (mark) => {
    const store = new RedisFenceStore(redis);
    const r = uniqueId('corrupt');
    await redis.set(markKey(r), mark);
    expect(await codeOf(store.admit(r, 9n))).toBe('CORRUPT_FENCE');
    expect(await codeOf(store.current(r))).toBe('CORRUPT_FENCE');
    expect(await redis.get(markKey(r))).toBe(mark);
    expect(await redis.exists(holdKey(r))).toBe(0);
  });

  it('an aborted wait rejects with the signal\'s reason and leaves nothing held', async () => {
    const store = new RedisFenceStore(redis);
    const r = uniqueId('abort');
    const holder = await store.admit(r, 1n);
    const controller = new AbortController();
    const waiting = store.admit(r, 2n, { signal: controller.signal }).catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 200));
    controller.abort(new Error('client left'));
    expect(await waiting).toMatchObject({ message: 'client left' });
    await holder.commit();
    expect(await redis.exists(holdKey(r))).toBe(0);
    expect(await store.current(r)).toBe(1n);
  });

  it('bad input: a clear error, nothing written', async () => {
    const store = new RedisFenceStore(redis);
    const r = uniqueId('bad');
    expect(await codeOf(store.admit(r, 0n))).toBe('INVALID_TOKEN');
    expect(await codeOf(store.admit(r, 3 as never))).toBe('INVALID_TOKEN');
    expect(await codeOf(store.admit(`${r}\0`, 1n))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(store.admit(`${r}\ud800`, 1n))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(store.admit('', 1n))).toBe('INVALID_ARGUMENT');
    expect(await redis.exists(markKey(r), holdKey(r), markKey(`${r}\0`), markKey(`${r}\ufffd`))).toBe(0);
    expect(() => new RedisFenceStore(redis, { leaseMs: 0 })).toThrow(/leaseMs/);
    expect(() => new RedisFenceStore(redis, { ttl: 5 } as never)).toThrow(/unknown option ttl/);
    expect(() => new RedisFenceStore({} as never)).toThrow(/ioredis/);
  });
});
