/**
 * Holding a ZooKeeper queue node: the step-down clock (../../step-down.ts)
 * fed with the session.
 *
 * The server expires a session it has not heard from for the negotiated
 * timeout, and it heard from us no earlier than the send time of the last
 * request whose reply arrived, so every holding of one client shares the
 * deadline ZooKeeperClient.sessionDeadline (that send time + the timeout),
 * and one clock: one timer per client, however many locks it holds. A
 * holding also ends at once when the session expires or the client closes
 * (or starts closing), and when our own node is deleted by anyone.
 */
import { ConnectionLossError } from '../../errors.js';
import { StepDownClock, safetyMargin, type Holding } from '../../step-down.js';
import type { ZooKeeperClient } from '../client.js';

const clocks = new WeakMap<ZooKeeperClient, StepDownClock>();

/** The clock of `zk`'s session: made with the client's first holding, and listening to it from then on. */
function clockOf(zk: ZooKeeperClient): StepDownClock {
  let clock = clocks.get(zk);
  if (clock === undefined) {
    const session = new StepDownClock({
      name: 'ZooKeeper',
      grant: 'session',
      ended: () => (zk.state === 'expired' ? 'session_expired' : zk.state === 'closed' ? 'closed' : null),
    });
    zk.on('state', (state) => {
      if (state === 'expired') session.end('session_expired');
      else if (state === 'closed') session.end('closed');
    });
    // Closing the client ends its holdings at once, before the session has finished ending.
    zk.on('closing', () => session.end('closed'));
    clocks.set(zk, session);
    clock = session;
  }
  return clock;
}

/** Hold our node at `path` until the deadline, a loss, or release (`lose('released')`). */
export function holdNode(zk: ZooKeeperClient, lock: string, path: string, marginMs: number): Holding {
  const clock = clockOf(zk);
  const holding = clock.hold({ lock, marginMs, deadline: () => zk.sessionDeadline });
  // The own-node watch is a request of its own: sent eagerly, it leaves in
  // a socket write of its own (create2 + getChildren have gone, release's
  // delete comes later) and costs a reply and a notification on top. A
  // holder that releases within this turn of the event loop never needs
  // it, so it goes out on the next one. Nothing is missed meanwhile: if the
  // node is deleted first, exists() answers null and the holding ends.
  setImmediate(() => {
    if (!holding.signal.aborted) watchNode(zk, path, holding);
  });
  return holding;
}

/** Our own node vanishing (an operator's delete, a session expiry seen first by the server) ends the holding. */
function watchNode(zk: ZooKeeperClient, path: string, holding: Holding): void {
  const deleted = (): void => holding.lose('node_deleted', 'its node was deleted');
  const watch = (event: { type: string }): void => {
    if (event.type === 'deleted') deleted();
    else if (!holding.signal.aborted) watchNode(zk, path, holding);
  };
  const check = (): void => {
    zk.exists(path, { watch }).then(
      (stat) => {
        if (stat === null) deleted();
      },
      (error: unknown) => {
        if (error instanceof ConnectionLossError && !holding.signal.aborted) check();
        // Session expiry and close reach us through the clock.
      },
    );
  };
  check();
}

/** The safety margin for this client's negotiated session timeout (default a quarter of it). */
export function sessionMargin(zk: ZooKeeperClient, requested: number | undefined): number {
  return safetyMargin(zk.sessionTimeoutMs, requested);
}
