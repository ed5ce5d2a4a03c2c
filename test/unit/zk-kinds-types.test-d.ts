// The ZooKeeper source's read-write locks and permits, as the core's
// LockSource declares them and with ZooKeeper's richer results.
import { expectTypeOf, it } from 'vitest';
import type { Lock, LockSource, Permit } from '../../src/index.js';
import {
  acquirePermit,
  acquireReadLock,
  tryAcquirePermit,
  tryAcquireWriteLock,
  zookeeperSource,
  type ZooKeeperClient,
  type ZooKeeperLock,
  type ZooKeeperPermit,
} from '../../src/sources/zookeeper/index.js';

declare const zk: ZooKeeperClient;

it('zookeeperSource has every optional kind of LockSource', () => {
  const source = zookeeperSource(zk);
  expectTypeOf(source).toMatchTypeOf<LockSource>();
  expectTypeOf(source.acquireWriteLock('n')).resolves.toMatchTypeOf<Lock>();
  expectTypeOf(source.acquirePermit('n', { permits: 3 })).resolves.toMatchTypeOf<Permit>();
  expectTypeOf(source.tryAcquirePermit('n', { permits: 3 })).resolves.toEqualTypeOf<ZooKeeperPermit | null>();
  // permits is required; lockDelayMs is a plain lock's option only.
  // @ts-expect-error permits missing
  void source.acquirePermit('n', {});
  // @ts-expect-error no lock-delay on a read lock
  void source.acquireReadLock('n', { lockDelayMs: 10 });
});

it('the functions of a client', () => {
  expectTypeOf(acquireReadLock(zk, 'n')).resolves.toEqualTypeOf<ZooKeeperLock>();
  expectTypeOf(tryAcquireWriteLock(zk, 'n', { owner: 'me' })).resolves.toEqualTypeOf<ZooKeeperLock | null>();
  expectTypeOf(acquirePermit(zk, 'n', { permits: 2, timeoutMs: 100 })).resolves.toMatchTypeOf<{ slot: number; permits: number; path: string }>();
  // @ts-expect-error tryAcquirePermit never waits: no timeout
  void tryAcquirePermit(zk, 'n', { permits: 2, timeoutMs: 100 });
});
