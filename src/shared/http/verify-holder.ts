/**
 * Chubby's CheckSequencer for HTTP, for any token source whose locks queue
 * (LockSource.observeLock: ZooKeeper, etcd). The fencing header is client
 * input, and a client that sends a huge token would advance the fence past
 * every honest holder and lock them all out. verifyHolder admits a token only
 * if it is the token of the lock's holder right now, as the source sees it.
 *
 *   fencing({ store, resource: 'reports/daily', verify: verifyHolder(etcdSource(etcd), 'reports/daily') })
 *
 * The holder is read from the source's observer, whose watch keeps it fresh,
 * so a request costs no round trip to the lock service while the holder does
 * not change. A holder that has just been replaced is refused (403) from the
 * moment the watch reports it; until then its token can still pass, and the
 * fence (the store's compare) is what stops it once the successor has
 * written.
 *
 * A request that carries a sequencer must also name this lock: kind 'lock',
 * `lockName`, this source's kind and its identity (LockSource.identity). A
 * sequencer of another lock, or of a source that cannot say who it is, is
 * refused (403) even when its token equals the holder's.
 *
 * When the source cannot answer (session or lease lost, client closed) the
 * lookup throws and the middleware answers 503: admitting unverified tokens
 * would undo the point of verifying.
 */
import { InvalidArgumentError, type FencingToken, type LockObserver, type LockSource, type Sequencer } from '../../index.js';

/**
 * A `verify` for fencing() that admits only the current holder's token of one
 * lock of a LockSource; close() stops observing the lock.
 */
export interface HolderVerifier {
  (token: FencingToken, resource?: string, req?: unknown, sequencer?: Sequencer | null): Promise<boolean>;
  /** Stop observing the lock (the verifier then asks the source again on every call). */
  close(): void;
}

/**
 * A `verify` for fencing() that admits only the token of the current holder of
 * `lockName` at `source` (any source whose locks queue and can be observed:
 * ZooKeeper, etcd), answered from a cache the source keeps fresh.
 */
export function verifyHolder(source: LockSource, lockName: string): HolderVerifier {
  if (source === null || typeof source !== 'object' || typeof source.observeLock !== 'function') {
    throw new InvalidArgumentError(`verifyHolder needs a LockSource whose locks queue (observeLock)${source !== null && typeof source === 'object' ? `; ${String(source.kind)} has none` : ''}`);
  }
  const observer: LockObserver = source.observeLock(lockName);
  const verify = async (token: FencingToken, _resource?: string, _req?: unknown, sequencer?: Sequencer | null): Promise<boolean> => {
    if (sequencer != null) {
      if (sequencer.kind !== 'lock' || sequencer.name !== lockName || sequencer.source.kind !== source.kind) return false;
      // Fail closed: a sequencer names a source, and one that cannot say who it is cannot be matched.
      if (source.identity === undefined || sequencer.source.id !== (await source.identity()).id) return false;
    }
    const holder = await observer.holder();
    return holder !== null && holder.token === token;
  };
  return Object.assign(verify, { close: () => observer.close() });
}
