/**
 * The ordered wait queue under a lock's (or election's) parent node, shared
 * by the lock and election recipes.
 *
 * Each contender creates an ephemeral sequential child `<guid>-lock-<seq>`;
 * the lowest sequence holds; every other contender watches only its
 * predecessor, so a release wakes exactly one waiter (no herd, seed 000).
 * When the predecessor goes, the waiter lists again rather than assuming it
 * is next: the predecessor may have been a waiter that gave up.
 *
 * The fencing token is the czxid of our own node, read from create2's Stat:
 * the zxid is (epoch << 32 | counter), strictly increasing across creations
 * and across leader failover, unlike the sequence suffix, which is the
 * parent's 32-bit cversion and restarts when a container parent is reaped.
 */
import { ConnectionLossError, InvalidArgumentError, ZooKeeperError } from './errors.js';
import type { FencingToken } from './token.js';
import type { ZooKeeperClient } from './zookeeper/client.js';
import { randomBytes } from 'node:crypto';
import { joinPath, validatePath } from './zookeeper/paths.js';

export const LOCKS_ROOT = '/fencekeeper/locks';
export const ELECTIONS_ROOT = '/fencekeeper/elections';
const MARKER = '-lock-';

/**
 * Each join gets its own guid, so a lost create2 reply can be matched to its
 * node. Random per process, counted per join: unique among one session's
 * nodes (and adoption also checks the ephemeral owner), without asking the
 * kernel for entropy on every acquire.
 */
const PROCESS_GUID = randomBytes(6).toString('hex');
let joins = 0;
function nextGuid(): string {
  joins = (joins + 1) % 0x100000000;
  return `${PROCESS_GUID}${joins.toString(16).padStart(8, '0')}`;
}

export interface QueueNode {
  /** Full path of our node. */
  readonly path: string;
  readonly parent: string;
  /** Child name under the parent. */
  readonly child: string;
  readonly token: FencingToken;
  /** This join's guid, the prefix of its node's name. */
  readonly guid: string;
  /**
   * A create of this join lost its reply. In an ensemble the lost create can
   * still commit after we have listed, adopted nothing and created again
   * (it was on its way from the old server to the leader when the session
   * moved): then a second node of ours exists, and once ours is released it
   * would block the lock for as long as our session lives. Such a join drops
   * every other node carrying its guid while waiting and when leaving.
   */
  readonly uncertain: boolean;
}

/** Validate a lock or election name ('jobs/reindex') and return its parent path. */
export function queueParent(root: string, name: string): string {
  if (typeof name !== 'string' || name === '' || name.startsWith('/') || name.endsWith('/')) {
    throw new InvalidArgumentError(`lock name must be a non-empty relative path like "jobs/reindex", got ${JSON.stringify(name)}`);
  }
  const parent = `${root}/${name}`;
  validatePath(parent);
  return parent;
}

/** The sequence number of a queue child, or null for anything that is not ours. */
export function sequenceOf(child: string): number | null {
  const at = child.lastIndexOf(MARKER);
  if (at === -1) return null;
  const digits = child.slice(at + MARKER.length);
  // ZooKeeper formats the parent's cversion with Java's %010d, the sign
  // counted in the width: 0000000042, and past 2^31 - 1 the int wraps
  // negative: -2147483648, then -000000001 for -1.
  if (!/^(?:[0-9]{10}|-[0-9]{9,10})$/.test(digits)) return null;
  return Number(digits);
}

/**
 * Sequence order across the 32-bit wrap (serial number arithmetic, as in
 * RFC 1982): the difference taken as an int32. Live queue nodes span far
 * fewer than 2^31 parent changes, so this orders them as they were created,
 * including a node made just after the counter wrapped (-2147483648 comes
 * after 2147483647, not before every older node).
 */
function compareSequence(a: number, b: number): number {
  return (a - b) | 0;
}

/** Queue children in grant order (lowest sequence first); foreign children are ignored. */
export function sortQueue(children: readonly string[]): string[] {
  return children
    .map((child) => ({ child, seq: sequenceOf(child) }))
    .filter((e): e is { child: string; seq: number } => e.seq !== null)
    .sort((a, b) => compareSequence(a.seq, b.seq))
    .map((e) => e.child);
}

export function guidOf(child: string): string {
  const at = child.lastIndexOf(MARKER);
  return at === -1 ? '' : child.slice(0, at);
}

function isCode(error: unknown, code: string): boolean {
  return error instanceof ZooKeeperError && error.code === code;
}

/**
 * Create the persistent roots and the container parents of `parent`. A
 * container is reaped by the server once its last child is gone, so it is
 * created on demand every time a create finds it missing.
 */
async function ensureParents(zk: ZooKeeperClient, parent: string, root: string): Promise<void> {
  const segments = parent.split('/').slice(1);
  let path = '';
  for (const segment of segments) {
    path += `/${segment}`;
    const persistent = root === path || root.startsWith(`${path}/`);
    try {
      await zk.create(path, null, { mode: persistent ? 'persistent' : 'container' });
    } catch (error) {
      if (!isCode(error, 'ZK_NODEEXISTS')) throw error;
    }
  }
}

export interface Enqueued {
  readonly node: QueueNode;
  /** The parent's children as listed right after our create (same socket write). */
  readonly children: string[];
}

/**
 * Join the queue: create2 our node and list the parent in the same socket
 * write (ZooKeeper answers one session's requests in order, so the listing
 * already contains our node). Uncontended, that is the whole acquire: one
 * round trip.
 *
 * If the connection drops with the create in flight, its outcome is
 * unknown: after the reconnect we list the parent and adopt the node that
 * carries this attempt's guid and is owned by our session, and only create
 * again if there is none. One acquire never leaves two nodes.
 */
export async function enqueue(zk: ZooKeeperClient, root: string, parent: string, data: Uint8Array | null): Promise<Enqueued> {
  const guid = nextGuid();
  const prefix = joinPath(parent, `${guid}${MARKER}`);
  let uncertain = false;
  for (let attempt = 0; ; attempt++) {
    const created = zk.create(prefix, data, { mode: 'ephemeral_sequential' });
    const listed = zk.getChildren(parent);
    let node: QueueNode | null;
    try {
      const { path, stat } = await created;
      node = { path, parent, child: path.slice(parent.length + 1), token: stat.czxid, guid, uncertain };
    } catch (error) {
      listed.catch(() => undefined);
      if (isCode(error, 'ZK_NONODE') && attempt < 10) {
        await ensureParents(zk, parent, root);
        continue;
      }
      if (!(error instanceof ConnectionLossError)) throw error;
      uncertain = true;
      node = await adopt(zk, parent, guid);
      if (node === null) continue;
      return { node, children: await listChildren(zk, parent) };
    }
    let children: string[];
    try {
      children = await listed;
    } catch (error) {
      if (!(error instanceof ConnectionLossError)) throw error;
      children = await listChildren(zk, parent);
    }
    return { node, children };
  }
}

async function adopt(zk: ZooKeeperClient, parent: string, guid: string): Promise<QueueNode | null> {
  const children = await listChildren(zk, parent).catch((error: unknown) => {
    if (isCode(error, 'ZK_NONODE')) return [] as string[];
    throw error;
  });
  const child = children.find((c) => guidOf(c) === guid);
  if (child === undefined) return null;
  const path = joinPath(parent, child);
  const stat = await retryOnLoss(() => zk.exists(path));
  if (stat === null || stat.ephemeralOwner !== zk.sessionId) return null;
  return { path, parent, child, token: stat.czxid, guid, uncertain: true };
}

/**
 * For an uncertain join (see QueueNode.uncertain): the listing without our
 * other nodes, which are deleted in the background. A certain join's
 * listing is returned as it is, at no cost.
 */
export function withoutStrays(zk: ZooKeeperClient, node: QueueNode, children: string[]): string[] {
  if (!node.uncertain) return children;
  const strays = children.filter((c) => c !== node.child && guidOf(c) === node.guid);
  if (strays.length === 0) return children;
  for (const stray of strays) leave(zk, joinPath(node.parent, stray)).catch(() => undefined);
  return children.filter((c) => !strays.includes(c));
}

/** Leave the queue for good: our node, and for an uncertain join any other node carrying its guid. */
export async function leaveQueue(zk: ZooKeeperClient, node: QueueNode): Promise<void> {
  await leave(zk, node.path);
  if (!node.uncertain || zk.state === 'expired' || zk.state === 'closed') return;
  try {
    const children = await listChildren(zk, node.parent);
    await Promise.all(children.filter((c) => guidOf(c) === node.guid).map((c) => leave(zk, joinPath(node.parent, c))));
  } catch {
    // The parent is gone (NONODE) or so is the session: nothing of ours is left either way.
  }
}

/** Reads are safe to repeat: retry them across connection losses (the session's expiry ends the loop). */
export async function retryOnLoss<T>(read: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await read();
    } catch (error) {
      if (!(error instanceof ConnectionLossError)) throw error;
    }
  }
}

export function listChildren(zk: ZooKeeperClient, parent: string): Promise<string[]> {
  return retryOnLoss(() => zk.getChildren(parent));
}

/**
 * Leave the queue: delete our node, repeating the delete across connection
 * losses (a lost delete reply is answered NONODE the second time). Ends when
 * the node is gone or the session is (which deletes it too).
 */
export async function leave(zk: ZooKeeperClient, path: string): Promise<void> {
  for (;;) {
    try {
      await zk.delete(path);
      return;
    } catch (error) {
      if (isCode(error, 'ZK_NONODE')) return;
      if (error instanceof ConnectionLossError) continue;
      if (zk.state === 'expired' || zk.state === 'closed') return;
      throw error;
    }
  }
}

export type TurnOutcome = { readonly turn: true } | { readonly turn: false; readonly predecessor: string };

/** Where we stand in a listing: holding, or behind `predecessor`. Null: our node is gone. */
export function position(children: readonly string[], child: string): TurnOutcome | null {
  const sorted = sortQueue(children);
  const index = sorted.indexOf(child);
  if (index === -1) return null;
  if (index === 0) return { turn: true };
  return { turn: false, predecessor: sorted[index - 1] as string };
}

/**
 * Wait until our node is the lowest. Each round watches only the
 * predecessor (exists with a watch; if it is already gone, list again at
 * once). `stop` is a promise that rejects when the caller gives up (abort,
 * timeout, session loss); the caller then removes our node.
 */
export async function waitForTurn(
  zk: ZooKeeperClient,
  parent: string,
  node: QueueNode,
  children: string[],
  stop: Promise<never>,
): Promise<'turn' | 'gone'> {
  let listing = children;
  for (;;) {
    const where = position(withoutStrays(zk, node, listing), node.child);
    if (where === null) return 'gone';
    if (where.turn) return 'turn';
    const predecessorGone = new Promise<void>((resolve) => {
      const watch = (): void => resolve();
      retryOnLoss(() => zk.exists(joinPath(parent, where.predecessor), { watch })).then(
        (stat) => {
          if (stat === null) resolve();
        },
        () => resolve(), // session trouble: the listing below reports it
      );
    });
    await Promise.race([predecessorGone, stop]);
    listing = await Promise.race([listChildren(zk, parent), stop]);
  }
}
