// Shared by the lock and election integration tests: clients closed after
// each test, queue listings, ZooKeeper's own view of the watches (the wchc
// four-letter word), and a reply held back for seconds.
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { isCode } from '../../../src/errors.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import type { TcpProxy } from '../../helpers/tcp-proxy.js';
import { fourLetterWord } from '../../helpers/zookeeper.js';

export const LOCKS = '/fencekeeper/locks';
export const ELECTIONS = '/fencekeeper/elections';

/** The children of a queue's parent ([] when the parent does not exist). */
export async function queueChildren(zk: ZooKeeperClient, parent: string): Promise<string[]> {
  try {
    return (await zk.getChildren(parent)).sort();
  } catch (error) {
    if (isCode(error, 'ZK_NONODE')) return [];
    throw error;
  }
}

/** How many watches the server holds on paths under `prefix` (wchc: per session, the watched paths). */
export async function serverWatchCount(hostPort: string, prefix: string): Promise<number> {
  const text = await fourLetterWord(hostPort, 'wchc');
  return text.split('\n').filter((line) => line.trim().startsWith(`${prefix}/`)).length;
}

/** Whether the server holds a watch on exactly `path` (wchc lists the watched paths per session). */
export async function serverWatches(hostPort: string, path: string): Promise<boolean> {
  return (await fourLetterWord(hostPort, 'wchc')).split('\n').some((line) => line.trim() === path);
}

export interface HeldBackReply {
  /** performance.now() before the request was issued: it was sent no earlier. */
  readonly sentAfter: number;
  /** When the proxy passed the client's last bytes to the server: the request was sent no later. */
  readonly forwardedBy: number;
  /** When the proxy delivered the reply: the client heard the server only then. */
  readonly deliveredAt: number;
}

/**
 * Make one request the last one the server ever acknowledges for `zk`
 * (connected through `proxy`), with its reply arriving `holdMs` after the
 * request: the proxy holds what the server sends, the request goes out, and
 * once the server has answered nothing passes any more (a black hole, so the
 * pings that follow are never answered); after `holdMs` the held reply alone
 * is delivered. The send time of the client's last acknowledged request then
 * lies in [sentAfter, forwardedBy], while its reply arrived at deliveredAt,
 * seconds later: a client that counted its session's deadline from the
 * arrival would be off by that much.
 */
export async function lastReplyHeldBack(proxy: TcpProxy, zk: ZooKeeperClient, holdMs: number): Promise<HeldBackReply> {
  // A round trip first: nothing of ours is in flight, and the next ping is a
  // third of the session timeout away.
  await zk.exists('/');
  proxy.holdReplies();
  const sentAfter = performance.now();
  const request = zk.exists('/');
  await proxy.whenHeld();
  proxy.blackhole();
  const forwardedBy = proxy.lastForwardedAt;
  const rest = sentAfter + holdMs - performance.now();
  if (rest > 0) await new Promise((r) => setTimeout(r, rest));
  const deliveredAt = performance.now();
  proxy.deliverHeld();
  await request;
  return { sentAfter, forwardedBy, deliveredAt };
}
