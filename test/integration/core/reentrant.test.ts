// Re-entrant lock scopes against a real ZooKeeper: a nested withLock of the
// same source and name runs with the enclosing scope's Lock (counted: one
// acquireLock, one node in the queue, nobody waiting), its end releases
// nothing, nested calls side by side run concurrently, a lost lock is not
// re-entered, the nested options are ignored; read scopes never become write
// scopes (LOCK_UPGRADE); inside a scope, names are taken in order (LOCK_ORDER).
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError, LockOrderError, LockUpgradeError, currentLock, withLock, withReadLock, withWriteLock } from '../../../src/index.js';
import type { AcquireOptions, Lock } from '../../../src/lock.js';
import type { LockSource } from '../../../src/lock-source.js';
import { zookeeperSource, type ZooKeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import type { ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';

const clients = new ClientPool();
afterEach(() => clients.closeAll());

async function zkSource(): Promise<ZooKeeperSource> {
  return zookeeperSource(await clients.connect(testServers().zkStandalone));
}

/**
 * A real ZooKeeper source that counts its grants. Its read and write locks
 * are plain ZooKeeper locks of the names `<name>.read` and `<name>.write`:
 * enough for the scopes, which only key by (source, name, kind).
 */
function counted(zk: ZooKeeperSource) {
  const grants: string[] = [];
  const source: LockSource = {
    kind: zk.kind,
    description: zk.description,
    acquireLock: (name: string, options?: AcquireOptions) => (grants.push(`lock ${name}`), zk.acquireLock(name, options)),
    tryAcquireLock: (name, options) => zk.tryAcquireLock(name, options),
    acquireReadLock: (name: string, options?: AcquireOptions) => (grants.push(`read ${name}`), zk.acquireLock(`${name}.read`, options)),
    acquireWriteLock: (name: string, options?: AcquireOptions) => (grants.push(`write ${name}`), zk.acquireLock(`${name}.write`, options)),
  };
  return { source, grants };
}

describe('re-entrant withLock', () => {
  it('3 levels deep: one grant, the same Lock, released only by the outermost scope', async () => {
    const name = uniqueLockName('kinds_reenter3');
    const zk = await zkSource();
    const { source, grants } = counted(zk);
    const seen: Lock[] = [];
    await withLock(source, name, async (outer) => {
      seen.push(outer);
      await withLock(source, name, async (middle) => {
        seen.push(middle);
        await withLock(source, name, async (inner) => {
          seen.push(inner);
          const status = await zk.lockStatus(name);
          expect(status.holder?.token).toBe(outer.token);
          expect(status.waiters).toEqual([]);
          expect(currentLock()).toBe(outer);
        }, { timeoutMs: 1 });
        // The inner scopes' ends released nothing.
        expect(middle.held).toBe(true);
        expect((await zk.lockStatus(name)).holder?.token).toBe(outer.token);
      });
      expect(outer.held).toBe(true);
    });
    expect(grants).toEqual([`lock ${name}`]);
    expect(new Set(seen).size).toBe(1);
    expect(seen[0]?.held).toBe(false);
    expect((await zk.lockStatus(name)).holder).toBeNull();
  });

  it('nested calls side by side run concurrently under the outer scope', async () => {
    const name = uniqueLockName('kinds_reenter_side');
    const { source, grants } = counted(await zkSource());
    await withLock(source, name, async () => {
      let inside = 0;
      let bothInside!: () => void;
      const met = new Promise<void>((resolve) => (bothInside = resolve));
      const nested = () => withLock(source, name, async () => {
        if (++inside === 2) bothInside();
        // Each waits for the other to be inside too: run one after the other, they would wait forever.
        await Promise.race([met, new Promise((_, reject) => setTimeout(() => reject(new Error('nested scopes did not run side by side')), 5000))]);
      });
      await Promise.all([nested(), nested()]);
    });
    expect(grants).toEqual([`lock ${name}`]);
  });

  it('re-entering a lost lock throws LockLostError, taking nothing', async () => {
    const name = uniqueLockName('kinds_reenter_lost');
    const zk = await zkSource();
    const { source, grants } = counted(zk);
    const other = await clients.connect(testServers().zkStandalone);
    await withLock(source, name, async (lock, signal) => {
      // Someone deletes our queue node: the lock is lost (node_deleted).
      await other.delete((lock as ZooKeeperLock).path);
      if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      const error = await withLock(source, name, async () => 'ran').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).reason).toBe('node_deleted');
    }).catch(() => undefined);
    expect(grants).toEqual([`lock ${name}`]);
  });

  it('another source object or another name is not re-entered', async () => {
    const name = uniqueLockName('kinds_reenter_other');
    const a = counted(await zkSource());
    const b = counted(await zkSource());
    await withLock(a.source, name, async (outer) => {
      // The same name from another client's source is another holder: it waits (and times out here).
      await expect(withLock(b.source, name, async () => 'ran', { timeoutMs: 200 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
      await withLock(a.source, `${name}.z`, async (inner) => expect(inner.token).not.toBe(outer.token));
    });
    expect(a.grants).toEqual([`lock ${name}`, `lock ${name}.z`]);
  });

  it('inside a scope, a name sorting before one held is refused with LockOrderError before any request', async () => {
    const base = uniqueLockName('kinds_order');
    const { source, grants } = counted(await zkSource());
    await withLock(source, `${base}/b`, async () => {
      const error = await withLock(source, `${base}/a`, async () => 'ran').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockOrderError);
      expect(error).toMatchObject({ code: 'LOCK_ORDER', lock: `${base}/a`, held: `${base}/b` });
      await withLock(source, `${base}/c`, async () => undefined);
    });
    expect(grants).toEqual([`lock ${base}/b`, `lock ${base}/c`]);
  });
});

describe('withReadLock / withWriteLock', () => {
  it('a read scope re-entered as a write scope: LockUpgradeError (LOCK_UPGRADE), nothing asked', async () => {
    const name = uniqueLockName('kinds_upgrade');
    const { source, grants } = counted(await zkSource());
    await withReadLock(source, name, async (read) => {
      await withReadLock(source, name, async (again) => expect(again).toBe(read));
      const error = await withWriteLock(source, name, async () => 'ran').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockUpgradeError);
      expect(error).toMatchObject({ code: 'LOCK_UPGRADE', lock: name });
    });
    expect(grants).toEqual([`read ${name}`]);
  });

  it('a write scope covers a nested read scope of its name; a plain lock of the name is another namespace', async () => {
    const name = uniqueLockName('kinds_downgrade');
    const { source, grants } = counted(await zkSource());
    await withWriteLock(source, name, async (write) => {
      await withReadLock(source, name, async (read) => expect(read).toBe(write));
      await withLock(source, name, async (plain) => expect(plain).not.toBe(write));
    });
    expect(grants).toEqual([`write ${name}`, `lock ${name}`]);
  });

  it('a source without read-write locks is refused with InvalidArgumentError', async () => {
    const zk = await zkSource();
    const plain: LockSource = { kind: 'plain', description: 'x', acquireLock: (n, o) => zk.acquireLock(n, o), tryAcquireLock: (n, o) => zk.tryAcquireLock(n, o) };
    await expect(withReadLock(plain, 'kinds/x', async () => 1)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(withWriteLock(plain, 'kinds/x', async () => 1)).rejects.toThrow(/no read-write locks/);
  });
});
