// PostgresFenceStore lines up its own admissions for one resource (wait-line.ts):
// one waits on the fence row's lock in PostgreSQL, the rest wait in the
// process without a pooled connection, first come first served. Once with a
// pg.Pool and once with Kysely over one.
import { describe, expect, it } from 'vitest';
import type { FenceAdmission } from '../../../src/index.js';
import { PostgresFenceStore } from '../../../adapters/postgres/index.js';
import { adminPool, FLAVORS, migratedSchema, uniqueName, waitForLockWaiters, type Flavor } from './helpers.js';
import { within } from '../../helpers/wait.js';

const admin = adminPool();
const POOL_SIZE = 3;

describe.each(FLAVORS)('PostgresFenceStore wait line with %s', (flavor: Flavor) => {
  const applicationName = uniqueName('fk_pgl');
  const { db } = migratedSchema(admin, `fk_pgl_${flavor}`, { max: POOL_SIZE, flavor, applicationName });

  const lockWaiters = async (): Promise<number> => {
    const { rows } = await admin.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
      [applicationName],
    );
    return Number(rows[0]?.n);
  };

  it('a hot resource takes two connections, not one per waiting admission: another resource is still admitted, the line is served in order, an abort in it leaves', async () => {
    const store = new PostgresFenceStore(db);
    const hot = uniqueName('hot');
    const holder = await store.admit(hot, 5n);
    const order: number[] = [];
    // More waiting admissions than the pool has connections left.
    const waiting = Array.from({ length: POOL_SIZE + 1 }, (_, i) => store.admit(hot, 5n).then((admission) => {
      order.push(i);
      return admission;
    }));
    const controller = new AbortController();
    const given = store.admit(hot, 5n, { signal: controller.signal }).catch((error: unknown) => error);
    await waitForLockWaiters(admin, applicationName, 1);

    // Another resource finds a connection while all of them wait (without
    // the line they would hold every connection and this would wait for the holder).
    const otherAdmission = store.admit(uniqueName('other'), 1n);
    try {
      const other = await within(otherAdmission, 10_000, 'an admission for another resource while a hot one has waiters');
      await other.commit();
      expect(await lockWaiters()).toBe(1);
    } catch (error) {
      // Leave nothing held for the next test: free the row, settle everything that was waiting.
      controller.abort(error);
      await holder.commit();
      for (const next of [...waiting, otherAdmission]) await next.then((admission) => admission.commit(), () => undefined);
      throw error;
    }

    const reason = new Error('gave up in line');
    controller.abort(reason);
    expect(await within(given, 10_000, 'the aborted admission in line')).toBe(reason);

    await holder.commit();
    const admitted: FenceAdmission<unknown>[] = [];
    for (const next of waiting) {
      const admission = await within(next, 10_000, 'the next admission in line');
      admitted.push(admission);
      // Still one waiter on the row at most: the next in line, never the whole line.
      expect(await lockWaiters()).toBeLessThanOrEqual(1);
      await admission.commit();
    }
    expect(order).toEqual([...Array(POOL_SIZE + 1).keys()]);
    expect(admitted.map((a) => a.previous)).toEqual(Array(POOL_SIZE + 1).fill(5n));
    expect(await store.current(hot)).toBe(5n);
    // Nothing left held: the pool is whole again and the resource free.
    const last = await within(store.admit(hot, 6n), 10_000, 'an admission after the line emptied');
    await last.commit();
    expect(await store.current(hot)).toBe(6n);
  });

  it('a refused or failed admission hands the line on', async () => {
    const store = new PostgresFenceStore(db);
    const resource = uniqueName('refused');
    const holder = await store.admit(resource, 10n);
    const stale = store.admit(resource, 9n).catch((error: unknown) => error);
    const after = store.admit(resource, 10n);
    await waitForLockWaiters(admin, applicationName, 1);
    await holder.commit();
    expect(await within(stale, 10_000, 'the stale admission')).toMatchObject({ code: 'STALE_TOKEN', current: 10n });
    const admission = await within(after, 10_000, 'the admission behind a refused one');
    expect(admission.previous).toBe(10n);
    await admission.commit();
  });
});
