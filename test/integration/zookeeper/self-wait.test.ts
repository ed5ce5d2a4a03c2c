// The self-wait warning on ZooKeeper: a client that waits for a lock it holds itself
// (outside a withLock scope, a second acquire queues as a separate holder) gets one
// FENCEKEEPER_SELF_WAIT process warning per client and name; none when the lock is free,
// none when another client holds it, none inside a withLock re-entry; the same for a
// read-write lock's write behind our own read and a permit behind our own.
import { describe, expect, it } from 'vitest';
import { LockTimeoutError } from '../../../src/errors.js';
import { withLock } from '../../../src/with-lock.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { selfWaitWarnings } from '../../helpers/self-wait.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;
const warnings = selfWaitWarnings();

describe('ZooKeeper: a client waiting on a lock it holds itself', () => {
  it('warns once per client and name, and the wait still queues (here until its timeout)', async () => {
    const name = uniqueLockName('selfwait');
    const source = zookeeperSource(await clients.connect(server));
    const held = await source.acquireLock(name);
    await expect(source.acquireLock(name, { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
    await expect(source.acquireLock(name, { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
    await warnings.settle();
    expect(warnings.seen()).toHaveLength(1);
    expect(warnings.seen()[0]).toContain(name);
    // Another client's own self-wait on the same name is its own first time.
    const other = zookeeperSource(await clients.connect(server));
    const second = source.acquireLock(name);
    await held.release();
    const next = await second;
    await next.release();
    const theirs = await other.acquireLock(name);
    await expect(other.acquireLock(name, { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    await theirs.release();
    await warnings.settle();
    expect(warnings.seen()).toHaveLength(2);
  });

  it('no warning when the lock is free, when another client holds it, or inside a withLock re-entry', async () => {
    const name = uniqueLockName('selfwait_none');
    const [a, b] = await clients.many(2, server);
    const source = zookeeperSource(a!);
    // Free each time: acquire, release, acquire again on the same client.
    for (let i = 0; i < 3; i++) await (await source.acquireLock(name)).release();
    // Another client holds it: we wait on someone else.
    const theirs = await zookeeperSource(b!).acquireLock(name);
    await expect(source.acquireLock(name, { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    await theirs.release();
    // A nested withLock of the same source and name re-enters: no second grant, no wait.
    const tokens = await withLock(source, name, async (outer) => withLock(source, name, async (inner) => [outer.token, inner.token]));
    expect(tokens[0]).toBe(tokens[1]);
    await warnings.settle();
    expect(warnings.seen()).toEqual([]);
  });

  it('a write lock behind our own read lock, and a permit behind our own, warn', async () => {
    const name = uniqueLockName('selfwait_kinds');
    const source = zookeeperSource(await clients.connect(server));
    const read = await source.acquireReadLock(name);
    await expect(source.acquireWriteLock(name, { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
    await read.release();
    const permit = await source.acquirePermit(name, { permits: 1 });
    await expect(source.acquirePermit(name, { permits: 1, timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
    await permit.release();
    await warnings.settle();
    expect(warnings.seen()).toHaveLength(2);
    expect(warnings.seen()[0]).toContain('read-write lock');
    expect(warnings.seen()[1]).toContain('permit');
  });
});
