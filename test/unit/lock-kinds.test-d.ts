// The lock kinds' public names under strict TypeScript: the scoped forms pass
// fn's value through, a MultiLock is AsyncDisposable with its locks, and the
// new errors carry their stable codes.
import { expectTypeOf, it } from 'vitest';
import {
  AmbiguousLockError,
  LockOrderError,
  LockUpgradeError,
  PermitsMismatchError,
  acquireLocks,
  currentLock,
  withLocks,
  withReadLock,
  withWriteLock,
  type Lock,
  type LockSource,
  type MultiLock,
} from '../../src/index.js';

declare const source: LockSource;

it('scoped forms return what fn returns', () => {
  expectTypeOf(withReadLock(source, 'n', async () => 1)).resolves.toEqualTypeOf<number>();
  expectTypeOf(withWriteLock(source, 'n', (lock) => lock.token)).resolves.toEqualTypeOf<bigint>();
  expectTypeOf(withLocks(source, ['a', 'b'], (multi) => multi.locks.length)).resolves.toEqualTypeOf<number>();
  expectTypeOf(currentLock).parameter(0).toEqualTypeOf<string | undefined>();
  expectTypeOf(currentLock('a')).toEqualTypeOf<Lock | undefined>();
});

it('a MultiLock is AsyncDisposable and lists its locks', () => {
  expectTypeOf(acquireLocks(source, ['a'])).resolves.toEqualTypeOf<MultiLock>();
  expectTypeOf<MultiLock>().toMatchTypeOf<AsyncDisposable>();
  expectTypeOf<MultiLock['locks']>().toEqualTypeOf<readonly Lock[]>();
  async function scoped(): Promise<boolean> {
    await using multi = await acquireLocks(source, ['a', 'b'], { timeoutMs: 1000 });
    return multi.held;
  }
  expectTypeOf(scoped).returns.resolves.toBeBoolean();
});

it('the new errors have their codes', () => {
  expectTypeOf<LockUpgradeError['lock']>().toBeString();
  expectTypeOf<LockOrderError['held']>().toBeString();
  expectTypeOf<AmbiguousLockError['locks']>().toEqualTypeOf<readonly string[]>();
  expectTypeOf<PermitsMismatchError['inUse']>().toBeNumber();
});
