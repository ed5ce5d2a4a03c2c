// withLock against a real ZooKeeper: the lock is released however fn ends
// (checked by the queue being empty and by another client taking the lock at
// once), currentLock() follows async context across awaits and concurrent
// scopes, and CURRENT_LOCK outside every scope is refused before any SQL.
import { afterEach, describe, expect, it } from 'vitest';
import { CURRENT_LOCK, NoCurrentLockError, currentLock, withLock } from '../../../src/index.js';
import type { Lock } from '../../../src/lock.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { withFence, type Database } from '../../../adapters/postgres/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { adminPool, migratedSchema } from '../postgres/helpers.js';

const clients = new ClientPool();
afterEach(() => clients.closeAll());

async function source() {
  return zookeeperSource(await clients.connect(testServers().zkStandalone));
}

/** The lock is free: another client gets it at once. */
async function expectFree(name: string): Promise<void> {
  const other = await (await source()).tryAcquireLock(name);
  expect(other, `${name} still held after withLock ended`).not.toBeNull();
  await other?.release();
}

describe('withLock', () => {
  it('releases on return, and returns fn\'s value', async () => {
    const name = uniqueLockName('wl_return');
    let seen: Lock | undefined;
    const value = await withLock(await source(), name, async (lock, signal) => {
      seen = lock;
      expect(lock.held).toBe(true);
      expect(signal.aborted).toBe(false);
      return 42;
    });
    expect(value).toBe(42);
    expect(seen?.signal.aborted).toBe(true);
    await expectFree(name);
  });

  it('releases on throw, and rethrows fn\'s error', async () => {
    const name = uniqueLockName('wl_throw');
    const boom = new Error('boom');
    await expect(withLock(await source(), name, async () => { throw boom; })).rejects.toBe(boom);
    await expectFree(name);
  });

  it('releases on abort: fn sees the caller\'s abort on its signal and stops', async () => {
    const name = uniqueLockName('wl_abort');
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const run = withLock(await source(), name, (_lock, signal) => new Promise((_, reject) => {
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      controller.abort(reason);
    }), { signal: controller.signal });
    await expect(run).rejects.toBe(reason);
    await expectFree(name);
  });

  it('currentLock() is undefined outside, the lock inside across awaits, and per scope when scopes run concurrently', async () => {
    expect(currentLock()).toBeUndefined();
    const names = [uniqueLockName('wl_a'), uniqueLockName('wl_b'), uniqueLockName('wl_c')];
    const src = await source();
    let entered = 0;
    let allIn: () => void = () => undefined;
    const together = new Promise<void>((r) => { allIn = r; });
    const seen = await Promise.all(names.map((name) => withLock(src, name, async (lock) => {
      expect(currentLock()).toBe(lock);
      entered += 1;
      if (entered === names.length) allIn();
      // Every scope is open at once here, and each still sees its own lock after the await.
      await together;
      await new Promise((r) => setTimeout(r, 1));
      const nested = await Promise.resolve().then(() => currentLock());
      expect(nested).toBe(lock);
      return { name, current: currentLock()?.name };
    })));
    expect(seen).toEqual(names.map((name) => ({ name, current: name })));
    expect(entered).toBe(names.length);
    expect(currentLock()).toBeUndefined();
  });

  it('a nested scope sees its own lock, and the outer one again after it', async () => {
    const src = await source();
    // Nested in name order: inside a scope, a name sorting before one held is refused (LOCK_ORDER).
    const base = uniqueLockName('wl_nest');
    await withLock(src, `${base}/outer`, async (outer) => {
      await withLock(src, `${base}/x-inner`, async (inner) => {
        expect(currentLock()).toBe(inner);
      });
      expect(currentLock()).toBe(outer);
    });
  });
});

describe('CURRENT_LOCK in withFence', () => {
  const { pool } = migratedSchema(adminPool(), 'fk_withlock', { max: 4 });
  const counter = { queries: 0 };
  // Counts every query sent through the pool or its clients.
  const db = {
    query: (...args: unknown[]) => { counter.queries += 1; return (pool.query as (...a: unknown[]) => unknown)(...args); },
    connect: async () => {
      const client = await pool.connect();
      return {
        query: (...args: unknown[]) => { counter.queries += 1; return (client.query as (...a: unknown[]) => unknown).apply(client, args); },
        release: (error?: Error | boolean) => client.release(error),
      };
    },
  } as unknown as Database;

  it('outside every withLock fails with NO_CURRENT_LOCK before any query', async () => {
    const before = counter.queries;
    let ran = false;
    const error = await withFence(db, 'r', CURRENT_LOCK, async () => { ran = true; }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NoCurrentLockError);
    expect((error as NoCurrentLockError).code).toBe('NO_CURRENT_LOCK');
    expect(ran).toBe(false);
    expect(counter.queries).toBe(before);
  });

  it('inside withLock fences with the current lock\'s token', async () => {
    const name = uniqueLockName('wl_fence');
    const token = await withLock(await source(), name, async (lock) => {
      await withFence(db, name, CURRENT_LOCK, async () => undefined);
      return lock.token;
    });
    const { rows } = await pool.query('SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1', [name]);
    expect(rows[0]?.token).toBe(token.toString());
  });
});
