/**
 * Writes to ZooKeeper itself that succeed only while the lock (or the
 * leadership) is held: `lock.ifHeld(ops)`, `leadership.ifLeader(ops)`.
 *
 *   await lock.ifHeld([{ op: 'setData', path: '/jobs/reindex/state', data: 'done' }]);
 *
 * The ops go to the server in one multi behind a `check` of our own queue
 * node (version -1: "it exists"), so the server applies all of them or none,
 * and none once our node is gone, whatever our own clock says: a holder that
 * was paused past its session's expiry, or whose node an operator deleted,
 * is refused by the server even before the client has heard of it. There is
 * no window between the check and the writes: they are one transaction.
 *
 * Why existence is enough: the node's name carries our join's guid (nobody
 * else creates that path), it is ephemeral (it exists only while our session
 * does), and nodes only ever join behind ours (sequence order), so once we
 * were granted our node stays the lowest for as long as it exists. Its
 * version would add nothing: the recipes never write our node's data.
 *
 * The contract:
 *   - ops: the client's multi operations (MultiOp: create, delete, setData,
 *     check), at least one, none on our own queue node (deleting it would be
 *     a release the holding never hears of; use release()).
 *   - result: the ops' results, in order (MultiResult), without our check.
 *   - refused because the lock is not held: LockLostError (code LOCK_LOST),
 *     nothing written. Refused locally, before any I/O, when `held` is
 *     already false by our step-down clock (reason: why it ended); refused by
 *     the server when our node is gone (reason node_deleted, and the holding
 *     ends at once with it) or our session has expired (session_expired).
 *   - one of the user's ops fails (BADVERSION, NODEEXISTS, ...): that op's
 *     ZooKeeperError, opIndex counted in the user's ops; nothing written.
 *   - the connection drops with the multi in flight: ConnectionLossError; it
 *     may or may not have been applied (all or nothing still), as with any
 *     multi. Not sent again here: the ops need not be idempotent.
 */
import { InvalidArgumentError, LockLostError, ZooKeeperError, isCode, type ZooKeeperErrorCode } from '../../../errors.js';
import type { MultiOp, MultiResult, ZooKeeperClient } from '../client.js';
import { NODE_DELETED, NODE_DONE, type OwnNode } from './holding.js';

/** What a fenced multi needs of the held node: its path, whether it holds, and why not. */
export interface FencedNode extends OwnNode {
  readonly held: boolean;
  readonly signal: AbortSignal;
}

/**
 * Run `ops` in one multi behind a check of `node`'s existence. `lock` is the
 * name the LockLostError carries, `what` the method's name for messages.
 */
export async function fencedMulti(zk: ZooKeeperClient, node: FencedNode, lock: string, what: string, ops: readonly MultiOp[]): Promise<MultiResult[]> {
  if (!Array.isArray(ops) || ops.length === 0) throw new InvalidArgumentError(`${what}() needs a non-empty array of multi operations`);
  for (const op of ops) {
    if ((op as { path?: unknown } | null)?.path === node.path) {
      throw new InvalidArgumentError(`${what}(): ${node.path} is the lock's own queue node; release the lock instead of writing it`);
    }
  }
  // Our own step-down first: a holder that may already have lost the grant
  // writes nothing, without asking the server.
  if (!node.held) throw notHeld(lock, what, reasonOf(node.signal), causeOf(node.signal));
  let results: MultiResult[];
  try {
    results = await zk.multi([{ op: 'check', path: node.path, version: -1 }, ...ops]);
  } catch (error) {
    if (error instanceof ZooKeeperError && error.opIndex === 0) {
      // Our check failed: the node is gone (NONODE). The holding learns of it now, not at the watch's notification.
      if (isCode(error, 'ZK_NONODE') && !node[NODE_DONE]) node[NODE_DELETED]();
      throw notHeld(lock, what, 'node_deleted', error);
    }
    if (error instanceof ZooKeeperError && error.opIndex !== undefined) {
      // One of the caller's ops: its index among the caller's ops.
      throw new ZooKeeperError(error.code as ZooKeeperErrorCode, error.zkCode, error.path, { opIndex: error.opIndex - 1, cause: error });
    }
    if (isCode(error, 'SESSION_EXPIRED')) throw notHeld(lock, what, 'session_expired', error);
    throw error;
  }
  return results.slice(1);
}

function notHeld(lock: string, what: string, reason: LockLostError['reason'], cause?: unknown): LockLostError {
  return new LockLostError(lock, reason, `${lock} is not held (${reason}): ${what}() wrote nothing`, cause === undefined ? {} : { cause });
}

/** What led to the holding's end (its LockLostError's cause: a connection error), if anything. */
function causeOf(signal: AbortSignal): unknown {
  const reason: unknown = signal.reason;
  return reason instanceof LockLostError ? reason.cause : undefined;
}

/** Why the holding ended, from its signal's reason (a LockLostError; 'deadline' if it carries none). */
function reasonOf(signal: AbortSignal): LockLostError['reason'] {
  const reason: unknown = signal.reason;
  return reason instanceof LockLostError ? reason.reason : 'deadline';
}
