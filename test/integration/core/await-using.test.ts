// `await using` against a real ZooKeeper: a lock (and a leadership, a client)
// declared with `await using` is released when its block is left, at its end
// and on a throw; checked by the lock's queue (lockStatus) being empty and by
// another client taking the lock at once. The blocks here are lowered by
// vitest's transform; the last test compiles a user's program with tsc
// itself (target ES2022, as this package builds) and runs it with node.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { afterEach, describe, expect, it } from 'vitest';
import type { Lock } from '../../../src/lock.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { SOURCES } from '../../helpers/sources.js';

const clients = new ClientPool();
afterEach(() => clients.closeAll());

async function source() {
  return zookeeperSource(await clients.connect(testServers().zkStandalone));
}

/** Nobody holds or waits for `name`, and another client takes it at once. */
async function expectFree(name: string): Promise<void> {
  const other = await source();
  const status = await other.lockStatus(name);
  expect(status.holder, `${name} still held after its block`).toBeNull();
  expect(status.waiters).toEqual([]);
  const lock = await other.tryAcquireLock(name);
  expect(lock).not.toBeNull();
  await lock?.release();
}

describe('await using', () => {
  it('releases a lock when its block ends', async () => {
    const name = uniqueLockName('kinds_using_end');
    const zk = await source();
    let seen: Lock | undefined;
    {
      await using lock = await zk.acquireLock(name, { timeoutMs: 5000 });
      seen = lock;
      expect(lock.held).toBe(true);
      expect((await zk.lockStatus(name)).holder?.token).toBe(lock.token);
    }
    expect(seen.held).toBe(false);
    expect(seen.signal.aborted).toBe(true);
    await expectFree(name);
  });

  it('releases a lock when its block throws, and the error propagates', async () => {
    const name = uniqueLockName('kinds_using_throw');
    const zk = await source();
    const boom = new Error('boom');
    let seen: Lock | undefined;
    const run = async (): Promise<void> => {
      await using lock = await zk.acquireLock(name, { timeoutMs: 5000 });
      seen = lock;
      throw boom;
    };
    await expect(run()).rejects.toBe(boom);
    expect(seen?.held).toBe(false);
    await expectFree(name);
  });

  it('a null tryAcquireLock is fine in `await using`; a granted one is released', async () => {
    const name = uniqueLockName('kinds_using_try');
    const zk = await source();
    const holder = await zk.acquireLock(name);
    {
      await using none = await (await source()).tryAcquireLock(name);
      expect(none).toBeNull();
    }
    await holder.release();
    {
      await using some = await zk.tryAcquireLock(name);
      expect(some).not.toBeNull();
    }
    await expectFree(name);
  });

  it('resigns a leadership when its block ends', async () => {
    const name = uniqueLockName('kinds_using_election');
    const zk = await source();
    let epoch = 0n;
    {
      await using leader = await zk.campaign!(name, { signal: AbortSignal.timeout(10_000) });
      epoch = leader.epoch;
      expect(leader.held).toBe(true);
    }
    // The next candidate is elected at once, with a later epoch.
    const next = await (await source()).campaign!(name, { signal: AbortSignal.timeout(10_000) });
    expect(next.epoch > epoch).toBe(true);
    await next.resign();
  });

  it('closes a ZooKeeper client when its block ends: its lock goes with its session', async () => {
    const name = uniqueLockName('kinds_using_client');
    let client: ZooKeeperClient | undefined;
    {
      await using zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 4000 });
      client = zk;
      await zookeeperSource(zk).acquireLock(name);
    }
    expect(client.closing).toBe(true);
    await expectFree(name);
  });

  for (const under of SOURCES) {
    it(`releases a ${under.kind} lock on a throw (another client takes it at once)`, async () => {
      const name = uniqueLockName(`kinds_using_${under.kind}`);
      const [mine, other] = await Promise.all([under.open(), under.open()]);
      try {
        const boom = new Error('boom');
        const run = async (): Promise<void> => {
          await using lock = await mine.source.acquireLock(name, { timeoutMs: 5000 });
          expect(await other.source.tryAcquireLock(name)).toBeNull();
          expect(lock.held).toBe(true);
          throw boom;
        };
        await expect(run()).rejects.toBe(boom);
        const next = await other.source.tryAcquireLock(name);
        expect(next).not.toBeNull();
        await next?.release();
      } finally {
        await Promise.all([mine.close(), other.close()]);
      }
    });
  }

  it('a program compiled by tsc (target ES2022, lib ES2023 + @types/node) releases on exit and on a throw', async () => {
    const name = uniqueLockName('kinds_using_tsc');
    const entry = pathToFileURL(resolve('dist/src/sources/zookeeper/index.js')).href;
    const program = `
      import { ZooKeeperClient, zookeeperSource } from ${JSON.stringify(entry)};
      const name = ${JSON.stringify(name)};
      await using zk = await ZooKeeperClient.connect({ connectString: ${JSON.stringify(testServers().zkStandalone)}, sessionTimeoutMs: 4000 });
      const source = zookeeperSource(zk);
      const seen: bigint[] = [];
      async function scoped(fail: boolean): Promise<void> {
        await using lock = await source.acquireLock(name, { timeoutMs: 5000 });
        seen.push(lock.token);
        if (fail) throw new Error('boom');
      }
      await scoped(false);
      await scoped(true).catch(() => undefined);
      const status = await source.lockStatus(name);
      console.log(JSON.stringify({ grants: seen.length, holder: status.holder, waiters: status.waiters.length }));
    `;
    const out = ts.transpileModule(program, { compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext } });
    // tsc lowered the declarations (Node 20 has the symbol, not the syntax).
    expect(out.outputText).not.toMatch(/await using/);
    expect(out.outputText).toMatch(/__addDisposableResource/);
    const dir = await mkdtemp(join(tmpdir(), 'fk-kinds-using-'));
    try {
      await writeFile(join(dir, 'program.mjs'), out.outputText);
      const { stdout } = await promisify(execFile)(process.execPath, [join(dir, 'program.mjs')], { timeout: 30_000 });
      expect(JSON.parse(stdout)).toEqual({ grants: 2, holder: null, waiters: 0 });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    await expectFree(name);
  });
});
