/**
 * What the recipes do about a dropped connection. A request in flight when
 * the connection drops fails with ConnectionLossError: a read is safe to send
 * again (the client resends after it reconnects with the same session), a
 * write's outcome is unknown and is settled by the queue (./queue.ts). While
 * the client is offline, nothing a caller waits for may hang on the reconnect.
 */
import { ConnectionLossError } from '../../../errors.js';
import type { ClientState, ZooKeeperClient } from '../client.js';

/** Reads are safe to repeat: retry them across connection losses (the session's expiry ends the loop). */
export async function retryOnLoss<T>(read: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await read();
    } catch (error) {
      if (!(error instanceof ConnectionLossError)) throw error;
    }
  }
}

export function listChildren(zk: ZooKeeperClient, parent: string): Promise<string[]> {
  return retryOnLoss(() => zk.getChildren(parent));
}

/**
 * The callers of whileConnected on each client, told of a state change by
 * one 'state' listener per client: many acquires may give up at once on one
 * session (timeouts, a shared abort signal), and a listener each would pile
 * up on the client (and trip Node's MaxListenersExceeded warning).
 */
const offlineWaiters = new WeakMap<ZooKeeperClient, Set<() => void>>();

function offlineWaitersOf(zk: ZooKeeperClient): Set<() => void> {
  let set = offlineWaiters.get(zk);
  if (set === undefined) {
    const waiters = new Set<() => void>();
    zk.on('state', (state: ClientState) => {
      if (state === 'connected') return;
      for (const wake of [...waiters]) wake();
      waiters.clear();
    });
    offlineWaiters.set(zk, waiters);
    set = waiters;
  }
  return set;
}

/** Wait for `work` while the client stays connected; return early if it is (or goes) offline. */
export async function whileConnected(zk: ZooKeeperClient, work: Promise<void>): Promise<void> {
  if (zk.state !== 'connected') return;
  const waiters = offlineWaitersOf(zk);
  let wake!: () => void;
  const offline = new Promise<void>((resolve) => {
    wake = resolve;
  });
  waiters.add(wake);
  try {
    await Promise.race([work, offline]);
  } finally {
    waiters.delete(wake);
  }
}
