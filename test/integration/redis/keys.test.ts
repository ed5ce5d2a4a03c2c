// Redis keys as a fenced resource (fencekeeper/redis: fencedSet, fencedGet,
// fencedDelete, readFence) against the real Redis (FK_REDIS): racing writers,
// equal tokens, tombstones, corrupt keys and bad input.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bindFence, fencedDelete, fencedGet, fencedSet, readFence, redisSource, type RedisCommands } from '../../../adapters/redis/index.js';
import { CURRENT_LOCK, MAX_TOKEN, StaleTokenError, sequencer, withLock, type FencingToken } from '../../../src/index.js';
import { uniqueId } from '../../helpers/unique.js';
import { RedisPool } from './helpers.js';

const pool = new RedisPool();
let redis: ReturnType<RedisPool['single']>;
beforeAll(() => {
  redis = pool.single();
});
afterAll(() => pool.closeAll());

const key = (prefix: string): string => `fk-test:${uniqueId(prefix)}`;
const codeOf = (promise: Promise<unknown>): Promise<string> => promise.then(() => 'written', (e: { code?: string; message: string }) => e.code ?? e.message);

describe('fencedSet under 20 racing writers', () => {
  it('10 rounds: the fence ends at the largest acknowledged token, the value is that writer\'s, and no refused write is ever visible', async () => {
    const clients = Array.from({ length: 20 }, () => pool.single());
    for (let round = 0; round < 10; round++) {
      const k = key(`race${round}`);
      // Odd rounds above 2^62, a few apart: tokens a double cannot tell apart (Lua's numbers), so the compare must be exact.
      const base = round % 2 === 0 ? 1n : 1n << 62n;
      const tokens = clients.map(() => base + BigInt(Math.floor(Math.random() * 40)));
      const seen: { value: string; token: FencingToken }[] = [];
      let racing = true;
      const reader = (async () => {
        while (racing) {
          const got = await fencedGet(redis, k);
          if (got !== null) seen.push(got);
        }
      })();
      const outcomes = await Promise.all(
        clients.map((c, i) =>
          fencedSet(c, k, `writer ${i}`, tokens[i] as FencingToken).then(
            () => ({ i, ok: true as const }),
            (error: unknown) => ({ i, ok: false as const, error }),
          ),
        ),
      );
      racing = false;
      await reader;
      const acked = outcomes.filter((o) => o.ok).map((o) => o.i);
      const refused = outcomes.filter((o) => !o.ok);
      const top = acked.map((i) => tokens[i] as FencingToken).reduce((a, b) => (a > b ? a : b));
      expect(top).toBe(tokens.reduce((a, b) => (a > b ? a : b)));
      expect(await readFence(redis, k)).toBe(top);
      const final = await fencedGet(redis, k);
      expect(final?.token).toBe(top);
      const writer = Number(final?.value.replace('writer ', ''));
      expect(acked).toContain(writer);
      expect(tokens[writer]).toBe(top);
      for (const r of refused) {
        expect(r.error).toBeInstanceOf(StaleTokenError);
        const e = r.error as StaleTokenError;
        expect(e.presented).toBe(tokens[r.i]);
        expect(e.current !== null && e.current > e.presented).toBe(true);
      }
      // What a reader saw during the race: only acknowledged writers' values, with their own tokens, never going back.
      const refusedValues = new Set(refused.map((r) => `writer ${r.i}`));
      for (const [n, s] of seen.entries()) {
        expect(refusedValues.has(s.value), `a refused write was visible: ${s.value}`).toBe(false);
        expect(tokens[Number(s.value.replace('writer ', ''))]).toBe(s.token);
        if (n > 0) expect(s.token >= (seen[n - 1] as { token: FencingToken }).token).toBe(true);
      }
    }
  }, 120_000);
});

describe('the compare', () => {
  it('equal passes, larger advances, smaller is refused with the current token and changes nothing', async () => {
    const k = key('compare');
    await fencedSet(redis, k, 'a', 7n);
    await fencedSet(redis, k, 'b', 7n);
    expect(await fencedGet(redis, k)).toEqual({ value: 'b', token: 7n });
    const stale = await fencedSet(redis, k, 'c', 6n).catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(StaleTokenError);
    expect(stale).toMatchObject({ code: 'STALE_TOKEN', resource: k, presented: 6n, current: 7n });
    expect(await fencedGet(redis, k)).toEqual({ value: 'b', token: 7n });
    await fencedSet(redis, k, Buffer.from('d'), 8n);
    expect(await fencedGet(redis, k)).toEqual({ value: 'd', token: 8n });
    expect(await redis.hgetall(k)).toEqual({ value: 'd', token: '8' });
    await fencedSet(redis, k, 'max', MAX_TOKEN);
    expect(await readFence(redis, k)).toBe(MAX_TOKEN);
    expect(await codeOf(fencedSet(redis, k, 'below max', MAX_TOKEN - 1n))).toBe('STALE_TOKEN');
  });

  it('takes what the core\'s fencing input takes: a sequencer, and CURRENT_LOCK inside withLock', async () => {
    const k = key('fencing');
    const s = sequencer({ kind: 'lock', name: 'jobs', source: { kind: 'redis', id: 'x' }, token: 11n });
    await fencedSet(redis, k, 'by sequencer', s);
    expect(await readFence(redis, k)).toBe(11n);
    const source = redisSource(redis);
    const name = uniqueId('fencing_lock');
    const k2 = key('current');
    const token = await withLock(source, name, async (lock) => {
      await fencedSet(redis, k2, 'by current lock', CURRENT_LOCK);
      return lock.token;
    });
    expect(await fencedGet(redis, k2)).toEqual({ value: 'by current lock', token });
    expect(await codeOf(fencedSet(redis, k, 'outside', CURRENT_LOCK))).toBe('NO_CURRENT_LOCK');
  });
});

describe('fencedDelete: a tombstone keeps the fence', () => {
  it('the value goes, the token stays: fencedGet null, readFence the token, a stale re-insert refused, a newer one written', async () => {
    const k = key('delete');
    await fencedSet(redis, k, 'v', 5n);
    expect(await codeOf(fencedDelete(redis, k, 4n))).toBe('STALE_TOKEN');
    expect(await fencedGet(redis, k)).toEqual({ value: 'v', token: 5n });
    expect(await fencedDelete(redis, k, 5n)).toBe(true);
    expect(await fencedGet(redis, k)).toBeNull();
    expect(await readFence(redis, k)).toBe(5n);
    expect(await redis.hgetall(k)).toEqual({ token: '5' });
    const stale = await fencedSet(redis, k, 'stale', 4n).catch((e: unknown) => e);
    expect(stale).toMatchObject({ code: 'STALE_TOKEN', presented: 4n, current: 5n });
    expect(await fencedGet(redis, k)).toBeNull();
    expect(await fencedDelete(redis, k, 6n)).toBe(false);
    expect(await readFence(redis, k)).toBe(6n);
    await fencedSet(redis, k, 'again', 6n);
    expect(await fencedGet(redis, k)).toEqual({ value: 'again', token: 6n });
  });

  it('a delete of a key never written leaves a tombstone with its token', async () => {
    const k = key('delete_absent');
    expect(await readFence(redis, k)).toBeNull();
    expect(await fencedGet(redis, k)).toBeNull();
    expect(await fencedDelete(redis, k, 9n)).toBe(false);
    expect(await readFence(redis, k)).toBe(9n);
    expect(await codeOf(fencedSet(redis, k, 'late', 8n))).toBe('STALE_TOKEN');
  });
});

describe('bindFence: a fence bound to one lock', () => {
  const guard = { kind: 'lock' as const, lock: 'jobs/reindex', source: { kind: 'redis', id: 'r1' } };
  const of = (token: bigint, lock = guard.lock, id = guard.source.id) => sequencer({ kind: 'lock', name: lock, source: { kind: 'redis', id }, token });

  it('takes only that lock\'s sequencers: another lock\'s and a bare token are refused, nothing written', async () => {
    const k = key('bound');
    await fencedSet(redis, k, 'unbound', 3n);
    expect(await bindFence(redis, k, guard)).toEqual(guard);
    expect(await bindFence(redis, k, guard)).toEqual(guard); // the same binding again: a no-op
    await fencedSet(redis, k, 'guarded', of(4n));
    const other = await fencedSet(redis, k, 'other lock', of(99n, 'jobs/other')).catch((e: unknown) => e);
    expect(other).toMatchObject({ code: 'SEQUENCER_MISMATCH', bound: guard, presented: { kind: 'lock', lock: 'jobs/other', token: 99n } });
    expect(await codeOf(fencedSet(redis, k, 'other source', of(99n, guard.lock, 'r2')))).toBe('SEQUENCER_MISMATCH');
    const bare = await fencedSet(redis, k, 'bare', 99n).catch((e: unknown) => e);
    expect(bare).toMatchObject({ code: 'SEQUENCER_MISMATCH', presented: null });
    expect(await codeOf(fencedDelete(redis, k, 99n))).toBe('SEQUENCER_MISMATCH');
    expect(await fencedGet(redis, k)).toEqual({ value: 'guarded', token: 4n });
    expect(await codeOf(fencedSet(redis, k, 'stale', of(3n)))).toBe('STALE_TOKEN');
    expect(await fencedDelete(redis, k, of(5n))).toBe(true);
    expect(await readFence(redis, k)).toBe(5n);
  });

  it('binds once: another binding is FenceAlreadyBoundError; a key bound before any write reads null', async () => {
    const k = key('bind_once');
    await bindFence(redis, k, guard);
    expect(await fencedGet(redis, k)).toBeNull();
    expect(await readFence(redis, k)).toBeNull();
    const again = await bindFence(redis, k, { ...guard, lock: 'jobs/other' }).catch((e: unknown) => e);
    expect(again).toMatchObject({ code: 'FENCE_ALREADY_BOUND', bound: guard });
    await fencedSet(redis, k, 'first', of(1n));
    expect(await fencedGet(redis, k)).toEqual({ value: 'first', token: 1n });
  });

  it('a corrupt key is not bound; a bad binding is refused before any I/O', async () => {
    const k = key('bind_corrupt');
    await redis.set(k, 'plain');
    expect(await codeOf(bindFence(redis, k, guard))).toBe('CORRUPT_FENCE');
    expect(await redis.get(k)).toBe('plain');
    expect(await codeOf(bindFence(redis, key('bind_bad'), { ...guard, kind: 'mutex' as never }))).toBe('INVALID_ARGUMENT');
  });
});

describe('CorruptFenceError: a key that is not a fenced hash, nothing written', () => {
  const plant = async (what: string, k: string): Promise<void> => {
    switch (what) {
      case 'a string': await redis.set(k, 'plain'); break;
      case 'a list': await redis.rpush(k, 'a'); break;
      case 'a hash without a token': await redis.hset(k, 'value', 'v'); break;
      case 'token "abc"': await redis.hset(k, 'value', 'v', 'token', 'abc'); break;
      case 'token "0"': await redis.hset(k, 'value', 'v', 'token', '0'); break;
      case 'token "007"': await redis.hset(k, 'value', 'v', 'token', '007'); break;
      case 'token "-3"': await redis.hset(k, 'value', 'v', 'token', '-3'); break;
      case 'token 2^63': await redis.hset(k, 'value', 'v', 'token', '9223372036854775808'); break;
      case 'token "1e3"': await redis.hset(k, 'value', 'v', 'token', '1e3'); break;
      default: throw new Error(what);
    }
  };
  it.each(['a string', 'a list', 'a hash without a token', 'token "abc"', 'token "0"', 'token "007"', 'token "-3"', 'token 2^63', 'token "1e3"'])('%s', async (what) => {
    const k = key('corrupt');
    await plant(what, k);
    const dump = async (): Promise<unknown> => {
      const type = await redis.type(k);
      return type === 'string' ? redis.get(k) : type === 'list' ? redis.lrange(k, 0, -1) : redis.hgetall(k);
    };
    const before = await dump();
    expect(await codeOf(fencedSet(redis, k, 'new', 1n << 62n))).toBe('CORRUPT_FENCE');
    expect(await codeOf(fencedSet(redis, k, 'new', 1n))).toBe('CORRUPT_FENCE');
    expect(await codeOf(fencedDelete(redis, k, 1n << 62n))).toBe('CORRUPT_FENCE');
    expect(await dump()).toEqual(before);
    expect(await codeOf(fencedGet(redis, k))).toBe('CORRUPT_FENCE');
    if (what !== 'a hash without a token') expect(await codeOf(readFence(redis, k))).toBe('CORRUPT_FENCE');
  });
});

describe('bad input: a clear error, nothing sent', () => {
  // A name of this run's own: a key a broken build wrote in an earlier run must not fail this one.
  const b = key('bad');
  const bad: [string, (r: RedisCommands) => Promise<unknown>, string][] = [
    ['token 0', (r) => fencedSet(r, b, 'v', 0n), 'INVALID_TOKEN'],
    ['token -1', (r) => fencedSet(r, b, 'v', -1n), 'INVALID_TOKEN'],
    ['token 2^63', (r) => fencedSet(r, b, 'v', 1n << 63n), 'INVALID_TOKEN'],
    ['token as a number', (r) => fencedSet(r, b, 'v', 5 as never), 'INVALID_TOKEN'],
    ['token as a string', (r) => fencedSet(r, b, 'v', '5' as never), 'INVALID_TOKEN'],
    ['token null', (r) => fencedDelete(r, b, null as never), 'INVALID_TOKEN'],
    ['key empty', (r) => fencedSet(r, '', 'v', 1n), 'INVALID_ARGUMENT'],
    ['key with NUL', (r) => fencedSet(r, `${b}\0x`, 'v', 1n), 'INVALID_ARGUMENT'],
    ['key with a lone surrogate', (r) => fencedSet(r, `${b}\ud800`, 'v', 1n), 'INVALID_ARGUMENT'],
    ['key a number', (r) => fencedGet(r, 5 as never), 'INVALID_ARGUMENT'],
    ['readFence key with a lone low surrogate', (r) => readFence(r, `${b}\udc00`), 'INVALID_ARGUMENT'],
    ['value a number', (r) => fencedSet(r, b, 5 as never, 1n), 'INVALID_ARGUMENT'],
    ['value null', (r) => fencedSet(r, b, null as never, 1n), 'INVALID_ARGUMENT'],
    ['value an object', (r) => fencedSet(r, b, {} as never, 1n), 'INVALID_ARGUMENT'],
    ['value with a lone surrogate', (r) => fencedSet(r, b, 'x\udfff', 1n), 'INVALID_ARGUMENT'],
    ['a TTL option', (r) => fencedSet(r, b, 'v', 1n, { ttl: 1000 } as never), 'INVALID_ARGUMENT'],
    ['a PX option', (r) => fencedSet(r, b, 'v', 1n, { px: 1000 } as never), 'INVALID_ARGUMENT'],
    ['an unknown option', (r) => fencedSet(r, b, 'v', 1n, { nx: true } as never), 'INVALID_ARGUMENT'],
    ['timeoutMs 0', (r) => fencedSet(r, b, 'v', 1n, { timeoutMs: 0 }), 'INVALID_ARGUMENT'],
    ['not a client', () => fencedSet({} as never, b, 'v', 1n), 'INVALID_ARGUMENT'],
  ];
  it.each(bad)('%s', async (_what, call, code) => {
    const sent: string[] = [];
    const recording: RedisCommands = { call: (command, args) => (sent.push(command), redis.call(command, args)) };
    expect(await codeOf(call(recording))).toBe(code);
    expect(sent).toEqual([]);
    expect(await redis.exists(b, `${b}\0x`, `${b}\ufffd`, `${b}\ufffd\ufffd`)).toBe(0);
  });

  it('a TTL is refused with the reason', async () => {
    await expect(fencedSet(redis, b, 'v', 1n, { ttl: 1000 } as never)).rejects.toThrow(/erase its fence/);
  });
});
