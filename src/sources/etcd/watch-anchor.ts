/**
 * One idle watch per etcd3 client while its session lives, so that the
 * client's watch stream stays open from one wait to the next.
 *
 * etcd3 (1.x) carries all the watchers of a client on one gRPC stream and
 * cancels that stream when its last watcher is cancelled. The cancelled
 * stream's CANCELLED status then reaches etcd3's own stream error handler,
 * which reports it as a failure of the member it was open to
 * (ConnectionPool.markFailed): it closes every gRPC client of that member,
 * dropping the requests in flight to it and our lease's keepalive stream,
 * and counts one failure on that member's circuit breaker, which stops all
 * requests to it for 5 s after three in a row ("Execution prevented because
 * the circuit breaker is open" once every member's is open). A process
 * whose waits come one at a time (each wait's watch the client's only one,
 * cancelled at its grant) did that at every handoff: two processes taking
 * turns on one lock got a fifth of one process's grants, and a thousand
 * waiters over eight clients opened the breakers.
 *
 * With one more watch that lives as long as the session, the count of
 * watchers never falls to zero, the stream is never cancelled, and a wait's
 * watch is one create and one cancel request on the open stream. The anchor
 * watches a key nothing writes (an event on it, should something write it,
 * is ignored): etcd sends it nothing and keeps one watcher for it.
 */
import type { EtcdClient, EtcdWatcher } from './client.js';

/** The key the anchor watches: under the source's root, never written by it. */
export const WATCH_ANCHOR_KEY = 'fencekeeper/watch-anchor';

const anchors = new WeakMap<EtcdClient, EtcdWatcher>();

/** Before the source makes a watch on `etcd`: the client's anchor watch, made once. */
export function anchorWatchStream(etcd: EtcdClient): void {
  if (anchors.has(etcd)) return;
  const watcher = etcd.watch().key(WATCH_ANCHOR_KEY).watcher();
  // etcd3 emits 'error' when a watch is refused; an EventEmitter without a listener would throw it.
  watcher.on('error', () => undefined);
  anchors.set(etcd, watcher);
}

/** When the session closes: cancel the anchor (the stream closes with the last watch, as etcd3 does). */
export function releaseWatchAnchor(etcd: EtcdClient): void {
  const watcher = anchors.get(etcd);
  if (watcher === undefined) return;
  anchors.delete(etcd);
  void watcher.cancel().catch(() => undefined);
}
