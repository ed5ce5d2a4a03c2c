// The handoff from a released holder to the waiter behind it. A waiter
// whose predecessor is the head is granted on the predecessor's deletion
// without listing the queue again (nodes only join behind ours); one whose
// predecessor was itself a waiter lists again (it may have given up, with
// the holder still ahead). Skipping the listing is only sound while our own
// node exists, so a waiter watches its own node: an operator's delete while
// it waits ends the wait with LockLostError at once, and it is never
// granted on a node that is gone.
import { describe, expect, it, vi } from 'vitest';
import { LockLostError } from '../../../src/errors.js';
import { acquireLock, lockStatus } from '../../../src/sources/zookeeper/recipes/lock.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { LOCKS, serverWatchCount } from './lock-helpers.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;

describe('handoff', () => {
  it('behind the head: granted on its deletion without listing the queue again', async () => {
    const name = uniqueLockName('handoff');
    const [a, b] = await clients.many(2, server);
    const holder = await acquireLock(a!, name);
    const next = acquireLock(b!, name);
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'the waiter queued');
    // The waiter's watches (its predecessor's and its own) are on the server.
    await until(async () => (await serverWatchCount(server, `${LOCKS}/${name}`)) >= 2, 'the waiter watches');
    const listings = vi.spyOn(b!, 'getChildren');
    await holder.release();
    const lock = await within(next, 10_000, 'the waiter granted');
    expect(lock.held).toBe(true);
    expect(listings).not.toHaveBeenCalled();
    await lock.release();
  });

  it('behind a waiter that gives up: lists again, and waits for the holder still ahead', async () => {
    const name = uniqueLockName('handoff-middle');
    const [a, b, c] = await clients.many(3, server);
    const holder = await acquireLock(a!, name);
    const middle = new AbortController();
    const quitter = acquireLock(b!, name, { signal: middle.signal });
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'the middle waiter queued');
    const last = acquireLock(c!, name);
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 2, 'the last waiter queued');
    const listings = vi.spyOn(c!, 'getChildren');
    middle.abort(new Error('gave up'));
    await expect(quitter).rejects.toThrow('gave up');
    await until(() => listings.mock.calls.length >= 1, 'the last waiter to list again');
    // The holder is still ahead: no grant yet.
    const early = await Promise.race([last.then(() => 'granted'), new Promise((r) => setTimeout(() => r('waiting'), 200))]);
    expect(early).toBe('waiting');
    expect(holder.held).toBe(true);
    await holder.release();
    const lock = await within(last, 10_000, 'the last waiter granted');
    expect(lock.held).toBe(true);
    await lock.release();
  });

  it('a waiter whose node is deleted while it waits fails at once with node_deleted, and is not granted when the head leaves', async () => {
    const name = uniqueLockName('handoff-deleted');
    const [a, b] = await clients.many(2, server);
    const holder = await acquireLock(a!, name);
    const waiting = acquireLock(b!, name);
    const settled = waiting.then(
      () => 'granted',
      (error: unknown) => error,
    );
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'the waiter queued');
    await until(async () => (await serverWatchCount(server, `${LOCKS}/${name}`)) >= 2, 'the waiter watches');
    const { waiters } = await lockStatus(file.admin, name);
    await file.admin.delete(waiters[0]!.path);
    // Ended by its own node's watch: the holder has not moved.
    const outcome = await within(settled, 10_000, 'the waiter to hear of its node');
    expect(outcome).toBeInstanceOf(LockLostError);
    expect((outcome as LockLostError).reason).toBe('node_deleted');
    expect(holder.held).toBe(true);
    await holder.release();
  });
});
