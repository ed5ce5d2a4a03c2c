// fencekeeper/testing's history checker on hand-made histories: each
// property reported when broken, nothing when it holds; and WriteHistory's
// outcomes (a refusal is not an unknown).
import { describe, expect, it } from 'vitest';
import { StaleTokenError } from '../../src/index.js';
import { WriteHistory, checkHistory, type RecordedWrite } from '../../src/testing/index.js';

const w = (id: string, token: bigint, invokedAt: number, completedAt: number | null, outcome: RecordedWrite['outcome'] = 'ok'): RecordedWrite => ({ id, token, invokedAt, completedAt, outcome });

/** A run that fencing got right: A (34) wrote, B (35) wrote, A late with 34 was refused. */
const good = {
  writes: [w('a1', 34n, 100, 110), w('b1', 35n, 200, 210), w('a2', 34n, 300, 305, 'refused')],
  applied: [{ id: 'a1', token: 34n }, { id: 'b1', token: 35n }],
  fence: 35n,
};

const kinds = (history: Parameters<typeof checkHistory>[0]): string[] => checkHistory(history).violations.map((v) => v.kind);

describe('checkHistory()', () => {
  it('passes a history where the stale write was refused, and counts the outcomes', () => {
    const result = checkHistory(good);
    expect(result).toMatchObject({ valid: true, violations: [], counts: { ok: 2, refused: 1, failed: 0, unknown: 0, applied: 2 } });
  });

  it('the paused holder let through: order, real time, final state', () => {
    const result = checkHistory({
      writes: [w('a1', 34n, 100, 110), w('b1', 35n, 200, 210), w('a2', 34n, 300, 305)],
      applied: [{ id: 'a1', token: 34n }, { id: 'b1', token: 35n }, { id: 'a2', token: 34n }],
      resource: 'reports',
    });
    expect(result.valid).toBe(false);
    expect(result.violations.map((v) => v.kind)).toEqual(['order', 'real-time', 'final-state']);
    expect(result.violations[0]?.message).toBe('a2 (token 34) was applied after b1 (token 35), at position 2 of 3');
  });

  it('an acknowledged write missing, a write applied twice, a phantom and a changed token', () => {
    expect(kinds({ ...good, applied: [{ id: 'b1', token: 35n }] })).toEqual(['lost-ack']);
    expect(kinds({ ...good, applied: [...good.applied, { id: 'b1', token: 35n }] })).toEqual(['duplicate']);
    expect(kinds({ ...good, applied: [...good.applied, { id: 'b1', token: 35n }], allowRepeats: true })).toEqual([]);
    expect(kinds({ ...good, applied: [...good.applied, { id: 'zz', token: 36n }], fence: 36n })).toEqual(['phantom']);
    expect(kinds({ ...good, applied: [{ id: 'a1', token: 34n }, { id: 'b1', token: 36n }], fence: 36n })).toEqual(['token-mismatch']);
  });

  it('a refused or failed write that took effect anyway, a final state that is not the last write, a fence below the writes', () => {
    // applied and, being the last, the final state too
    expect(kinds({ ...good, applied: [...good.applied, { id: 'a2', token: 34n }] })).toEqual(['order', 'final-state', 'refused-applied', 'refused-applied']);
    expect(kinds({ ...good, writes: [...good.writes, w('c1', 36n, 400, 401, 'failed')], final: { id: 'c1', token: 36n } })).toEqual(['final-state', 'refused-applied']);
    expect(kinds({ ...good, final: { id: 'a1', token: 34n } })).toEqual(['final-state', 'final-state']);
    expect(kinds({ ...good, fence: 34n })).toEqual(['fence']);
    expect(kinds({ ...good, fence: null })).toEqual(['fence']);
  });
});

describe('WriteHistory', () => {
  it('records ok, refused (StaleTokenError by default), failed and unknown, with the id it handed out', async () => {
    const history = new WriteHistory();
    const ok = await history.record(35n, async (id) => `stored ${id}`);
    expect(ok).toMatchObject({ value: 'stored w1', write: { id: 'w1', token: 35n, outcome: 'ok' } });
    const refused = await history.record(34n, async () => {
      throw new StaleTokenError('reports', 34n, 35n);
    });
    expect(refused.write.outcome).toBe('refused');
    expect(refused.error).toBeInstanceOf(StaleTokenError);
    const lost = await history.record(36n, async () => {
      throw new Error('socket hang up');
    });
    expect(lost.write.outcome).toBe('unknown');
    const http409 = await history.record(34n, async () => {
      throw Object.assign(new Error('409'), { status: 409 });
    }, { id: 'late', refused: (e) => (e as { status?: number }).status === 409, failed: () => true });
    expect(http409.write).toMatchObject({ id: 'late', outcome: 'refused' });
    const invalid = await history.record(37n, async () => {
      throw new TypeError('bad body');
    }, { failed: (e) => e instanceof TypeError });
    expect(invalid.write.outcome).toBe('failed');
    expect(history.writes.map((x) => x.outcome)).toEqual(['ok', 'refused', 'unknown', 'refused', 'failed']);
    for (const x of history.writes) {
      expect(x.completedAt).not.toBeNull();
      expect(x.completedAt!).toBeGreaterThanOrEqual(x.invokedAt);
      expect(x.invokedAt).toBeGreaterThan(Date.UTC(2020, 0, 1)); // ms since the epoch
    }
  });
});
