// A waiter's place (src/sources/redis/wake.ts queuePlace): the nodes order a
// lock's waiters by the bytes of their entries, which begin with it, so the
// places of one process must sort in the order they were taken, even when
// the wall clock steps back, and be of one width (a shorter string would
// sort before a longer one of a later time).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { queuePlace } from '../../src/sources/redis/wake.js';

afterEach(() => vi.restoreAllMocks());

describe('queuePlace', () => {
  it('sorts in the order taken, within a millisecond and when the clock steps back; one width; no spaces', () => {
    const clock = vi.spyOn(Date, 'now');
    const places: string[] = [];
    for (const ms of [1_000, 1_000, 1_000, 2_000, 1_500, 900, 3_000, 0xfff_ffff_ffff]) {
      clock.mockReturnValue(ms);
      places.push(queuePlace());
    }
    // Byte order, as the server's sorted set compares members with equal scores.
    expect([...places].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))).toEqual(places);
    expect(new Set(places.map((p) => p.length)).size).toBe(1);
    expect(places.every((p) => /^[0-9a-z]{21}$/.test(p))).toBe(true);
    expect(new Set(places).size).toBe(places.length);
  });
});
