// Fenced writes to ZooKeeper itself: lock.ifHeld(ops) and
// leadership.ifLeader(ops) run the ops in one multi behind a check of our own
// queue node. A held lock commits; one whose node an operator deleted is
// refused by the server even while the client still believes it holds (its
// notification held back in a proxy: no window between check and write);
// one whose session expired is refused before any I/O; nothing is written
// by any refusal.
import { describe, expect, it, vi } from 'vitest';
import { InvalidArgumentError, LockLostError, ZooKeeperError } from '../../../src/errors.js';
import { expireSession } from '../../../src/testing/expire-session.js';
import { campaign } from '../../../src/sources/zookeeper/recipes/election.js';
import { acquireLock, type ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName, uniqueZnodePath } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { serverWatches } from './lock-helpers.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;

async function ensureTestRoot(): Promise<void> {
  await file.admin.create('/fencekeeper-test', null).catch((error: unknown) => {
    if ((error as { code?: string }).code !== 'ZK_NODEEXISTS') throw error;
  });
}

/** A lock held on a fresh client, and a path under the test root for its ops to write (each named after `label`). */
async function heldWithTarget(label: string): Promise<{ zk: ZooKeeperClient; lock: ZooKeeperLock; target: string }> {
  await ensureTestRoot();
  const zk = await clients.connect(server);
  const lock = await acquireLock(zk, uniqueLockName(label));
  return { zk, lock, target: uniqueZnodePath(label) };
}

async function dataOf(path: string): Promise<string | null> {
  const stat = await file.admin.exists(path);
  if (stat === null) return null;
  return Buffer.from((await file.admin.getData(path)).data).toString('utf8');
}

describe('lock.ifHeld', () => {
  it('a held lock commits the ops, answering their results without the check', async () => {
    const { lock, target } = await heldWithTarget('ifheld');
    const results = await lock.ifHeld([
      { op: 'create', path: target, data: 'v1' },
      { op: 'setData', path: target, data: 'v2' },
    ]);
    expect(results.map((r) => r.op)).toEqual(['create', 'setData']);
    expect(results[0]).toMatchObject({ op: 'create', path: target });
    expect(await dataOf(target)).toBe('v2');
    expect(lock.held).toBe(true);
    await lock.release();
    await file.admin.delete(target);
  });

  it("one of the caller's ops fails: its ZooKeeperError, indexed in the caller's ops, and nothing written", async () => {
    const { lock, target } = await heldWithTarget('ifheld-op');
    const failed = await lock.ifHeld([
      { op: 'create', path: target, data: 'v1' },
      { op: 'setData', path: `${target}-missing`, data: 'x' },
    ]).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(ZooKeeperError);
    expect((failed as ZooKeeperError).code).toBe('ZK_NONODE');
    expect((failed as ZooKeeperError).opIndex).toBe(1);
    expect(await dataOf(target)).toBeNull();
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('its node deleted by an operator, the client not told yet: the server refuses the multi, nothing is written', async () => {
    await ensureTestRoot();
    const proxy = await TcpProxy.to(server);
    try {
      const zk = await clients.connect(proxy.address);
      const name = uniqueLockName('ifheld-deleted');
      const lock = await acquireLock(zk, name);
      // The holder's own-node watch is on the server: the deletion's notification will be on its way.
      await until(async () => (await serverWatches(server, lock.path)), 'the holder watching its node');
      const target = uniqueZnodePath('ifheld-deleted');
      // Everything the server sends the holder from now on is kept in the proxy.
      proxy.holdReplies();
      await file.admin.delete(lock.path);
      // The client has heard nothing: by its own clock and knowledge it holds.
      expect(lock.held).toBe(true);
      const multi = vi.spyOn(zk, 'multi');
      const write = lock.ifHeld([{ op: 'create', path: target, data: 'late' }]).catch((error: unknown) => error);
      expect(multi).toHaveBeenCalledTimes(1); // the local check passed: the server decides
      await proxy.whenHeld();
      proxy.deliverHeld();
      const refused = await within(write, 10_000, 'the multi answered');
      expect(refused).toBeInstanceOf(LockLostError);
      expect((refused as LockLostError).code).toBe('LOCK_LOST');
      expect((refused as LockLostError).reason).toBe('node_deleted');
      expect(await dataOf(target)).toBeNull();
      expect(lock.held).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it('its session expired: refused before any I/O with LOCK_LOST, nothing written', async () => {
    const { zk, lock, target } = await heldWithTarget('ifheld-expired');
    await expireSession(zk);
    const multi = vi.spyOn(zk, 'multi');
    const refused = await lock.ifHeld([{ op: 'create', path: target, data: 'late' }]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(LockLostError);
    expect((refused as LockLostError).reason).toBe('session_expired');
    expect(multi).not.toHaveBeenCalled();
    expect(await dataOf(target)).toBeNull();
  });

  it('after release: refused before any I/O (reason released)', async () => {
    const zk = await clients.connect(server);
    const lock = await acquireLock(zk, uniqueLockName('ifheld-released'));
    await lock.release();
    const multi = vi.spyOn(zk, 'multi');
    const refused = await lock.ifHeld([{ op: 'create', path: uniqueZnodePath('ifheld-released'), data: 'late' }]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(LockLostError);
    expect((refused as LockLostError).reason).toBe('released');
    expect(multi).not.toHaveBeenCalled();
  });

  it('bad input: INVALID_ARGUMENT, nothing sent (no ops, an op on our own node)', async () => {
    const zk = await clients.connect(server);
    const lock = await acquireLock(zk, uniqueLockName('ifheld-input'));
    const multi = vi.spyOn(zk, 'multi');
    await expect(lock.ifHeld([])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(lock.ifHeld('x' as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(lock.ifHeld([{ op: 'delete', path: lock.path }])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(multi).not.toHaveBeenCalled();
    expect(await file.admin.exists(lock.path)).not.toBeNull();
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('ops over the packet limit together (each under it): INVALID_ARGUMENT naming the request\'s real size, nothing written, the lock still held', async () => {
    const { zk, lock, target } = await heldWithTarget('ifheld-huge');
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    // Each op passes the per-op size check; the multi (about 2 MiB) does not fit in one packet.
    const data = new Uint8Array(1_040_000).fill(7);
    const ops = [
      { op: 'create', path: target, data },
      { op: 'create', path: `${target}-2`, data },
    ] as const;
    const refused = (await lock.ifHeld([...ops]).catch((error: unknown) => error)) as Error;
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect(refused.message).toMatch(/^request of \d+ bytes exceeds ZooKeeper's packet limit/);
    const size = Number(/request of (\d+) bytes/.exec(refused.message)?.[1]);
    // The multi's frame: the data, plus headers, the check and the paths (well under a KiB).
    expect(size).toBeGreaterThan(2 * data.byteLength);
    expect(size).toBeLessThan(2 * data.byteLength + 1024);
    expect(await dataOf(target)).toBeNull();
    expect(states).toEqual([]);
    expect(lock.held).toBe(true);
    await lock.release();
  });
});

describe('leadership.ifLeader', () => {
  it('the leader commits; once its node is deleted the server refuses, nothing written', async () => {
    await ensureTestRoot();
    const proxy = await TcpProxy.to(server);
    try {
      const zk = await clients.connect(proxy.address);
      const leader = await campaign(zk, uniqueLockName('ifleader'));
      const committed = uniqueZnodePath('ifleader');
      await leader.ifLeader([{ op: 'create', path: committed, data: 'epoch' }]);
      expect(await dataOf(committed)).toBe('epoch');
      await until(async () => (await serverWatches(server, leader.path)), 'the leader watching its node');
      proxy.holdReplies();
      await file.admin.delete(leader.path);
      expect(leader.held).toBe(true);
      const write = leader.ifLeader([{ op: 'setData', path: committed, data: 'late' }]).catch((error: unknown) => error);
      await proxy.whenHeld();
      proxy.deliverHeld();
      const refused = await within(write, 10_000, 'the multi answered');
      expect(refused).toBeInstanceOf(LockLostError);
      expect((refused as LockLostError).reason).toBe('node_deleted');
      expect(await dataOf(committed)).toBe('epoch');
      await file.admin.delete(committed);
    } finally {
      await proxy.close();
    }
  });
});
