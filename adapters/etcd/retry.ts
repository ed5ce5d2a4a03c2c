/**
 * Requests repeated across lost replies. etcd3 marks the errors of a request
 * that may not have reached etcd, or whose reply did not come back (an
 * unavailable member, a dropped connection, a missed deadline), as
 * recoverable, with an own property keyed by a symbol described
 * 'RecoverableError'; it retries them a few times itself and then gives up.
 * The queue's requests are safe to repeat (a join's put compares first, a
 * delete of our own key deletes nothing the second time, reads are reads),
 * so they go on being repeated while the lease lives and the caller waits.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { FencekeeperError } from '../../src/index.js';
import type { Lease } from './session.js';

const PAUSE_MS = 100;

export function isRecoverable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  return Object.getOwnPropertySymbols(error).some((s) => s.description === 'RecoverableError' && (error as Record<symbol, unknown>)[s] === true);
}

/** etcd3's own ClientClosedError: the client's owner closed it, and nothing will be sent again. */
export function isClosedClient(error: unknown): boolean {
  return (error as { constructor?: { name?: unknown } } | null)?.constructor?.name === 'ClientClosedError' && !(error instanceof FencekeeperError);
}

/** `request()`, repeated after a recoverable error until the lease ends or `given()` says the caller gave up. */
export async function repeated<T>(request: () => Promise<T>, lease: Lease, givenUp: () => boolean = () => false): Promise<T> {
  for (;;) {
    try {
      return await request();
    } catch (error) {
      if (!isRecoverable(error) || lease.endedReason !== null || givenUp()) throw error;
    }
    await sleep(PAUSE_MS, undefined, { ref: false });
  }
}
