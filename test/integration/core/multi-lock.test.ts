// acquireLocks / withLocks against real ZooKeeper and etcd sources: two
// callers naming the same locks in opposite orders finish every round (no
// deadlock) and are never inside together; a timeout or an abort leaves
// nothing behind (lockStatus of every name); bad lists are refused before
// any request; the MultiLock's held/signal/deadline follow its locks; inside
// withLocks CURRENT_LOCK is ambiguous and currentLock(name) picks one; names
// are taken in order inside a scope.
import { afterEach, describe, expect, it } from 'vitest';
import {
  AmbiguousLockError,
  CURRENT_LOCK,
  InvalidArgumentError,
  LockOrderError,
  LockTimeoutError,
  acquireLocks,
  currentLock,
  resolveFencing,
  withLock,
  withLocks,
} from '../../../src/index.js';
import type { AcquireOptions } from '../../../src/lock.js';
import type { LockSource } from '../../../src/lock-source.js';
import type { ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { ETCD, ZOOKEEPER, type OpenSource } from '../../helpers/sources.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';

const opened: OpenSource[] = [];
const clients = new ClientPool();
afterEach(async () => {
  await Promise.allSettled(opened.splice(0).map((o) => o.close()));
  await clients.closeAll();
});

/** A source that counts the acquires it was asked for. */
function counting(source: LockSource) {
  const asked: string[] = [];
  const wrapped: LockSource = {
    kind: source.kind,
    description: source.description,
    acquireLock: (name: string, options?: AcquireOptions) => (asked.push(name), source.acquireLock(name, options)),
    tryAcquireLock: (name, options) => source.tryAcquireLock(name, options),
  };
  return { source: wrapped, asked };
}

/** Nobody holds or waits for any of `names`. */
async function expectNothingLeft(source: LockSource, names: readonly string[]): Promise<void> {
  for (const name of names) {
    const status = await source.lockStatus!(name);
    expect(status.holder, `${name} still held`).toBeNull();
    expect(status.waiters, `${name} still waited for`).toEqual([]);
  }
}

for (const under of [ZOOKEEPER, ETCD]) {
  describe(`multi-lock on ${under.kind}`, () => {
    async function open(): Promise<LockSource> {
      const o = await under.open();
      opened.push(o);
      return o.source;
    }

    it('two callers naming the locks in opposite orders finish every round, never inside together', async () => {
      const base = uniqueLockName(`kinds_multi_${under.kind}`);
      const names = [`${base}/a`, `${base}/b`, `${base}/c`];
      const [one, two] = await Promise.all([open(), open()]);
      let inside = 0;
      let overlap = 0;
      const rounds = 25;
      const caller = async (source: LockSource, order: readonly string[]): Promise<void> => {
        for (let i = 0; i < rounds; i++) {
          await withLocks(source, order, async (multi) => {
            expect(multi.locks.map((l) => l.name)).toEqual(names);
            if (++inside > 1) overlap++;
            await new Promise((resolve) => setImmediate(resolve));
            inside--;
          }, { timeoutMs: 10_000 });
        }
      };
      await Promise.all([caller(one, names), caller(two, [...names].reverse())]);
      expect(overlap).toBe(0);
      await expectNothingLeft(one, names);
    });

    it('a timeout releases what was taken: nothing left behind, the holder of the last name untouched', async () => {
      const base = uniqueLockName(`kinds_multi_to_${under.kind}`);
      const names = [`${base}/a`, `${base}/b`, `${base}/c`];
      const [holder, caller] = await Promise.all([open(), open()]);
      const c = await holder.acquireLock(`${base}/c`);
      const error = await acquireLocks(caller, [...names].reverse(), { timeoutMs: 300 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as LockTimeoutError).timeoutMs).toBe(300);
      await expectNothingLeft(holder, names.slice(0, 2));
      const status = await holder.lockStatus!(`${base}/c`);
      expect(status.holder?.token).toBe(c.token);
      expect(status.waiters).toEqual([]);
      await c.release();
    });

    it('an abort releases what was taken and rejects with its reason', async () => {
      const base = uniqueLockName(`kinds_multi_ab_${under.kind}`);
      const names = [`${base}/a`, `${base}/b`];
      const [holder, caller] = await Promise.all([open(), open()]);
      const b = await holder.acquireLock(`${base}/b`);
      const controller = new AbortController();
      const reason = new Error('caller gave up');
      const run = acquireLocks(caller, names, { signal: controller.signal });
      // Once `a` is ours (and `b` waited for), abort.
      for (let i = 0; i < 200 && (await holder.lockStatus!(`${base}/a`)).holder === null; i++) await new Promise((r) => setTimeout(r, 10));
      controller.abort(reason);
      await expect(run).rejects.toBe(reason);
      await expectNothingLeft(holder, [`${base}/a`]);
      expect((await holder.lockStatus!(`${base}/b`)).waiters).toEqual([]);
      await b.release();
    });

    it('MultiLock: locks in name order, held, deadline, release, await using', async () => {
      const base = uniqueLockName(`kinds_multi_fields_${under.kind}`);
      const source = await open();
      const multi = await acquireLocks(source, [`${base}/z`, `${base}/m`, `${base}/a`]);
      expect(multi.locks.map((l) => l.name)).toEqual([`${base}/a`, `${base}/m`, `${base}/z`]);
      expect(multi.held).toBe(true);
      expect(multi.signal.aborted).toBe(false);
      expect(multi.deadline).toBe(Math.min(...multi.locks.map((l) => l.deadline)));
      expect(multi.lock(`${base}/m`)).toBe(multi.locks[1]);
      await multi.release();
      expect(multi.held).toBe(false);
      expect(multi.signal.aborted).toBe(true);
      await expectNothingLeft(source, multi.locks.map((l) => l.name));
      {
        await using again = await acquireLocks(source, [`${base}/b`, `${base}/c`]);
        expect(again.held).toBe(true);
      }
      await expectNothingLeft(source, [`${base}/b`, `${base}/c`]);
    });
  });
}

describe('multi-lock arguments and scopes (ZooKeeper)', () => {
  async function zk(): Promise<LockSource> {
    const o = await ZOOKEEPER.open();
    opened.push(o);
    return o.source;
  }

  it('refuses an empty list, a name named twice, a bad timeout, before any request', async () => {
    const { source, asked } = counting(await zk());
    await expect(acquireLocks(source, [])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquireLocks(source, ['kinds/a', 'kinds/b', 'kinds/a'])).rejects.toThrow(/named twice/);
    await expect(acquireLocks(source, ['kinds/a'], { timeoutMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(withLocks(source, ['kinds/a', 'kinds/a'], async () => 1)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(acquireLocks(source, 'kinds/a' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(asked).toEqual([]);
  });

  it('one lock lost: held turns false and the signal aborts with its reason', async () => {
    const base = uniqueLockName('kinds_multi_lost');
    const source = await zk();
    const other = await clients.connect(testServers().zkStandalone);
    const multi = await acquireLocks(source, [`${base}/a`, `${base}/b`]);
    const lost = new Promise<unknown>((resolve) => multi.signal.addEventListener('abort', () => resolve(multi.signal.reason), { once: true }));
    await other.delete((multi.locks[1] as ZooKeeperLock).path);
    expect(await lost).toMatchObject({ code: 'LOCK_LOST', reason: 'node_deleted' });
    expect(multi.held).toBe(false);
    expect(multi.locks[0]?.held).toBe(true);
    await multi.release();
  });

  it('inside withLocks, CURRENT_LOCK is ambiguous and currentLock(name) picks one', async () => {
    const base = uniqueLockName('kinds_multi_current');
    const source = await zk();
    await withLocks(source, [`${base}/b`, `${base}/a`], async (multi) => {
      expect(() => resolveFencing(CURRENT_LOCK)).toThrow(AmbiguousLockError);
      expect(() => currentLock()).toThrow(AmbiguousLockError);
      expect(currentLock(`${base}/a`)).toBe(multi.locks[0]);
      expect(currentLock(`${base}/b`)).toBe(multi.locks[1]);
      expect(resolveFencing((currentLock(`${base}/b`) as NonNullable<ReturnType<typeof currentLock>>).sequencer).token).toBe(multi.locks[1]?.token);
      // A nested single scope is what CURRENT_LOCK means again.
      await withLock(source, `${base}/c`, async (c) => expect(resolveFencing(CURRENT_LOCK).token).toBe(c.token));
    });
  });

  it('inside a scope: an earlier name is refused (LOCK_ORDER); a held one is re-entered by withLocks, refused by acquireLocks', async () => {
    const base = uniqueLockName('kinds_multi_order');
    const { source, asked } = counting(await zk());
    await withLock(source, `${base}/m`, async (m) => {
      await expect(acquireLocks(source, [`${base}/a`, `${base}/z`])).rejects.toBeInstanceOf(LockOrderError);
      await expect(withLocks(source, [`${base}/a`, `${base}/z`], async () => 1)).rejects.toMatchObject({ code: 'LOCK_ORDER', lock: `${base}/a`, held: `${base}/m` });
      await expect(acquireLocks(source, [`${base}/m`, `${base}/z`])).rejects.toBeInstanceOf(LockOrderError);
      await withLocks(source, [`${base}/z`, `${base}/m`], async (multi) => {
        expect(multi.locks[0]).toBe(m);
      });
      // withLocks released z, not m.
      expect(m.held).toBe(true);
    });
    expect(asked).toEqual([`${base}/m`, `${base}/z`]);
  });
});
