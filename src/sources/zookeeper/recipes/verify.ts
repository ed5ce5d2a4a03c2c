/**
 * Chubby's CheckSequencer for HTTP: the fencing header is client input, and
 * a client that sends a huge token would advance the fence past every honest
 * holder and lock them all out. verifyWithZooKeeper admits a token only if it
 * is the czxid of the node that holds the lock right now, as ZooKeeper sees it.
 *
 * The holder is read from a cache that a children watch on the lock's queue
 * keeps fresh (observeLock), so a request costs no round trip to
 * ZooKeeper while the holder does not change. A holder that has just been
 * replaced is refused (403) from the moment the watch fires; until then its
 * token can still pass verify, and the fence (the store's compare) is what
 * stops it once the successor has written.
 *
 * A request that carries a sequencer (the token with its lock) must also name
 * this lock: kind 'lock', `lockName`, source kind 'zookeeper' and this
 * ensemble's id (`options.sourceId`, or else the ensemble's own identity,
 * read once through `zk` at the first sequencer). Another lock's sequencer
 * is refused (403) even when its token equals the holder's: tokens of one
 * ensemble are unique across its locks, but the sequencer claims a lock,
 * and a claim that is wrong is refused rather than read past.
 *
 * When ZooKeeper cannot answer (session expired, closed) the lookup throws and
 * the middleware answers 503: an unavailable lock service is nobody's client
 * error, and admitting unverified tokens would undo the point of verifying.
 */
import type { FencingToken, Sequencer } from '../../../index.js';
import { observeLock, type ZooKeeperLockObserver } from './lock.js';
import { zookeeperSourceId } from './source-id.js';
import type { ZooKeeperClient } from '../client.js';

/**
 * An HTTP guard's `verify` that admits only the current holder's token of one
 * lock, answered from a watched cache; close() stops watching.
 */
export interface ZooKeeperVerifier {
  (token: FencingToken, resource?: string, req?: unknown, sequencer?: Sequencer | null): Promise<boolean>;
  /** Stop observing the lock (the verifier then answers from ZooKeeper again on every call). */
  close(): void;
}

/** verifyWithZooKeeper's options. */
export interface VerifyWithZooKeeperOptions {
  /**
   * The ensemble's identity (its sequencers' source id): a sequencer naming
   * another source is refused. Default: the identity `zk` reads from the
   * ensemble (the same for every client of it).
   */
  readonly sourceId?: string;
}

/**
 * A `verify` for fencing() that admits only the token of the lock's current
 * holder (Chubby's CheckSequencer): a client cannot push the fence up with a
 * forged token. Answers from a cache kept fresh by a watch, no round trip per request.
 */
export function verifyWithZooKeeper(zk: ZooKeeperClient, lockName: string, options: VerifyWithZooKeeperOptions = {}): ZooKeeperVerifier {
  const observer: ZooKeeperLockObserver = observeLock(zk, lockName);
  const sourceId = options.sourceId;
  const verify = async (token: FencingToken, _resource?: string, _req?: unknown, sequencer?: Sequencer | null): Promise<boolean> => {
    if (sequencer != null) {
      if (sequencer.kind !== 'lock' || sequencer.name !== lockName || sequencer.source.kind !== 'zookeeper') return false;
      if (sequencer.source.id !== (sourceId ?? (await zookeeperSourceId(zk)).id)) return false;
    }
    const holder = await observer.holder();
    return holder !== null && holder.token === token;
  };
  return Object.assign(verify, { close: () => observer.close() });
}
