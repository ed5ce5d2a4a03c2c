// Captures the FENCEKEEPER_SELF_WAIT process warnings a test causes (process.emitWarning
// delivers them on a later tick: read `seen()` after `settle()`), and the self-wait cases
// every queueing source runs (selfWaitCases).
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LockTimeoutError } from '../../src/errors.js';
import type { LockSource } from '../../src/lock-source.js';
import { withLock } from '../../src/with-lock.js';
import { uniqueLockName } from './unique.js';

/** The self-wait warnings seen during each test (cleared before each). */
export function selfWaitWarnings(): { seen(): string[]; settle(): Promise<void> } {
  let seen: string[] = [];
  const listener = (warning: Error & { code?: string }): void => {
    if (warning.code === 'FENCEKEEPER_SELF_WAIT') seen.push(warning.message);
  };
  beforeEach(() => {
    seen = [];
    process.on('warning', listener);
  });
  afterEach(() => {
    process.off('warning', listener);
  });
  return {
    seen: () => seen,
    settle: async () => {
      await nextTurn();
      await nextTurn();
    },
  };
}

/** A source with every kind the self-wait cases take (the queueing sources: ZooKeeper, etcd, PostgreSQL). */
export type SelfWaitSource = LockSource & Required<Pick<LockSource, 'acquireReadLock' | 'acquireWriteLock' | 'acquirePermit'>>;

/**
 * The self-wait cases, the same for every queueing source: one
 * FENCEKEEPER_SELF_WAIT warning per client and name when a client waits on
 * a lock it holds itself (the wait still queues), another client's first
 * time its own; none when the lock is free, when another client holds it,
 * or inside a withLock re-entry; a write behind our own read and a permit
 * behind our own warn too. `newSource` makes a source on a client of its own.
 */
export function selfWaitCases(label: string, newSource: () => Promise<SelfWaitSource> | SelfWaitSource, waitMs = 150): void {
  const warnings = selfWaitWarnings();
  describe(`${label}: a client waiting on a lock it holds itself`, () => {
    it('warns once per client and name, and the wait still queues (here until its timeout)', async () => {
      const name = uniqueLockName('selfwait');
      const source = await newSource();
      const held = await source.acquireLock(name);
      await expect(source.acquireLock(name, { timeoutMs: waitMs })).rejects.toBeInstanceOf(LockTimeoutError);
      await expect(source.acquireLock(name, { timeoutMs: waitMs })).rejects.toBeInstanceOf(LockTimeoutError);
      await warnings.settle();
      expect(warnings.seen()).toHaveLength(1);
      expect(warnings.seen()[0]).toContain(name);
      // A wait behind our own grant that the release then answers: no second warning.
      const second = source.acquireLock(name);
      await held.release();
      await (await second).release();
      // Another client's own self-wait on the same name is its own first time.
      const other = await newSource();
      const theirs = await other.acquireLock(name);
      await expect(other.acquireLock(name, { timeoutMs: waitMs })).rejects.toBeInstanceOf(LockTimeoutError);
      await theirs.release();
      await warnings.settle();
      expect(warnings.seen()).toHaveLength(2);
    });

    it('no warning when the lock is free, when another client holds it, or inside a withLock re-entry', async () => {
      const name = uniqueLockName('selfwait_none');
      const source = await newSource();
      const other = await newSource();
      // Free each time: acquire, release, acquire again on the same client.
      for (let i = 0; i < 3; i++) await (await source.acquireLock(name)).release();
      // Another client holds it: we wait on someone else.
      const theirs = await other.acquireLock(name);
      await expect(source.acquireLock(name, { timeoutMs: waitMs })).rejects.toBeInstanceOf(LockTimeoutError);
      await theirs.release();
      // A nested withLock of the same source and name re-enters: no second grant, no wait.
      const tokens = await withLock(source, name, async (outer) => withLock(source, name, async (inner) => [outer.token, inner.token]));
      expect(tokens[0]).toBe(tokens[1]);
      await warnings.settle();
      expect(warnings.seen()).toEqual([]);
    });

    it('a write lock behind our own read lock, and a permit behind our own, warn', async () => {
      const name = uniqueLockName('selfwait_kinds');
      const source = await newSource();
      const read = await source.acquireReadLock(name);
      await expect(source.acquireWriteLock(name, { timeoutMs: waitMs })).rejects.toBeInstanceOf(LockTimeoutError);
      await read.release();
      const permit = await source.acquirePermit(name, { permits: 1 });
      await expect(source.acquirePermit(name, { permits: 1, timeoutMs: waitMs })).rejects.toBeInstanceOf(LockTimeoutError);
      await permit.release();
      await warnings.settle();
      expect(warnings.seen()).toHaveLength(2);
      expect(warnings.seen()[0]).toContain('read-write lock');
      expect(warnings.seen()[1]).toContain('permit');
    });
  });
}
