// A Lock passed where a token goes, on every fence against the real servers
// (PostgreSQL, MariaDB, dynalite, Redis, RGW), with locks from the real
// ZooKeeper standalone server: a live lock writes with its token (the mark
// becomes lock.token) and binds and compares exactly as its sequencer does
// (another lock's live grant is refused by a bound fence, a live lock below
// the mark is refused as stale); a released lock, whose token is larger than
// the mark so the fence alone would admit it, is refused with LockLostError
// and changes nothing; values that are no token keep their errors.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CURRENT_LOCK, InvalidArgumentError, InvalidTokenError, LockLostError, SequencerMismatchError, StaleTokenError, withLock, type Fencing, type Lock } from '../../../src/index.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import type { LockSource } from '../../../src/lock-source.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { openFences, type FenceKind, type Target } from './fence-targets.js';

let zk: ZooKeeperClient;
let source: LockSource;
let opened: Awaited<ReturnType<typeof openFences>>;

beforeAll(async () => {
  zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 6000 });
  source = zookeeperSource(zk);
  opened = await openFences('fenceinput');
}, 120_000);
afterAll(async () => {
  await opened?.close();
  await zk?.close();
}, 120_000);

/** A lock of `name`, released before it is returned: its `held` is false, its token the largest yet. */
async function released(name: string): Promise<Lock> {
  const lock = await source.acquireLock(name);
  await lock.release();
  expect(lock.held).toBe(false);
  return lock;
}

async function expectRefused(target: Target, write: Promise<void>, type: new (...args: never[]) => Error): Promise<void> {
  const error = await write.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(target.refusal ?? type);
}

// Every fence the package has, by name: describe.each needs them before beforeAll runs.
const NAMES = [
  'postgres withFence', 'PostgresFenceStore', 'postgres withEffect', 'postgres fencedUpdate', 'postgres fencedInsert', 'postgres fencedUpsert',
  'postgres fencedDelete', 'kysely fenced()', 'mysql withFence', 'MySqlFenceStore', 'mysql fencedUpdate', 'mysql fencedInsert', 'mysql fencedUpsert',
  'mysql fencedDelete', 'fencedPutItem', 'fencedUpdateItem', 'fencedDeleteItem', 'redis fencedSet', 'redis fencedDelete', 'RedisFenceStore',
  'fencedPutObject', 'fencedDeleteObject', 'MemoryFenceStore',
];
const fence = (name: string): FenceKind => {
  const found = opened.fences.find((f) => f.name === name);
  if (found === undefined) throw new Error(`no fence ${name}`);
  return found;
};

it('the list covers every fence', () => {
  expect(opened.fences.map((f) => f.name).sort()).toEqual([...NAMES].sort());
});

describe.each(NAMES)('%s takes a Lock', (name) => {
  it('a live lock writes with its token', async () => {
    const target = await fence(name).make();
    const lock = await source.acquireLock(uniqueLockName('fi_live'));
    try {
      await target.write(lock, 'live');
      expect(await target.state()).toEqual(target.expected(lock.token, 'live'));
    } finally {
      await lock.release();
    }
  });

  it('a released lock is refused with LockLostError and changes nothing', async () => {
    const target = await fence(name).make();
    const before = await target.state();
    const lock = await released(uniqueLockName('fi_lost'));
    // Its token is larger than anything this fence saw: only `held` refuses it.
    expect(before.mark === null || lock.token > before.mark).toBe(true);
    const error = await target.write(lock, 'lost').then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).reason).toBe('released');
    expect((error as LockLostError).lock).toBe(lock.name);
    expect(await target.state()).toEqual(before);
  });

  it('a live lock below the mark is refused as stale and changes nothing', async () => {
    const lock = await source.acquireLock(uniqueLockName('fi_stale'));
    try {
      const target = await fence(name).make(lock.token + (1n << 40n));
      const before = await target.state();
      await expectRefused(target, target.write(lock, 'stale'), StaleTokenError);
      expect(await target.state()).toEqual(before);
    } finally {
      await lock.release();
    }
  });

  it('values that are no token keep their errors, before any write', async () => {
    const target = await fence(name).make();
    const before = await target.state();
    const bad: [unknown, new (...args: never[]) => Error][] = [
      [{}, InvalidTokenError],
      [42, InvalidTokenError],
      [0n, InvalidTokenError],
      [{ held: true, sequencer: { kind: 'lock', name: '', source: { kind: 'zookeeper', id: 'x' }, token: 5n } }, InvalidArgumentError],
    ];
    for (const [value, type] of bad) {
      const error = await target.write(value as Fencing, 'bad').then(() => undefined, (e: unknown) => e);
      expect(error, String(value)).toBeInstanceOf(type);
    }
    expect(await target.state()).toEqual(before);
  });
});

// RedisFenceStore keeps no binding (it compares tokens only).
describe.each(NAMES.filter((n) => n !== 'RedisFenceStore'))('%s bound to a lock', (name) => {
  it('checks a passed Lock\'s sequencer: another lock is refused, the guarding lock\'s next grant writes', async () => {
    const target = await fence(name).make();
    const guard = uniqueLockName('fi_guard');
    const first = await source.acquireLock(guard);
    try {
      await target.bind!(first);
    } finally {
      await first.release();
    }
    const bound = await target.state();
    expect(bound).toEqual({ mark: first.token, value: 'bound' });
    const intruder = await source.acquireLock(uniqueLockName('fi_intruder'));
    try {
      expect(intruder.token > first.token).toBe(true);
      await expectRefused(target, target.write(intruder, 'intruder'), SequencerMismatchError);
      expect(await target.state()).toEqual(bound);
    } finally {
      await intruder.release();
    }
    const next = await source.acquireLock(guard);
    try {
      await target.write(next, 'next');
      expect(await target.state()).toEqual(target.expected(next.token, 'next'));
    } finally {
      await next.release();
    }
  });
});

describe('other grants where a token goes', () => {
  it('a Leadership writes with its epoch, and once resigned is refused with LockLostError', async () => {
    const target = await fence('postgres withFence').make();
    const leader = await source.campaign!(uniqueLockName('fi_leader'));
    try {
      await target.write(leader, 'leader');
      expect(await target.state()).toEqual({ mark: leader.epoch, value: 'leader' });
    } finally {
      await leader.resign();
    }
    const error = await target.write(leader, 'resigned').then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect(await target.state()).toEqual({ mark: leader.epoch, value: 'leader' });
  });

  it('CURRENT_LOCK of a lock released inside its withLock is refused with LockLostError', async () => {
    const target = await fence('postgres withFence').make();
    const error = await withLock(source, uniqueLockName('fi_current'), async (lock) => {
      await lock.release();
      return target.write(CURRENT_LOCK, 'after release');
    }).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(LockLostError);
    expect(await target.state()).toEqual({ mark: null, value: null });
  });
});
