/**
 * What etcd3's errors say, read without importing etcd3 (an optional peer):
 * whether a request may be repeated, whether the client was closed. Apart
 * from the retry loop (./retry.ts) so that the session, which the loop
 * needs, can ask too without an import cycle.
 */
import { FencekeeperError } from '../../index.js';

/**
 * etcd3 marks the errors of a request that may not have reached etcd, or
 * whose reply did not come back (an unavailable member, a dropped
 * connection, a missed deadline), as recoverable, with an own property keyed
 * by a symbol described 'RecoverableError'.
 */
export function isRecoverable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  return Object.getOwnPropertySymbols(error).some((s) => s.description === 'RecoverableError' && (error as Record<symbol, unknown>)[s] === true);
}

/** etcd3's own ClientClosedError: the client's owner closed it, and nothing will be sent again. */
export function isClosedClient(error: unknown): boolean {
  return (error as { constructor?: { name?: unknown } } | null)?.constructor?.name === 'ClientClosedError' && !(error instanceof FencekeeperError);
}
