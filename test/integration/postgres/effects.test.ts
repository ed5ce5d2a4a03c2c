// withEffect() and pendingEffects() against a real PostgreSQL, with a
// pg.Pool and with Kysely: the ledger's states (absent, pending, succeeded,
// failed), the fence on both ends (claim and record), reconcile, retryFailed,
// results that cannot be stored as JSON, and input refused before any SQL.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DefiniteFailure, effectIdempotencyKey, listEffects, migrate, pendingEffects, withEffect, withFence, type Database, type EffectContext, type ReconcileContext } from '../../../adapters/postgres/index.js';
import { EffectFailedError, EffectPendingError, InvalidArgumentError, InvalidTokenError, LockLostError, StaleTokenError } from '../../../src/index.js';
import { assertBuilt, cli } from '../cli/helpers.js';
import { until } from '../../helpers/wait.js';
import { adminPool, DATABASE_URL, FLAVORS, createSchema, dropSchema, migratedSchema, newPool, uniqueName } from './helpers.js';

const admin = adminPool();

/** An effect that counts its runs and answers `answer(run)`. */
function counted<R>(answer: (run: number, context: EffectContext) => R | Promise<R>): ((context: EffectContext) => Promise<R>) & { runs: EffectContext[] } {
  const runs: EffectContext[] = [];
  const effect = async (context: EffectContext): Promise<R> => {
    runs.push(context);
    return answer(runs.length, context);
  };
  return Object.assign(effect, { runs });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

describe.each(FLAVORS)('withEffect with %s', (flavor) => {
  const { pool, db } = migratedSchema(admin, `fk_fx_${flavor}`, { flavor, max: 8, applicationName: uniqueName('fk_fx') });
  const ledger = async (resource: string) =>
    (await pool.query<{ effect_key: string; state: string; attempt: number; token: string; result: string | null; result_stored: boolean | null }>(
      'SELECT effect_key, state, attempt, token::text AS token, result, result_stored FROM fencekeeper_effects WHERE resource = $1 ORDER BY effect_key', [resource])).rows;


  it('runs an effect once: a later call answers the recorded result (after a JSON round trip) without running it', async () => {
    const resource = uniqueName('res');
    const effect = counted((run) => ({ charged: 42, run, at: new Date(0) }));
    const first = await withEffect(db, { resource, token: 5n, key: 'order-1' }, effect);
    expect(first).toEqual({ source: 'ran', stored: true, idempotencyKey: effectIdempotencyKey(resource, 'order-1'), attempt: 1, result: { charged: 42, run: 1, at: '1970-01-01T00:00:00.000Z' } });
    // Another holder, a later token: the same effect is not run again.
    const again = await withEffect(db, { resource, token: 9n, key: 'order-1' }, effect);
    expect(again).toEqual({ ...first, source: 'recorded' });
    expect(effect.runs).toHaveLength(1);
    expect(effect.runs[0]).toMatchObject({ idempotencyKey: first.idempotencyKey, attempt: 1, deadline: null });
    expect(await ledger(resource)).toEqual([{ effect_key: 'order-1', state: 'succeeded', attempt: 1, token: '5', result: first.result === undefined ? null : JSON.stringify(first.result), result_stored: true }]);
    // Another key is another effect, with another idempotency key.
    const other = await withEffect(db, { resource, token: 9n, key: 'order-2' }, effect);
    expect(other.source).toBe('ran');
    expect(other.idempotencyKey).not.toBe(first.idempotencyKey);
    expect(first.idempotencyKey).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(effectIdempotencyKey(`${resource}x`, 'order-1')).not.toBe(first.idempotencyKey);
  });

  it('a stale token at the claim is refused and records nothing; the effect does not run', async () => {
    const resource = uniqueName('res');
    await withFence(db, resource, 10n, async () => undefined);
    const effect = counted(() => 'x');
    const error = await rejection(withEffect(db, { resource, token: 9n, key: 'k' }, effect));
    expect(error).toBeInstanceOf(StaleTokenError);
    expect(error).toMatchObject({ resource, presented: 9n, current: 10n });
    expect(effect.runs).toHaveLength(0);
    expect(await ledger(resource)).toEqual([]);
  });

  it('a newer holder taking over while the effect runs: the record is refused (StaleTokenError), the effect stays pending, the newer holder reconciles it', async () => {
    const resource = uniqueName('res');
    const effect = counted(async () => {
      // The lock moved on while the call was out: a newer holder advanced the fence.
      await withFence(db, resource, 20n, async () => undefined);
      return 'sent';
    });
    const error = await rejection(withEffect(db, { resource, token: 10n, key: 'mail' }, effect));
    expect(error).toBeInstanceOf(StaleTokenError);
    expect(await ledger(resource)).toEqual([expect.objectContaining({ state: 'pending', token: '10' })]);
    const pending = await pendingEffects(db, { resource });
    expect(pending.map((p) => [p.key, p.state, p.token])).toEqual([['mail', 'pending', 10n]]);

    const seen: ReconcileContext[] = [];
    const settled = await withEffect(db, { resource, token: 20n, key: 'mail' }, effect, {
      reconcile: (context) => {
        seen.push(context);
        return { outcome: 'succeeded', result: 'sent' };
      },
    });
    expect(settled).toMatchObject({ source: 'reconciled', stored: true, result: 'sent', attempt: 1 });
    expect(seen[0]?.idempotencyKey).toBe(effectIdempotencyKey(resource, 'mail'));
    expect(seen[0]?.recorded).toMatchObject({ state: 'pending', token: 10n, attempt: 1 });
    expect(effect.runs).toHaveLength(1);
    expect(await ledger(resource)).toEqual([expect.objectContaining({ state: 'succeeded', token: '20' })]);
    expect(await pendingEffects(db, { resource })).toEqual([]);
  });

  it('an unknown outcome stays pending: without reconcile every later call rejects EffectPendingError (not retryable) and runs nothing', async () => {
    const resource = uniqueName('res');
    const effect = counted((run) => {
      if (run === 1) throw new Error('socket hang up');
      return 'twice?';
    });
    const first = await rejection(withEffect(db, { resource, token: 3n, key: 'pay' }, effect));
    expect(first).toBeInstanceOf(EffectPendingError);
    expect(first).toMatchObject({ code: 'UNKNOWN_OUTCOME', name: 'EffectPendingError' });
    expect(first).toMatchObject({ retryable: false, resource, key: 'pay', attempt: 1, token: 3n, idempotencyKey: effectIdempotencyKey(resource, 'pay') });
    expect((first as Error).cause).toMatchObject({ message: 'socket hang up' });
    for (const token of [3n, 4n]) {
      const later = await rejection(withEffect(db, { resource, token, key: 'pay' }, effect));
      expect(later).toBeInstanceOf(EffectPendingError);
      expect(later).toMatchObject({ retryable: false, token: 3n });
      expect((later as Error).message).toContain('reconcile');
    }
    expect(effect.runs).toHaveLength(1);
    expect(await ledger(resource)).toEqual([expect.objectContaining({ state: 'pending', token: '3' })]);
  });

  it('a definite failure is recorded: later calls rethrow it without running; retryFailed runs a new attempt under a new key', async () => {
    const resource = uniqueName('res');
    const effect = counted((run) => {
      if (run === 1) throw new DefiniteFailure('card declined', { details: { status: 402, code: 'card_declined' } });
      return { charged: true };
    });
    const first = await rejection(withEffect(db, { resource, token: 1n, key: 'charge' }, effect));
    expect(first).toBeInstanceOf(EffectFailedError);
    expect(first).toMatchObject({ code: 'EFFECT_FAILED', attempt: 1, details: { status: 402, code: 'card_declined' } });
    expect((first as Error).cause).toBeInstanceOf(DefiniteFailure);
    const again = await rejection(withEffect(db, { resource, token: 2n, key: 'charge' }, effect));
    expect(again).toBeInstanceOf(EffectFailedError);
    expect(again).toMatchObject({ attempt: 1, details: { status: 402, code: 'card_declined' } });
    expect((again as Error).message).toContain('card declined');
    expect(effect.runs).toHaveLength(1);

    const retried = await withEffect(db, { resource, token: 2n, key: 'charge' }, effect, { retryFailed: true });
    expect(retried).toMatchObject({ source: 'ran', attempt: 2, result: { charged: true } });
    expect(retried.idempotencyKey).toBe(effectIdempotencyKey(resource, 'charge', 2));
    expect(retried.idempotencyKey).not.toBe(effect.runs[0]?.idempotencyKey);
    expect(effect.runs.map((r) => r.attempt)).toEqual([1, 2]);
    // Succeeded now: retryFailed has nothing to run again.
    expect(await withEffect(db, { resource, token: 2n, key: 'charge' }, effect, { retryFailed: true })).toMatchObject({ source: 'recorded', attempt: 2 });
    expect(effect.runs).toHaveLength(2);
  });

  it('a result JSON cannot carry is recorded as succeeded without it, and the answer says so; strings jsonb would refuse are stored exactly', async () => {
    const resource = uniqueName('res');
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    for (const [key, value] of [['bigint', { amount: 10n }], ['cycle', cyclic], ['function', () => 1]] as const) {
      const ran = await withEffect(db, { resource, token: 1n, key }, async () => value);
      expect(ran).toMatchObject({ source: 'ran', stored: false });
      expect(ran.result).toBe(value);
      const later = await withEffect(db, { resource, token: 1n, key }, async () => 'not again');
      expect(later).toMatchObject({ source: 'recorded', stored: false, result: undefined });
    }
    // \u0000 and a lone surrogate are valid JSON text but not valid jsonb.
    const odd = { nul: 'a\u0000b', lone: '\ud800', emoji: '\u{1F600}' };
    expect((await withEffect(db, { resource, token: 1n, key: 'odd' }, async () => odd)).result).toEqual(odd);
    expect((await withEffect(db, { resource, token: 1n, key: 'odd' }, async () => null)).result).toEqual(odd);
    // Nothing returned is a result too (stored: the effect returned undefined).
    expect(await withEffect(db, { resource, token: 1n, key: 'void' }, async () => undefined)).toMatchObject({ stored: true, result: undefined });
    expect(await withEffect(db, { resource, token: 1n, key: 'void' }, async () => 'x')).toMatchObject({ source: 'recorded', stored: true, result: undefined });
    expect((await ledger(resource)).map((r) => [r.effect_key, r.state, r.result_stored])).toEqual([
      ['bigint', 'succeeded', false], ['cycle', 'succeeded', false], ['function', 'succeeded', false], ['odd', 'succeeded', true], ['void', 'succeeded', true],
    ]);
    expect(await pendingEffects(db, { resource })).toEqual([]);
  });

  it('reconcile: "failed" is recorded as failed; "unknown" and a throwing reconcile leave it pending (retryable)', async () => {
    const resource = uniqueName('res');
    await rejection(withEffect(db, { resource, token: 1n, key: 'a' }, async () => { throw new Error('timeout'); }));
    await rejection(withEffect(db, { resource, token: 1n, key: 'b' }, async () => { throw new Error('timeout'); }));
    const unknown = await rejection(withEffect(db, { resource, token: 2n, key: 'a' }, async () => 'x', { reconcile: () => ({ outcome: 'unknown' }) }));
    expect(unknown).toBeInstanceOf(EffectPendingError);
    expect(unknown).toMatchObject({ retryable: true });
    const thrown = await rejection(withEffect(db, { resource, token: 2n, key: 'a' }, async () => 'x', { reconcile: () => { throw new Error('lookup failed'); } }));
    expect(thrown).toBeInstanceOf(EffectPendingError);
    expect((thrown as Error).cause).toMatchObject({ message: 'lookup failed' });
    const bad = await rejection(withEffect(db, { resource, token: 2n, key: 'a' }, async () => 'x', { reconcile: () => ({ outcome: 'maybe' }) as never }));
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect((await pendingEffects(db, { resource })).map((p) => p.key)).toEqual(['a', 'b']);

    const failed = await rejection(withEffect(db, { resource, token: 2n, key: 'b' }, async () => 'x', { reconcile: () => ({ outcome: 'failed', message: 'the provider has no such payment', details: { lookup: 404 } }) }));
    expect(failed).toBeInstanceOf(EffectFailedError);
    expect(failed).toMatchObject({ details: { lookup: 404 } });
    expect(await rejection(withEffect(db, { resource, token: 2n, key: 'b' }, async () => 'x'))).toBeInstanceOf(EffectFailedError);
    expect((await pendingEffects(db, { resource })).map((p) => p.key)).toEqual(['a']);
  });

  it('"not happened" is trusted only after the recorded deadline plus grace; then the effect runs again under the same key', async () => {
    const resource = uniqueName('res');
    const effect = counted((run, context) => {
      if (run === 1) throw new Error('reset');
      return { run, deadline: context.deadline?.toISOString() };
    });
    const deadline = performance.now() + 400;
    await rejection(withEffect(db, { resource, token: 1n, key: 'k' }, effect, { deadline, graceMs: 100 }));
    const [recorded] = await pendingEffects(db, { resource });
    expect(recorded?.deadline).toBeInstanceOf(Date);
    expect(recorded?.graceMs).toBe(100);
    expect(effect.runs[0]?.deadline?.getTime()).toBe(recorded?.deadline?.getTime());

    // Too early: the earlier call may still land.
    const early = await rejection(withEffect(db, { resource, token: 2n, key: 'k' }, effect, { graceMs: 100, reconcile: () => ({ outcome: 'not-happened' }) }));
    expect(early).toBeInstanceOf(EffectPendingError);
    expect((early as Error).message).toContain('before its deadline');
    expect(effect.runs).toHaveLength(1);

    const waited: boolean[] = [];
    const settled = await withEffect(db, { resource, token: 2n, key: 'k' }, effect, {
      graceMs: 100,
      reconcile: async (context) => {
        await context.waitOutDeadline();
        waited.push(Date.now() > context.recorded.deadline!.getTime() + 100);
        return { outcome: 'not-happened' };
      },
    });
    expect(waited).toEqual([true]);
    expect(settled).toMatchObject({ source: 'ran', attempt: 1, idempotencyKey: effectIdempotencyKey(resource, 'k') });
    expect(effect.runs.map((r) => r.idempotencyKey)).toEqual([settled.idempotencyKey, settled.idempotencyKey]);
    expect(await ledger(resource)).toEqual([expect.objectContaining({ state: 'succeeded', token: '2' })]);
  });

  // Between the recorded deadline and the deadline plus the grace, the
  // earlier call may still be landing: a "no" there says nothing. The grace
  // is the larger of the one recorded when the effect started and the one
  // passed now (a reconciling holder cannot shorten its predecessor's).
  it('"not happened" asked after the recorded deadline but within its grace is refused; the grace is the larger of the recorded one and ours', async () => {
    const LONG = 30_000; // the window the "too early" questions are asked in: wide enough for a loaded machine
    // The first holder's call: its reply lost, so the effect stays pending.
    const reset = async (): Promise<never> => { throw new Error('reset'); };
    const effect = counted((run) => ({ run }));
    const notHappened = (): { outcome: 'not-happened' } => ({ outcome: 'not-happened' });
    for (const [recordedGrace, ourGrace] of [[LONG, LONG], [LONG, 100], [100, LONG]] as const) {
      const resource = uniqueName('res');
      await rejection(withEffect(db, { resource, token: 1n, key: 'k' }, reset, { deadline: performance.now() + 300, graceMs: recordedGrace }));
      const [recorded] = await pendingEffects(db, { resource });
      expect(recorded?.graceMs).toBe(recordedGrace);
      const deadline = recorded!.deadline!.getTime();
      // Past the deadline, and past the shorter grace: only the longer one still says "too early".
      await until(() => Date.now() > deadline + 300, 'the recorded deadline plus 300 ms');
      const early = await withEffect(db, { resource, token: 2n, key: 'k' }, effect, { graceMs: ourGrace, reconcile: notHappened }).then(() => 'settled as not happened, and run', (e: unknown) => e);
      const asked = `recorded grace ${recordedGrace} ms, ours ${ourGrace} ms`;
      expect(Date.now(), `${asked}: asked within the grace`).toBeLessThan(deadline + LONG);
      expect(early, asked).toBeInstanceOf(EffectPendingError);
      expect((early as Error).message, asked).toContain(`before its deadline ${recorded!.deadline!.toISOString()} plus ${LONG} ms has passed`);
      expect(await pendingEffects(db, { resource }), asked).toEqual([expect.objectContaining({ token: 1n, graceMs: recordedGrace })]);
    }
    expect(effect.runs).toHaveLength(0);

    // waitOutDeadline() waits out the recorded grace too, not only ours.
    const resource = uniqueName('res');
    await rejection(withEffect(db, { resource, token: 1n, key: 'k' }, reset, { deadline: performance.now() + 300, graceMs: 1500 }));
    const [recorded] = await pendingEffects(db, { resource });
    const waitedUntil: number[] = [];
    const settled = await withEffect(db, { resource, token: 2n, key: 'k' }, effect, {
      graceMs: 0,
      reconcile: async (context) => {
        await context.waitOutDeadline();
        waitedUntil.push(Date.now());
        return { outcome: 'not-happened' };
      },
    });
    expect(waitedUntil[0]).toBeGreaterThan(recorded!.deadline!.getTime() + 1500);
    expect(settled).toMatchObject({ source: 'ran', result: { run: 1 } });
  });

  it('an effect recorded without a deadline can never be settled as "not happened"', async () => {
    const resource = uniqueName('res');
    await rejection(withEffect(db, { resource, token: 1n, key: 'k' }, async () => { throw new Error('reset'); }));
    const waiting = await rejection(withEffect(db, { resource, token: 2n, key: 'k' }, async () => 'x', {
      reconcile: async (context) => {
        await context.waitOutDeadline();
        return { outcome: 'not-happened' };
      },
    }));
    expect(waiting).toBeInstanceOf(EffectPendingError);
    expect((waiting as Error).message).toContain('without a deadline');
    const told = await rejection(withEffect(db, { resource, token: 2n, key: 'k' }, async () => 'x', { reconcile: () => ({ outcome: 'not-happened' }) }));
    expect(told).toBeInstanceOf(EffectPendingError);
    expect(await pendingEffects(db, { resource })).toHaveLength(1);
  });

  it('the effect\'s signal aborts at the deadline; a deadline already passed refuses before anything is recorded', async () => {
    const resource = uniqueName('res');
    const aborted = await rejection(withEffect(db, { resource, token: 1n, key: 'slow' }, (context) => new Promise((_, reject) => {
      context.signal.addEventListener('abort', () => reject(context.signal.reason as Error));
    }), { deadline: performance.now() + 300 }));
    expect(aborted).toBeInstanceOf(EffectPendingError);
    expect((aborted as Error).cause).toBeInstanceOf(LockLostError);
    expect((await pendingEffects(db, { resource })).map((p) => p.key)).toEqual(['slow']);

    const late = await rejection(withEffect(db, { resource, token: 1n, key: 'late' }, async () => 'x', { deadline: performance.now() - 1 }));
    expect(late).toBeInstanceOf(LockLostError);
    expect(late).toMatchObject({ reason: 'deadline' });
    expect((await ledger(resource)).map((r) => r.effect_key)).toEqual(['slow']);
  });

  it('pendingEffects filters by resource and age; listEffects by state', async () => {
    const a = uniqueName('res');
    const b = uniqueName('res');
    for (const resource of [a, b]) await rejection(withEffect(db, { resource, token: 1n, key: 'p' }, async () => { throw new Error('reset'); }));
    await withEffect(db, { resource: a, token: 1n, key: 'done' }, async () => 1);
    expect((await pendingEffects(db, { resource: a })).map((p) => [p.resource, p.key])).toEqual([[a, 'p']]);
    expect((await pendingEffects(db)).filter((p) => p.resource === a || p.resource === b)).toHaveLength(2);
    expect((await pendingEffects(db, { resource: a, olderThanMs: 3_600_000 }))).toEqual([]);
    await new Promise((r) => setTimeout(r, 50));
    expect((await pendingEffects(db, { resource: a, olderThanMs: 10 })).map((p) => p.key)).toEqual(['p']);
    expect((await listEffects(db, { resource: a, state: 'succeeded' })).map((p) => p.key)).toEqual(['done']);
    expect((await listEffects(db, { resource: a })).map((p) => p.key).sort()).toEqual(['done', 'p']);
    expect(await listEffects(db, { resource: a, limit: 1 })).toHaveLength(1);
  });
});

describe('withEffect refuses bad input before any SQL', () => {
  const { pool } = migratedSchema(admin, 'fk_fx_input', { max: 4, applicationName: uniqueName('fk_fx') });
  let statements = 0;
  /** The pool, counting everything sent through it. */
  const counting = {
    query: (config: never) => {
      statements += 1;
      return pool.query(config);
    },
    connect: async () => {
      statements += 1;
      return pool.connect();
    },
  } as unknown as Database;

  const effect = async (): Promise<string> => 'x';
  const good = { resource: 'r', token: 1n, key: 'k' };

  it.each([
    ['no database', () => withEffect({} as Database, good, effect), InvalidArgumentError],
    ['no target', () => withEffect(counting, null as never, effect), InvalidArgumentError],
    ['an empty resource', () => withEffect(counting, { ...good, resource: '' }, effect), InvalidArgumentError],
    ['a resource with NUL', () => withEffect(counting, { ...good, resource: 'a\u0000b' }, effect), InvalidArgumentError],
    ['a number token', () => withEffect(counting, { ...good, token: 5 as never }, effect), InvalidTokenError],
    ['token 0', () => withEffect(counting, { ...good, token: 0n }, effect), InvalidTokenError],
    ['token 2^63', () => withEffect(counting, { ...good, token: 2n ** 63n }, effect), InvalidTokenError],
    ['an empty key', () => withEffect(counting, { ...good, key: '' }, effect), InvalidArgumentError],
    ['a key too long', () => withEffect(counting, { ...good, key: 'k'.repeat(1025) }, effect), InvalidArgumentError],
    ['a key with a lone surrogate', () => withEffect(counting, { ...good, key: 'a\udc00' }, effect), InvalidArgumentError],
    ['a key that is a number', () => withEffect(counting, { ...good, key: 7 as never }, effect), InvalidArgumentError],
    ['no effect', () => withEffect(counting, good, 'send' as never), InvalidArgumentError],
    ['a NaN deadline', () => withEffect(counting, good, effect, { deadline: Number.NaN }), InvalidArgumentError],
    ['a negative grace', () => withEffect(counting, good, effect, { graceMs: -1 }), InvalidArgumentError],
    ['a fractional grace', () => withEffect(counting, good, effect, { graceMs: 1.5 }), InvalidArgumentError],
    ['a reconcile that is not a function', () => withEffect(counting, good, effect, { reconcile: 'yes' as never }), InvalidArgumentError],
    ['retryFailed not a boolean', () => withEffect(counting, good, effect, { retryFailed: 1 as never }), InvalidArgumentError],
    ['a signal that is not one', () => withEffect(counting, good, effect, { signal: {} as never }), InvalidArgumentError],
    ['options that are not an object', () => withEffect(counting, good, effect, 5 as never), InvalidArgumentError],
    ['pendingEffects: a negative age', () => pendingEffects(counting, { olderThanMs: -1 }), InvalidArgumentError],
    ['pendingEffects: an empty resource', () => pendingEffects(counting, { resource: '' }), InvalidArgumentError],
    ['listEffects: an unknown state', () => listEffects(counting, { state: 'done' as never }), InvalidArgumentError],
    ['listEffects: limit 0', () => listEffects(counting, { limit: 0 }), InvalidArgumentError],
  ])('%s', async (_what, call, kind) => {
    statements = 0;
    const error = await rejection(call());
    expect(error).toBeInstanceOf(kind);
    expect(statements).toBe(0);
  });

  it('and the same good input does send SQL (the counter counts)', async () => {
    statements = 0;
    await withEffect(counting, { resource: uniqueName('res'), token: 1n, key: 'k' }, effect);
    expect(statements).toBeGreaterThan(0);
  });
});

describe('fencekeeper effects', () => {
  const schema = uniqueName('fk_fx_cli');
  let pool: pg.Pool;
  let url: string;

  beforeAll(async () => {
    assertBuilt();
    await createSchema(admin, schema);
    pool = newPool(schema, uniqueName('fk_fx'), 2);
    const u = new URL(DATABASE_URL);
    u.searchParams.set('options', `-c search_path=${schema}`);
    url = u.href;
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(admin, schema);
  });

  it('without a ledger exits 69 and says to migrate; with one, lists effects as a table, --pending only the pending ones', async () => {
    const missing = await cli(['effects'], { DATABASE_URL: url }).done;
    expect(missing.code).toBe(69);
    expect(missing.stderr).toContain('fencekeeper_effects');
    expect(missing.stderr).toContain('`fencekeeper migrate`');

    await migrate(pool);
    expect((await cli(['effects', '--pending', '--database-url', url], { DATABASE_URL: '' }).done).stdout.trim()).toBe('no pending effects');
    const resource = uniqueName('res');
    await withEffect(pool, { resource, token: 4n, key: 'sent' }, async () => 'ok');
    await rejection(withEffect(pool, { resource, token: 4n, key: 'lost' }, async () => { throw new Error('reset'); }));
    const all = await cli(['effects', '--resource', resource], { DATABASE_URL: url }).done;
    expect(all.code).toBe(0);
    const rows = all.stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^state\s+resource\s+key\s+attempt\s+token\s+idempotency key\s+deadline\s+since$/);
    expect(rows.slice(1).map((r) => r.split(/\s+/).slice(0, 5))).toEqual([
      ['succeeded', resource, 'sent', '1', '4'],
      ['pending', resource, 'lost', '1', '4'],
    ]);
    const pending = await cli(['effects', '--pending', '--resource', resource], { DATABASE_URL: url }).done;
    expect(pending.stdout).toContain(effectIdempotencyKey(resource, 'lost'));
    expect(pending.stdout).not.toContain(effectIdempotencyKey(resource, 'sent'));
    expect(pending.stdout).toContain('1 pending');
  });

  it('usage errors exit 64 before connecting', async () => {
    for (const args of [['effects', 'extra'], ['effects', '--resource', ''], ['effects', '--older-than', 'soon'], ['effects', '--limit', '0'], ['effects', '--nope']]) {
      const run = await cli(args, { DATABASE_URL: 'postgres://root@127.0.0.1:1/none' }).done;
      expect({ args, code: run.code }).toEqual({ args, code: 64 });
    }
    expect((await cli(['effects'], { DATABASE_URL: '' }).done).code).toBe(64);
  });

  it('effects settle: happened records a pending effect succeeded; not-happened only once its call can no longer land; anything else is refused, unchanged', async () => {
    await migrate(pool);
    const resource = uniqueName('settle');
    const settle = (key: string, outcome: string) => cli(['effects', 'settle', resource, key, '--outcome', outcome], { DATABASE_URL: url }).done;
    // Pending with no deadline: its call may land at any time.
    await rejection(withEffect(pool, { resource, token: 4n, key: 'open' }, async () => { throw new Error('reset'); }));
    const early = await settle('open', 'not-happened');
    expect(early.code).toBe(64);
    expect(early.stderr).toContain('no deadline was recorded');
    expect((await pendingEffects(pool, { resource })).map((e) => e.key)).toEqual(['open']);
    const happened = await settle('open', 'happened');
    expect({ code: happened.code, stderr: happened.stderr }).toEqual({ code: 0, stderr: '' });
    expect(happened.stdout).toContain('recorded succeeded');
    let ran = 0;
    await withEffect(pool, { resource, token: 5n, key: 'open' }, async () => { ran += 1; return 'again'; });
    expect(ran).toBe(0);
    const again = await settle('open', 'happened');
    expect(again.code).toBe(64);
    expect(again.stderr).toContain('is not pending');

    // Pending with a deadline: not-happened waits until deadline + graceMs has passed.
    await rejection(withEffect(pool, { resource, token: 5n, key: 'timed' }, async () => { throw new Error('reset'); }, { deadline: performance.now() + 1500, graceMs: 0 }));
    const tooSoon = await settle('timed', 'not-happened');
    expect(tooSoon.code).toBe(64);
    expect(tooSoon.stderr).toContain('may still land until');
    await new Promise((resolve) => setTimeout(resolve, 1600));
    const abandoned = await settle('timed', 'not-happened');
    expect({ code: abandoned.code, stderr: abandoned.stderr }).toEqual({ code: 0, stderr: '' });
    expect(abandoned.stdout).toContain('recorded failed');
    expect(await rejection(withEffect(pool, { resource, token: 6n, key: 'timed' }, async () => { ran += 1; }))).toBeInstanceOf(EffectFailedError);
    expect(ran).toBe(0);

    expect((await settle('nosuch', 'happened')).code).toBe(64);
    expect((await cli(['effects', 'settle', resource, 'open', '--outcome', 'maybe'], { DATABASE_URL: url }).done).code).toBe(64);
    expect((await cli(['effects', 'settle', resource], { DATABASE_URL: url }).done).code).toBe(64);
  });
});
