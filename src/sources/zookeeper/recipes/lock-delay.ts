/**
 * Lock-delay (Chubby's): after a holder's session expired instead of
 * releasing, the next holder waits `lockDelayMs` before its grant resolves,
 * so that a resource which cannot check tokens is not written by the new
 * holder while the old one may still be finishing a write it started before
 * it was paused. It narrows that window; it does not close it (a holder
 * paused for longer than the delay still writes late): fence what can be fenced.
 *
 *   const lock = await acquireLock(zk, 'jobs/mailer', { lockDelayMs: 10_000 });
 *
 * Opt-in per lock, and every participant of the lock must pass it: only a
 * participant that passes it marks its releases as clean, and an unmarked
 * release (a participant without the option) counts as unclean, so the next
 * holder waits. Without the option the release is a plain delete, as before.
 *
 * How a release marks itself: in the same multi as its node's delete it
 * writes the lock's parent node, its data set to the released node's name
 * (one transaction, so one zxid: afterwards the parent's mzxid equals its
 * pzxid, and the data names the node). A session's expiry deletes the node
 * without touching the parent's data; so does an operator's delete, and a
 * waiter that gives up (a plain delete, see ./queue.ts abandon). No extra
 * round trip for the releaser.
 *
 * How a successor tells, in the two ways a grant arrives:
 *
 *   - It waited behind a predecessor (the queue's awaitTurn). The last of
 *     the nodes ahead of it to go is its last known predecessor: nodes only
 *     join behind ours, so those ahead only ever leave, and a clean release
 *     comes only from a holder, that is a node with nothing ahead of it, so
 *     if our predecessor released cleanly everything ahead of it was gone
 *     already. At the grant it reads the parent's data (one round trip): the
 *     release was clean exactly when the data names that predecessor. Node
 *     names carry a per-join guid and a node leaves once, so the name is
 *     written by that node's clean release and by nothing else; and after
 *     it no holder but us can write the parent, so the data still names it.
 *     An old record names an older node: it excuses nothing later. Nodes
 *     joining or expiring behind us change the parent's children and not
 *     this answer (they never held). The read is served by our server after
 *     it applied the deletion we were told of, whose transaction carried
 *     the data: it is not stale.
 *     One spurious case, in the safe direction: the predecessor left as a
 *     waiter (gave up) and, before our listing came back, the holder ahead
 *     of it released cleanly: the record names that holder, not our last
 *     known predecessor, and we wait.
 *
 *   - It found the queue empty (its own node first in the listing after its
 *     create). Its predecessor, if any, left before it came; it has no name
 *     to compare, so it reads the parent's stat just before its create and
 *     again (with the children) just after, pipelined in the same socket
 *     write as the create and its listing, no extra round trip:
 *       before: mzxid == pzxid (and mzxid > czxid: a fresh parent has all
 *               three equal and says nothing) means the last change to the
 *               children was a clean release;
 *       between the two reads, no child may have left: every create and
 *               every delete adds one to cversion (ZooKeeper's DataTree),
 *               so the children count changes by creates - deletes while
 *               cversion changes by creates + deletes, and the two are equal
 *               exactly when nothing was deleted. (Were deletes not counted
 *               in cversion, the equality would still mean none happened.)
 *     Comparing the stat from after our own create would not do: that
 *     create changes pzxid, so mzxid != pzxid always. With both reads, the
 *     last child to leave before our create was released cleanly, and
 *     nobody held after it (a later holder would have joined ahead of us,
 *     and left, in between). Any doubt counts as unclean: no parent before
 *     the create (a container the server reaped once it sat empty, taking
 *     the record with it: the first acquire after an idle spell waits), a
 *     create that needed retries, a connection lost on the way.
 *
 * The wait is counted on our monotonic clock from when we learn of the
 * unclean end, so it is never shorter than lockDelayMs after the expiry
 * (that happened before we could see it); the server's clock is not ours to
 * compare with. It counts against the caller's timeout and ends with the
 * caller's signal, the session's expiry or the client's close, removing our
 * node as any other way out of a join does. A grant whose own node is
 * deleted during the wait learns of it from its own-node watch, right after.
 */
import { performance } from 'node:perf_hooks';
import { ConnectionLossError, InvalidArgumentError, ZooKeeperError, isCode } from '../../../errors.js';
import type { ZooKeeperClient } from '../client.js';
import type { Stat } from '../protocol.js';
import { dropOthers, leave, type QueueNode } from './queue.js';

export interface LockDelayOption {
  /**
   * After a holder's session expired (or its node was deleted) instead of
   * being released, wait this long before the next grant resolves. Every
   * participant of the lock must pass it: only such a participant marks its
   * releases as clean, and an unmarked release counts as unclean. It narrows
   * the window in which a paused holder's late write lands; it does not
   * close it (fence what can be fenced). Default: off.
   */
  readonly lockDelayMs?: number;
}

/** The validated delay; 0: off. */
export function lockDelayOf(options: LockDelayOption): number {
  const delay = options.lockDelayMs;
  if (delay === undefined) return 0;
  if (typeof delay !== 'number' || !Number.isFinite(delay) || delay < 0 || delay > 0x7fffffff) {
    throw new InvalidArgumentError(`lockDelayMs must be a number of milliseconds in 0..2^31-1, got ${String(delay)}`);
  }
  return delay;
}

/** The parent's stat, read just before our create and just after it (see the comment above). */
export interface ArrivalReads {
  readonly before: Promise<Stat | null>;
  readonly after: Promise<{ readonly children: readonly string[]; readonly stat: Stat } | null>;
}

const nothing = (): null => null;

/** Sent before the join's create (a connection lost or a missing parent: null, unclean). */
export function readBefore(zk: ZooKeeperClient, parent: string): Promise<Stat | null> {
  return zk.exists(parent).catch(nothing);
}

/** Sent after the join's create and listing. */
export function readAfter(zk: ZooKeeperClient, parent: string): ArrivalReads['after'] {
  return zk.getChildrenWithStat(parent).catch(nothing);
}

/**
 * Whether an arrival at an empty queue follows a clean release: the parent
 * before our create said its last child change was one, and no child left
 * between that read and one that lists our node. Pure, for the unit tests.
 */
export function arrivedClean(before: Stat | null, after: { readonly children: readonly string[]; readonly stat: Stat } | null, child: string): boolean {
  if (before === null || after === null) return false;
  if (!after.children.includes(child)) return false; // read before our create landed (an ACL check came first): look again
  if (before.mzxid !== before.pzxid || before.mzxid <= before.czxid) return false;
  if (after.stat.czxid !== before.czxid) return false; // another parent (reaped and made again)
  return after.stat.cversion - before.cversion === after.stat.numChildren - before.numChildren;
}

/** Whether a waiter's last predecessor was released cleanly: the parent's data names it. One read. */
export async function handedOverClean(zk: ZooKeeperClient, parent: string, predecessor: string): Promise<boolean> {
  try {
    const { data } = await zk.getData(parent);
    return Buffer.from(data).toString('utf8') === predecessor;
  } catch {
    return false; // a lost connection, a missing parent: unclean
  }
}

/**
 * Between the join and the grant: wait out lockDelayMs unless the previous
 * holder left cleanly. `seen`: the waiter's last predecessor (undefined: the
 * join found the queue empty, and `reads` tell).
 */
export async function waitOutUnclean(
  zk: ZooKeeperClient,
  node: QueueNode,
  delayMs: number,
  seen: { readonly predecessor: string } | undefined,
  reads: ArrivalReads,
): Promise<void> {
  let clean: boolean;
  if (seen !== undefined) {
    clean = await handedOverClean(zk, node.parent, seen.predecessor);
  } else {
    let after = await reads.after;
    // Sent before our create landed (an ACL check went first): list again. Later changes are counted too, safely.
    if (after !== null && !after.children.includes(node.child)) after = await readAfter(zk, node.parent);
    clean = arrivedClean(await reads.before, after, node.child);
  }
  if (!clean) await lockDelay(delayMs);
}

/** Resolves lockDelayMs from now on the monotonic clock (timers may fire a little early: wait the rest). */
export function lockDelay(delayMs: number): Promise<void> {
  const until = performance.now() + delayMs;
  return new Promise<void>((resolve) => {
    const tick = (): void => {
      const left = until - performance.now();
      if (left <= 0) resolve();
      else setTimeout(tick, Math.ceil(left)).unref();
    };
    tick();
  });
}

/**
 * A clean release: our node's delete and the record of it in one multi (see
 * above). Repeated across connection losses: a multi whose reply was lost
 * and that committed answers NONODE for our node the second time, and
 * nothing is written twice. If the multi is refused for another reason (the
 * parent's ACL does not let us write it), the node is deleted plainly:
 * successors count that as unclean and wait, the safe direction.
 */
export function leaveCleanly(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
  const released = releaseMarked(zk, node);
  return node.uncertain ? released.then(() => dropOthers(zk, node)) : released;
}

function releaseMarked(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
  return zk.multi([{ op: 'delete', path: node.path }, { op: 'setData', path: node.parent, data: node.child }]).then(
    () => undefined,
    (error: unknown) => {
      if (error instanceof ConnectionLossError) return releaseMarked(zk, node);
      if (error instanceof ZooKeeperError && error.opIndex === 0 && isCode(error, 'ZK_NONODE')) return; // gone already
      if (zk.state === 'expired' || zk.state === 'closed') return; // the session's end deletes it
      return leave(zk, node.path);
    },
  );
}
