// MemoryFenceStore on its own: the FIFO mutex, the mark (advanced on admission), aborts.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MemoryFenceStore } from '../../adapters/express/index.js';
import { InvalidArgumentError, InvalidTokenError, StaleTokenError, type FenceAdmission } from '../../src/index.js';

/** Whether a promise has settled, after letting every queued microtask run. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(() => { done = true; }, () => { done = true; });
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

describe('MemoryFenceStore', () => {
  it('admits a first token with previous null; the mark moves on admission', async () => {
    const store = new MemoryFenceStore();
    expect(await store.current('r')).toBeNull();
    const a = await store.admit('r', 34n);
    expect(a).toMatchObject({ resource: 'r', token: 34n, previous: null, transaction: undefined });
    expect(await store.current('r')).toBe(34n);
    await a.commit();
    expect(await store.current('r')).toBe(34n);
    const b = await store.admit('r', 34n);
    expect(b.previous).toBe(34n);
    await b.commit();
  });

  // Regression (found by the fault checker): abort() used to drop the
  // advance, so after a handler had written with 20 and its client left, 15
  // was admitted and written after it.
  it('abort keeps the advance: no smaller token passes after an admitted one; settling is idempotent', async () => {
    const store = new MemoryFenceStore();
    await (await store.admit('r', 10n)).commit();
    const a = await store.admit('r', 20n);
    await a.abort();
    await a.commit();
    await a.abort();
    expect(await store.current('r')).toBe(20n);
    await expect(store.admit('r', 15n)).rejects.toMatchObject({ presented: 15n, current: 20n });
    const b = await store.admit('r', 20n);
    await b.commit();
    await b.abort();
    expect(await store.current('r')).toBe(20n);
  });

  it('holds the fence until settled and hands it on in arrival order', async () => {
    const store = new MemoryFenceStore();
    const holder = await store.admit('r', 1n);
    const order: bigint[] = [];
    const waiting = [5n, 3n, 7n].map((t) => store.admit('r', t).then((a) => { order.push(a.token); return a; }));
    expect(await settled(waiting[0]!)).toBe(false);
    await holder.commit();
    const first = await waiting[0]!;
    expect(await settled(waiting[1]!)).toBe(false);
    await first.abort();
    // 3 arrived before 7 but after 5 was admitted: it is stale now.
    await expect(waiting[1]!).rejects.toMatchObject({ presented: 3n, current: 5n });
    await (await waiting[2]!).commit();
    expect(order).toEqual([5n, 7n]);
    expect(await store.current('r')).toBe(7n);
  });

  it('refuses below the mark at once, even while the fence is held', async () => {
    const store = new MemoryFenceStore();
    await (await store.admit('r', 50n)).commit();
    const holder = await store.admit('r', 60n);
    const error = await store.admit('r', 49n).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect(error).toMatchObject({ resource: 'r', presented: 49n, current: 60n, code: 'STALE_TOKEN' });
    await holder.abort();
  });

  it('a waiter that the holder\'s commit made stale is refused with the new mark; the next one proceeds', async () => {
    const store = new MemoryFenceStore();
    const holder = await store.admit('r', 35n);
    const stale = store.admit('r', 34n);
    const fresh = store.admit('r', 36n);
    await holder.commit();
    await expect(stale).rejects.toMatchObject({ presented: 34n, current: 35n });
    const next = await fresh;
    expect(next.previous).toBe(35n);
    await next.commit();
  });

  it('if the holder aborts, a smaller token is still refused (the aborted holder may have acted)', async () => {
    const store = new MemoryFenceStore();
    const holder = await store.admit('r', 35n);
    await expect(store.admit('r', 34n)).rejects.toMatchObject({ presented: 34n, current: 35n });
    await holder.abort();
    expect(await store.current('r')).toBe(35n);
  });

  it('an aborted wait rejects with the reason, leaves the queue, and never holds the fence', async () => {
    const store = new MemoryFenceStore();
    const holder = await store.admit('r', 1n);
    const controller = new AbortController();
    const gone = store.admit('r', 2n, { signal: controller.signal });
    const after = store.admit('r', 3n);
    const reason = new Error('client left');
    controller.abort(reason);
    await expect(gone).rejects.toBe(reason);
    await holder.commit();
    const next = await after;
    expect(next.token).toBe(3n);
    await next.commit();
    // Free again: an uncontended admit does not wait.
    const free = store.admit('r', 3n);
    expect(await settled(free)).toBe(true);
    await (await free).commit();
  });

  it('reads the signal only when it has to wait: already aborted, a wait is refused; uncontended, it is never read', async () => {
    const store = new MemoryFenceStore();
    let reads = 0;
    const controller = new AbortController();
    controller.abort(new Error('early'));
    const options = {
      get signal(): AbortSignal {
        reads++;
        return controller.signal;
      },
    };
    const free = await store.admit('r', 1n, options);
    expect(reads).toBe(0);
    await expect(store.admit('r', 1n, options)).rejects.toThrow('early');
    expect(reads).toBe(1);
    await free.commit();
    await (await store.admit('r', 1n)).commit();
  });

  it('check-only ({ advance: false }): admitted at or above the mark, the mark stays; below is refused; a waiting check-only admission too', async () => {
    const store = new MemoryFenceStore();
    const first = await store.admit('check', 5n, { advance: false });
    // A fence with no mark records the smallest token: it admits every token, as no mark does.
    expect(await store.current('check')).toBe(1n);
    await first.commit();
    await (await store.admit('check', 100n)).commit();
    for (const token of [100n, 150n]) {
      const admission = await store.admit('check', token, { advance: false });
      expect(admission.previous).toBe(100n);
      await admission.commit();
      expect(await store.current('check')).toBe(100n);
    }
    await expect(store.admit('check', 99n, { advance: false })).rejects.toBeInstanceOf(StaleTokenError);
    // Queued behind a holder: the check-only waiter leaves the mark where the holder put it.
    const holder = await store.admit('check', 120n);
    const waiting = store.admit('check', 130n, { advance: false });
    await holder.commit();
    await (await waiting).commit();
    expect(await store.current('check')).toBe(120n);
    await expect(store.admit('check', 110n)).rejects.toBeInstanceOf(StaleTokenError);
    await expect(store.admit('check', 130n, { advance: 'no' } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await store.current('check')).toBe(120n);
  });

  it('rejects what is not a token or a resource', async () => {
    const store = new MemoryFenceStore();
    await expect(store.admit('r', 0n)).rejects.toBeInstanceOf(InvalidTokenError);
    await expect(store.admit('r', 1n << 63n)).rejects.toBeInstanceOf(InvalidTokenError);
    await expect(store.admit('r', 5 as unknown as bigint)).rejects.toBeInstanceOf(InvalidTokenError);
    await expect(store.admit('', 5n)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('property: under concurrent admits, one holder at a time and the admitted tokens never go down', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ token: fc.bigInt({ min: 1n, max: 40n }), commit: fc.boolean(), leave: fc.boolean() }), { minLength: 1, maxLength: 40 }),
        async (requests) => {
          const store = new MemoryFenceStore();
          let holders = 0;
          let admittedMax = 0n;
          const outcomes = requests.map(async ({ token, commit, leave }) => {
            const controller = new AbortController();
            const admitted = store.admit('r', token, { signal: controller.signal });
            if (leave) queueMicrotask(() => controller.abort(new Error('left')));
            let admission: FenceAdmission<undefined>;
            try {
              admission = await admitted;
            } catch (error) {
              if (error instanceof StaleTokenError) expect(token).toBeLessThan(error.current!);
              return;
            }
            holders++;
            expect(holders).toBe(1);
            expect(token).toBeGreaterThanOrEqual(admittedMax);
            admittedMax = token;
            await new Promise((resolve) => setImmediate(resolve));
            holders--;
            await (commit ? admission.commit() : admission.abort());
          });
          await Promise.all(outcomes);
          expect(await store.current('r')).toBe(admittedMax === 0n ? null : admittedMax);
        },
      ),
      { numRuns: 200 },
    );
  });
});
