// The check-only mode ({ advance: false }) on every fence that has it, on
// the real servers: from a mark of 100, check-only writes with 100 (equal)
// and 150 (larger) go through and leave the mark at 100; 99 is refused as
// stale and changes nothing; an advancing write with 120, between the mark
// and the larger check-only token, still goes through (so 150 did not move
// the mark) and moves it to 120, after which check-only 110 is refused. On a
// bound fence a check-only write of another lock is refused, one of the
// guarding lock passes without moving the mark. Fences that cannot only
// check refuse the mode with InvalidArgumentError before any write. The
// core's rule itself (src/fence-mode.ts) is checked beside them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, SequencerMismatchError, StaleTokenError } from '../../../src/index.js';
import { CHECK_ONLY_FIRST_MARK, fenceAdmits, fenceAdvances, markAfter } from '../../../src/extend.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import type { LockSource } from '../../../src/lock-source.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import * as fkpg from '../../../adapters/postgres/index.js';
import * as fkmy from '../../../adapters/mysql/index.js';
import { openFences, type FenceKind, type Target } from './fence-targets.js';

let zk: ZooKeeperClient;
let source: LockSource;
let opened: Awaited<ReturnType<typeof openFences>>;

beforeAll(async () => {
  zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 6000 });
  source = zookeeperSource(zk);
  opened = await openFences('checkonly');
}, 120_000);
afterAll(async () => {
  await opened?.close();
  await zk?.close();
}, 120_000);

const CHECKS = [
  'postgres withFence', 'PostgresFenceStore', 'postgres fencedUpdate', 'kysely fenced()',
  'mysql withFence', 'MySqlFenceStore', 'mysql fencedUpdate', 'fencedUpdateItem', 'redis fencedSet', 'redis fencedDelete', 'RedisFenceStore',
];
const REFUSES = [
  'postgres fencedInsert', 'postgres fencedUpsert', 'postgres fencedDelete',
  'mysql fencedInsert', 'mysql fencedUpsert', 'mysql fencedDelete',
  'fencedPutItem', 'fencedDeleteItem', 'fencedPutObject', 'fencedDeleteObject', 'postgres withEffect',
];
const CHECK = { advance: false } as const;

const fence = (name: string): FenceKind => {
  const found = opened.fences.find((f) => f.name === name);
  if (found === undefined) throw new Error(`no fence ${name}`);
  return found;
};

async function expectRefused(target: Target, write: Promise<void>, type: new (...args: never[]) => Error): Promise<void> {
  const error = await write.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(target.refusal ?? type);
}

describe('the rule (src/fence-mode.ts)', () => {
  it('admits at or above the mark in both modes; only advancing moves the mark', () => {
    expect(fenceAdmits(null, 1n)).toBe(true);
    expect(fenceAdmits(100n, 100n)).toBe(true);
    expect(fenceAdmits(100n, 150n)).toBe(true);
    expect(fenceAdmits(100n, 99n)).toBe(false);
    expect(markAfter(100n, 150n, true)).toBe(150n);
    expect(markAfter(100n, 100n, true)).toBe(100n);
    expect(markAfter(null, 7n, true)).toBe(7n);
    expect(markAfter(100n, 150n, false)).toBe(100n);
    expect(markAfter(null, 150n, false)).toBe(CHECK_ONLY_FIRST_MARK);
  });

  it('reads the option: absent or true advances, false checks, anything else is refused', () => {
    expect(fenceAdvances(undefined, 'x')).toBe(true);
    expect(fenceAdvances({}, 'x')).toBe(true);
    expect(fenceAdvances({ advance: true }, 'x')).toBe(true);
    expect(fenceAdvances({ advance: false }, 'x')).toBe(false);
    expect(() => fenceAdvances({ advance: 'no' }, 'x')).toThrow(InvalidArgumentError);
    expect(() => fenceAdvances({ advance: 0 }, 'x')).toThrow(InvalidArgumentError);
  });
});

// MemoryFenceStore lives with the HTTP guards (adapters/express), not changed here: it has no check-only mode yet.
it('the lists cover every fence but the in-memory store', () => {
  expect([...CHECKS, ...REFUSES, 'MemoryFenceStore'].sort())
    .toEqual(opened.fences.map((f) => f.name).sort());
});

describe.each(CHECKS)('%s, check-only', (name) => {
  it('passes at and above the mark without moving it; below is refused; an advancing write between still passes', async () => {
    const target = await fence(name).make(100n);
    const at = (mark: bigint, value: string) => target.expected(mark, value);
    const seeded = await target.state();
    expect(seeded.mark).toBe(100n);

    await target.write(100n, 'equal', CHECK);
    expect(await target.state()).toEqual(at(100n, 'equal'));
    await target.write(150n, 'larger', CHECK);
    expect(await target.state()).toEqual(at(100n, 'larger'));

    await expectRefused(target, target.write(99n, 'smaller', CHECK), StaleTokenError);
    expect(await target.state()).toEqual(at(100n, 'larger'));

    // 120 is below the larger check-only token: it passes only because 150 left the mark at 100.
    await target.write(120n, 'between');
    expect(await target.state()).toEqual(at(120n, 'between'));
    await expectRefused(target, target.write(110n, 'late reader', CHECK), StaleTokenError);
    expect(await target.state()).toEqual(at(120n, 'between'));
  });
});

// RedisFenceStore keeps no binding.
describe.each(CHECKS.filter((n) => n !== 'RedisFenceStore'))('%s, check-only on a bound fence', (name) => {
  it('refuses another lock\'s sequencer and admits the guarding lock\'s without moving the mark', async () => {
    const target = await fence(name).make();
    const guard = uniqueLockName('co_guard');
    const first = await source.acquireLock(guard);
    try {
      await target.bind!(first);
    } finally {
      await first.release();
    }
    const intruder = await source.acquireLock(uniqueLockName('co_intruder'));
    try {
      await expectRefused(target, target.write(intruder, 'intruder', CHECK), SequencerMismatchError);
      expect(await target.state()).toEqual({ mark: first.token, value: 'bound' });
    } finally {
      await intruder.release();
    }
    const reader = await source.acquireLock(guard);
    try {
      await target.write(reader, 'reader', CHECK);
      expect(await target.state()).toEqual(target.expected(first.token, 'reader'));
    } finally {
      await reader.release();
    }
  });
});

describe.each(REFUSES)('%s', (name) => {
  it('refuses advance: false with InvalidArgumentError before any write', async () => {
    const target = await fence(name).make(100n);
    const before = await target.state();
    const error = await target.write(150n, 'check', CHECK).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/check-only/);
    expect(await target.state()).toEqual(before);
  });
});

// The SQL fences hold the fence row in share mode for a check-only
// transaction: readers run side by side, a writer waits until they end.
describe.each(['postgres', 'kysely', 'mysql'] as const)('withFence on %s, check-only transactions side by side', (flavor) => {
  const withFenceOn = (resource: string, token: bigint, work: () => Promise<void>, advance = true): Promise<void> => {
    const mode = { advance };
    if (flavor === 'postgres') return fkpg.withFence(opened.pg, resource, token, work, mode);
    if (flavor === 'kysely') return fkpg.withFence(opened.kysely, resource, token, work, mode);
    return fkmy.withFence(opened.mysql, resource, token, work, mode);
  };
  const settled = (promise: Promise<unknown>): Promise<boolean> =>
    Promise.race([promise.then(() => true, () => true), new Promise<boolean>((r) => setTimeout(() => r(false), 300))]);

  it('a second reader runs while the first is open; a writer waits for the readers and then moves the mark', async () => {
    const resource = `co-side-${flavor}-${uniqueLockName('r')}`;
    await withFenceOn(resource, 100n, async () => undefined);
    const holdA = deferred();
    const aOpen = deferred();
    const readerA = withFenceOn(resource, 200n, async () => { aOpen.resolve(); await holdA.promise; }, false);
    await aOpen.promise;
    // Reader B (a smaller token than A's, at least the mark) gets in and finishes while A is open.
    await withFenceOn(resource, 150n, async () => undefined, false);
    const writer = withFenceOn(resource, 300n, async () => undefined);
    expect(await settled(writer)).toBe(false);
    holdA.resolve();
    await readerA;
    await writer;
    await expectRejects(withFenceOn(resource, 250n, async () => undefined, false), StaleTokenError);
  });
});

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((r) => { resolve = r; });
  return { promise, resolve };
}

async function expectRejects(promise: Promise<unknown>, type: new (...args: never[]) => Error): Promise<void> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(type);
}

describe('PostgresFenceStore on Kysely, check-only', () => {
  it('admits at and above the mark without moving it, refuses below', async () => {
    const store = new fkpg.PostgresFenceStore(opened.kysely);
    const resource = `co-store-kysely-${uniqueLockName('r')}`;
    await (await store.admit(resource, 100n)).commit();
    for (const token of [100n, 150n]) await (await store.admit(resource, token, CHECK)).commit();
    expect(await store.current(resource)).toBe(100n);
    await expectRejects(store.admit(resource, 99n, CHECK), StaleTokenError);
    await (await store.admit(resource, 120n)).commit();
    expect(await store.current(resource)).toBe(120n);
    await expectRejects(store.admit(resource, 110n, CHECK), StaleTokenError);
  });
});
