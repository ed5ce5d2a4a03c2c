// A waiting acquire that ends without a grant - its caller's abort, its
// timeout, its client's close - leaves nothing behind: no queue node, no
// listener on the client or the signal, and nothing of the wait reachable
// (the caller's options and signal are collected once the caller lets go of
// them). A waiter is a state object its callbacks resume (src/sources/
// zookeeper/recipes/queue.ts); its predecessor's watch outlives it until
// that node changes (ZooKeeper removes a watch only when it fires), so what
// that watch keeps must not reach the join.
import { getEventListeners } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { ClientClosedError, LockTimeoutError } from '../../../src/errors.js';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { acquireLock, lockStatus } from '../../../src/sources/zookeeper/recipes/lock.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';
import { LOCKS, queueChildren } from './lock-helpers.js';

const file = new StandaloneFile();
const { server, clients } = file;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collect until every ref is cleared (a WeakRef's target lives at least to the end of the job that read it). */
async function collected(refs: readonly WeakRef<object>[]): Promise<boolean> {
  for (let i = 0; i < 10; i++) {
    await new Promise((resolve) => setImmediate(resolve));
    gc();
    if (refs.every((r) => r.deref() === undefined)) return true;
  }
  return false;
}

type Ending = 'abort' | 'timeout' | 'close';

/** The signal's 'abort' listeners (0 once it is collected), read without keeping it. */
function abortListeners(signal: WeakRef<AbortSignal>): number {
  const live = signal.deref();
  return live === undefined ? 0 : getEventListeners(live, 'abort').length;
}

/**
 * Start a waiting acquire on `zk` and return how to end it, holding its
 * options and signal only weakly (made in this frame, which returns).
 */
function startWaiting(zk: ZooKeeperClient, name: string, ending: Ending): { outcome: Promise<string>; end: () => Promise<void>; refs: WeakRef<object>[]; signal: WeakRef<AbortSignal> } {
  let controller: AbortController | null = new AbortController();
  const options = ending === 'timeout' ? { timeoutMs: 1500, signal: controller.signal } : { signal: controller.signal };
  // The outcome by name only: an error's unformatted stack keeps its frames' receivers (the stop, its signal).
  const outcome = acquireLock(zk, name, options).then(
    () => 'granted',
    (error: unknown) => (error instanceof LockTimeoutError ? 'timeout' : error instanceof ClientClosedError ? 'closed' : error instanceof Error && error.message === 'caller gave up' ? 'aborted' : String(error)),
  );
  const signal = new WeakRef(controller.signal);
  return {
    outcome,
    refs: [new WeakRef(options), signal],
    signal,
    end: async () => {
      if (ending === 'abort') controller?.abort(new Error('caller gave up'));
      else if (ending === 'close') await zk.close();
      // A timeout ends on its own. The caller lets go of its controller either way.
      controller = null;
    },
  };
}

describe('a waiting acquire that ends without a grant', () => {
  it.each(['abort', 'timeout', 'close'] as const)('by %s: no node, no listener, nothing of the wait reachable', async (ending) => {
    const name = uniqueLockName(`leaves-${ending}`);
    const parent = `${LOCKS}/${name}`;
    const [a, b] = (await clients.many(2, server)) as [ZooKeeperClient, ZooKeeperClient];
    const holder = await acquireLock(a, name);
    // The waiting client's per-client listeners (holdings, waits, removals) are made by its first grant and wait.
    await (await acquireLock(b, `${name}-warm`)).release();
    await expect(acquireLock(b, name, { timeoutMs: 50 })).rejects.toBeInstanceOf(LockTimeoutError);
    const stateListeners = b.listenerCount('state');

    const { outcome, end, refs, signal } = startWaiting(b, name, ending);
    await until(async () => (await lockStatus(file.admin, name)).waiters.length === 1, 'the waiter queued');
    expect(b.listenerCount('state')).toBe(stateListeners);
    await end();
    expect(await outcome).toBe({ abort: 'aborted', timeout: 'timeout', close: 'closed' }[ending]);

    // No node: only the holder's, at once for an abort and a timeout, once the server drops the closed session's.
    await until(async () => (await queueChildren(file.admin, parent)).length === 1, 'the waiter node removed');
    expect(await queueChildren(file.admin, parent)).toEqual([holder.path.slice(parent.length + 1)]);
    // No listener: the client's did not grow; the signal keeps at most the one listener every wait on it shares.
    expect(b.listenerCount('state')).toBe(stateListeners);
    expect(abortListeners(signal)).toBeLessThanOrEqual(1);
    // Nothing of the wait reachable: not from the client's tables, its waits, its timer, or the predecessor's watch.
    expect(await collected(refs)).toBe(true);

    // The holder's release grants nobody and leaves the queue empty.
    await holder.release();
    await until(async () => (await queueChildren(file.admin, parent)).length === 0, 'the queue to empty');
    expect((await lockStatus(file.admin, name)).holder).toBeNull();
  });
});
