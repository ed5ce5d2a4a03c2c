// `await using` on every grant, client, session and testing handle, under the
// project's strict tsconfig: lib ES2023 and @types/node, no esnext.disposable.
// An `await using` of a type without [Symbol.asyncDispose] is TS2851: these
// declarations compile only because each type below has it.
import { expectTypeOf, it } from 'vitest';
import type { Leadership, Lock, LockSource, Permit } from '../../src/index.js';
import type { EtcdLock, EtcdSession } from '../../src/sources/etcd/index.js';
import type { RedisLock } from '../../src/sources/redis/index.js';
import type { ZooKeeperClient, ZooKeeperLeadership, ZooKeeperLock, ZooKeeperSource } from '../../src/sources/zookeeper/index.js';
import type { HolderProcess, TcpProxy, ThrowawayServer, ZooKeeperServer } from '../../src/testing/index.js';

declare const source: LockSource;
declare const zkSource: ZooKeeperSource;

it('grants are AsyncDisposable', () => {
  expectTypeOf<Lock>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<Leadership>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<Permit>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<ZooKeeperLock>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<ZooKeeperLeadership>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<EtcdLock>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<RedisLock>().toMatchTypeOf<AsyncDisposable>();
});

it('clients, sessions and testing handles are AsyncDisposable', () => {
  expectTypeOf<ZooKeeperClient>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<EtcdSession>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<TcpProxy>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<ThrowawayServer>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<ZooKeeperServer>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<HolderProcess>().toMatchTypeOf<AsyncDisposable>();
});

it('await using type-checks on what the sources hand out', () => {
  async function scoped(): Promise<bigint> {
    await using lock = await source.acquireLock('types/await-using');
    await using maybe = await source.tryAcquireLock('types/await-using-try');
    await using zkLock = await zkSource.acquireLock('types/await-using-zk');
    if (source.campaign !== undefined) {
      await using leader = await source.campaign('types/await-using-election');
      expectTypeOf(leader.epoch).toEqualTypeOf<bigint>();
    }
    if (source.acquirePermit !== undefined) {
      await using permit = await source.acquirePermit('types/await-using-permit', { permits: 2 });
      expectTypeOf(permit.slot).toEqualTypeOf<number>();
    }
    expectTypeOf(maybe).toEqualTypeOf<Lock | null>();
    return lock.token + zkLock.token;
  }
  expectTypeOf(scoped).returns.resolves.toEqualTypeOf<bigint>();
});
