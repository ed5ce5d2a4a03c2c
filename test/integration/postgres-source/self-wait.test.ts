// The self-wait warning on the PostgreSQL source, as on ZooKeeper and etcd: a
// source that waits for a lock it holds itself (outside a withLock scope, a
// second acquire queues as a separate holder) gets one FENCEKEEPER_SELF_WAIT
// process warning per source and name; none when the lock is free, none when
// another source holds it, none inside a withLock re-entry; a write behind our
// own read and a permit behind our own warn too.
import { describe, expect, it } from 'vitest';
import { LockTimeoutError, withLock } from '../../../src/index.js';
import { selfWaitWarnings } from '../../helpers/self-wait.js';
import { sourceSchema, uniqueName } from './helpers.js';

const db = sourceSchema('pgsrc_selfwait');
const warnings = selfWaitWarnings();

describe('postgresSource: a source waiting on a lock it holds itself', () => {
  it('warns once per source and name, and the wait still queues (here until its timeout)', async () => {
    const name = uniqueName('pgsource/selfwait');
    const source = db.source({}, 3);
    const held = await source.acquireLock(name);
    await expect(source.acquireLock(name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await expect(source.acquireLock(name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await warnings.settle();
    expect(warnings.seen()).toHaveLength(1);
    expect(warnings.seen()[0]).toContain(name);
    await held.release();
  });

  it('no warning when the lock is free, when another source holds it, or inside a withLock re-entry', async () => {
    const name = uniqueName('pgsource/selfwait_none');
    const source = db.source({}, 3);
    const other = db.source({}, 3);
    for (let i = 0; i < 3; i++) await (await source.acquireLock(name)).release();
    const theirs = await other.acquireLock(name);
    await expect(source.acquireLock(name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await theirs.release();
    const tokens = await withLock(source, name, async (outer) => withLock(source, name, async (inner) => [outer.token, inner.token]));
    expect(tokens[0]).toBe(tokens[1]);
    await warnings.settle();
    expect(warnings.seen()).toEqual([]);
  });

  it('a write lock behind our own read lock, and a permit behind our own, warn', async () => {
    const name = uniqueName('pgsource/selfwait_kinds');
    const source = db.source({}, 3);
    const read = await source.acquireReadLock(name);
    await expect(source.acquireWriteLock(name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await read.release();
    const permit = await source.acquirePermit(name, { permits: 1 });
    await expect(source.acquirePermit(name, { permits: 1, timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    await permit.release();
    await warnings.settle();
    expect(warnings.seen()).toHaveLength(2);
    expect(warnings.seen()[0]).toContain('read-write lock');
    expect(warnings.seen()[1]).toContain('permit');
  });
});
