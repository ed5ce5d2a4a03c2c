/**
 * Who may touch a lock's (or election's) nodes.
 *
 * ZooKeeper checks a create and a delete against the PARENT's ACL, not the
 * node's own: a queue node with a strict ACL under an open parent can still
 * be deleted by anyone, who is then granted the lock. So the protection
 * lives on the lock's container: the recipes create it with the requested
 * ACL, and before queueing under a container they
 * did not create (one re-created by someone else after the reaper removed
 * ours) they read its ACL and refuse it unless it is the one requested.
 *
 * The roots (/fencekeeper, /fencekeeper/locks, /fencekeeper/elections) are
 * shared by every lock of every identity, so they are created open, as
 * without an ACL: made with the first ACL'd lock's ACL they would shut every
 * other identity's locks out of the ensemble. So are the nodes between the
 * roots and a nested name's container ('jobs' of 'jobs/reindex'), shared by
 * every lock below them; one found closed to us (made by someone else, or by
 * a version that gave it the first lock's ACL) is refused with
 * AclMismatchError naming it (refusedParent), not a bare NOAUTH. An open root lets anyone
 * delete an EMPTY container (never one with a holder or a waiter in it) and
 * re-create it with another ACL, which the check below then refuses: a
 * denial of service, never a second holder. A deployment that wants the
 * whole namespace closed creates the roots itself (or gives its clients a
 * chroot it made): the recipes never change an existing node's ACL.
 *
 * Without an ACL (neither per lock nor on the client) nothing here runs:
 * every node is created open (OPEN_ACL_UNSAFE), as ZooKeeper's own default,
 * and no ACL is read.
 *
 * The check is cached per client and container, keyed by the container's
 * czxid: the join's listing (getChildren2, sent in the create's write)
 * carries the container's Stat, so a container re-created since the check
 * shows a new czxid and is checked again, and an unchanged one costs nothing.
 */
import { AclMismatchError, InvalidArgumentError, isCode } from '../../../errors.js';
import { validateAcl } from '../requests.js';
import type { ZooKeeperClient } from '../client.js';
import { clientInternals } from '../client.js';
import { OPEN_ACL_UNSAFE, type ACL } from '../protocol.js';
import { digestAclId } from '../requests.js';
import { retryOnLoss } from './connection-loss.js';

/** A requested ACL, resolved for one client: what to create with, and what the server stores for it. */
export interface NodeAcl {
  readonly acl: readonly ACL[];
  /** The server's form of the ACL ('auth' entries expanded to this session's identities), order-free. */
  readonly key: string;
  /** The entries of `key`, for matching a digest the server showed without its hash. */
  readonly entries: readonly { readonly perms: number; readonly scheme: string; readonly id: string }[];
  /** The create options of a queue node under this ACL. */
  readonly sequential: { readonly mode: 'ephemeral_sequential'; readonly acl: readonly ACL[] };
}

/** Resolved ACLs per client, so a hot acquire with the same ACL array computes nothing. */
const resolved = new WeakMap<ZooKeeperClient, WeakMap<readonly ACL[], NodeAcl>>();

/**
 * The ACL a join uses: the option, else the client's default, else null
 * (open, unchecked). Validates before any request.
 */
export function nodeAclFor(zk: ZooKeeperClient, acl: readonly ACL[] | undefined): NodeAcl | null {
  const requested = acl !== undefined ? acl : zk.defaultAcl;
  if (requested === undefined) return null;
  let perClient = resolved.get(zk);
  const cached = perClient?.get(requested);
  if (cached !== undefined) return cached;
  validateAcl(requested, 'acl');
  const identities = (clientInternals.get(zk)?.auth ?? []).map((a) => {
    const at = a.credentials.indexOf(':');
    return digestAclId(a.credentials.slice(0, at), a.credentials.slice(at + 1));
  });
  const entries: { perms: number; scheme: string; id: string }[] = [];
  for (const { perms, id } of requested) {
    if (id.scheme !== 'auth') {
      entries.push({ perms, scheme: id.scheme, id: id.id });
      continue;
    }
    // ZooKeeper replaces an 'auth' entry with one digest entry per identity
    // the creating session authenticated as, and refuses it (INVALIDACL)
    // from a session with none: say so before any request.
    if (identities.length === 0) {
      throw new InvalidArgumentError("an ACL entry with scheme 'auth' (CREATOR_ALL_ACL) needs a client that authenticates (ConnectOptions.auth)");
    }
    for (const identity of identities) entries.push({ perms, scheme: 'digest', id: identity });
  }
  const frozen = Object.freeze([...requested]);
  const node: NodeAcl = Object.freeze({
    acl: frozen,
    key: canonical(entries.map((e) => entryKey(e.perms, e.scheme, e.id))),
    entries: Object.freeze(entries),
    sequential: Object.freeze({ mode: 'ephemeral_sequential' as const, acl: frozen }),
  });
  if (perClient === undefined) resolved.set(zk, (perClient = new WeakMap()));
  perClient.set(requested, node);
  return node;
}

const entryKey = (perms: number, scheme: string, id: string): string => `${perms}\u0000${scheme}\u0000${id}`;
/** Sorted and deduplicated, as the server drops repeated entries. */
const canonical = (entries: string[]): string => [...new Set(entries)].sort().join('\u0001');

/** Per client: container path -> the czxid of the container whose ACL was found (or made) to be `key`. */
const checked = new WeakMap<ZooKeeperClient, Map<string, { readonly key: string; readonly czxid: bigint }>>();

function cacheOf(zk: ZooKeeperClient): Map<string, { readonly key: string; readonly czxid: bigint }> {
  let cache = checked.get(zk);
  if (cache === undefined) checked.set(zk, (cache = new Map()));
  return cache;
}

/** True when `parent`, as of its czxid `czxid` (undefined: any), is known to carry `acl`. */
export function isChecked(zk: ZooKeeperClient, parent: string, acl: NodeAcl, czxid?: bigint): boolean {
  const entry = checked.get(zk)?.get(parent);
  return entry !== undefined && entry.key === acl.key && (czxid === undefined || entry.czxid === czxid);
}

/** The recipe itself created `parent` with `acl` (its czxid from the create's Stat). */
export function madeParent(zk: ZooKeeperClient, parent: string, acl: NodeAcl, czxid: bigint): void {
  cacheOf(zk).set(parent, { key: acl.key, czxid });
}

/**
 * Read `parent`'s ACL and refuse it (AclMismatchError) unless it is `acl`.
 * A missing parent passes: the join creates it, with `acl`.
 */
export async function checkParent(zk: ZooKeeperClient, parent: string, acl: NodeAcl): Promise<void> {
  let found: { acl: ACL[]; stat: { czxid: bigint } };
  try {
    found = await retryOnLoss(() => zk.getACL(parent));
  } catch (error) {
    if (isCode(error, 'ZK_NONODE')) return;
    throw error;
  }
  const key = canonical(found.acl.map((e) => entryKey(e.perms, e.id.scheme, unredacted(e, acl))));
  if (key !== acl.key) {
    checked.get(zk)?.delete(parent);
    throw new AclMismatchError(
      parent,
      acl.acl,
      found.acl,
      `${parent} exists with an ACL other than the one requested (found ${describe(found.acl)}, want ${describe(acl.acl)}): ` +
        'refusing to queue under a container someone else made; remove it or ask for its ACL',
    );
  }
  cacheOf(zk).set(parent, { key, czxid: found.stat.czxid });
}

/**
 * The error for a create refused (NOAUTH) under `node`, a node between the
 * roots and a lock's container ('jobs' of 'jobs/reindex') that the recipes
 * would have made open: someone made it with an ACL that shuts us out
 * (another identity's hand, or a version before this one, which gave such
 * nodes the first lock's ACL). Reads its ACL for the message when it may;
 * `found` is empty when it may not.
 */
export async function refusedParent(zk: ZooKeeperClient, node: string, refusal: unknown): Promise<AclMismatchError> {
  const found = await retryOnLoss(() => zk.getACL(node)).then((r) => r.acl, () => [] as ACL[]);
  return new AclMismatchError(
    node,
    OPEN_ACL_UNSAFE,
    found,
    `${node} exists with an ACL that does not let this client create under it (found ${found.length === 0 ? 'an ACL it may not read' : describe(found)}): ` +
      "the nodes between the roots and a lock's container are shared by every lock below them and made open; " +
      "someone else made this one (or a fencekeeper version that gave it the first lock's ACL): remove it while it is empty, or open it",
    { cause: refusal },
  );
}

/**
 * ZooKeeper shows a digest entry's hash only to a reader with ADMIN on the
 * node; others read 'user:x'. Such an entry matches the requested entry of
 * the same user and perms: a different hash under that user's name would
 * only lock the user out (a denial the create reports as NOAUTH), never let
 * anyone else in.
 */
function unredacted(entry: ACL, acl: NodeAcl): string {
  const { scheme, id } = entry.id;
  if (scheme !== 'digest' || !id.endsWith(':x')) return id;
  const user = id.slice(0, -1);
  const match = acl.entries.find((e) => e.perms === entry.perms && e.scheme === 'digest' && e.id.startsWith(user));
  return match?.id ?? id;
}

function describe(acl: readonly ACL[]): string {
  return acl.map((e) => `${e.id.scheme}:${e.id.id}=${e.perms}`).join(',');
}
