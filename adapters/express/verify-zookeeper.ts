/**
 * Chubby's CheckSequencer for HTTP: the fencing header is client input, and
 * a client that sends a huge token would advance the fence past every honest
 * holder and lock them all out. verifyWithZooKeeper admits a token only if it
 * is the czxid of the node that holds the lock right now, as ZooKeeper sees it.
 *
 * The holder is read from a cache that a children watch on the lock's queue
 * keeps fresh (the core's observeLock), so a request costs no round trip to
 * ZooKeeper while the holder does not change. A holder that has just been
 * replaced is refused (403) from the moment the watch fires; until then its
 * token can still pass verify, and the fence (the store's compare) is what
 * stops it once the successor has written.
 *
 * When ZooKeeper cannot answer (session expired, closed) the lookup throws and
 * the middleware answers 503: an unavailable lock service is nobody's client
 * error, and admitting unverified tokens would undo the point of verifying.
 */
import { observeLock, type FencingToken, type LockObserver, type ZooKeeperClient } from '../../src/index.js';

export interface ZooKeeperVerifier {
  (token: FencingToken): Promise<boolean>;
  /** Stop observing the lock (the verifier then answers from ZooKeeper again on every call). */
  close(): void;
}

export function verifyWithZooKeeper(zk: ZooKeeperClient, lockName: string): ZooKeeperVerifier {
  const observer: LockObserver = observeLock(zk, lockName);
  const verify = async (token: FencingToken): Promise<boolean> => {
    const holder = await observer.holder();
    return holder !== null && holder.token === token;
  };
  return Object.assign(verify, { close: () => observer.close() });
}
