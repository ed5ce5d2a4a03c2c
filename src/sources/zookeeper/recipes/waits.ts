/**
 * One ZooKeeper client's waits in the queues (the core's WaitGroup,
 * ../../../queue-stopper.ts): their timeouts share one timer, and the
 * session's end (expired, closed, or close() called) stops them all, told
 * by one 'state' and one 'closing' listener per client however many waits
 * there are.
 */
import { ClientClosedError, SessionExpiredError } from '../../../errors.js';
import { WaitGroup } from '../../../queue-stopper.js';
import type { ClientState, ZooKeeperClient } from '../client.js';
import { perClient } from './per-client.js';

/** The client's WaitGroup, made on its first wait. */
export const zookeeperWaits = perClient((zk: ZooKeeperClient): WaitGroup => {
  const waits = new WaitGroup();
  zk.on('state', (state: ClientState) => {
    if (state === 'expired') waits.stopAll(new SessionExpiredError());
    else if (state === 'closed') waits.stopAll(new ClientClosedError());
  });
  // close() ends the waits at once, as it ends the holdings (./holding.ts): the
  // server deletes our nodes before it answers closeSession, and a waiter told
  // of its node's deletion first would report a LockLostError, not the close.
  zk.on('closing', () => waits.stopAll(new ClientClosedError()));
  return waits;
});
