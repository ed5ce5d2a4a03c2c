/**
 * Requests repeated across lost replies. etcd3 marks the errors of a request
 * that may not have reached etcd, or whose reply did not come back (an
 * unavailable member, a dropped connection, a missed deadline), as
 * recoverable (./client-errors.ts); it retries them a few times itself and
 * then gives up.
 * The queue's requests are safe to repeat (a join's put compares first, a
 * delete of our own key deletes nothing the second time, reads are reads),
 * so they go on being repeated while the lease lives and the caller waits.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isRecoverable } from './client-errors.js';
import type { Lease } from './session.js';

const PAUSE_MS = 100;

const NEVER_GIVEN_UP = (): boolean => false;

/**
 * `request()`, repeated after a recoverable error until the lease ends or
 * `givenUp()` says the caller gave up. A request answered at once costs one
 * `catch` on its promise: acquire and release are hot paths.
 */
export function repeated<T>(request: () => Promise<T>, lease: Lease, givenUp: () => boolean = NEVER_GIVEN_UP): Promise<T> {
  return request().catch((error: unknown) => {
    if (!isRecoverable(error) || lease.endedReason !== null || givenUp()) throw error;
    return sleep(PAUSE_MS, undefined, { ref: false }).then(() => repeated(request, lease, givenUp));
  });
}
