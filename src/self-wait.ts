/**
 * The self-wait warning: a client about to wait for a lock it holds itself.
 *
 * Outside a withLock scope, a second acquire of a name the same client
 * holds queues as a separate holder: two tasks of one process sharing a
 * client is common, and they must exclude each other. But the same code
 * taking a lock it already holds (a helper that acquires what its caller
 * holds) waits for itself, forever without a timeout. So the first time a
 * client waits on a name it holds itself, the process gets a warning
 * (process.emitWarning, code FENCEKEEPER_SELF_WAIT), once per client and
 * name: a hint in the log, never an error (the wait may be meant).
 *
 * A queueing source notes each grant against its client (noteGrant; the
 * grant forgets itself when it leaves) and, as a wait begins, calls
 * warnIfSelfWait. A read, a write and a plain lock of one name are
 * separate locks, but a read and a write of one name wait for each other,
 * so they count as one name here; permits and elections count per name too.
 */
import type { SequencerKind } from './sequencer.js';

/** The code of the process warning a client waiting on a lock it holds itself emits (process.on('warning'): `warning.code`). */
export const SELF_WAIT_WARNING = 'FENCEKEEPER_SELF_WAIT';

/** What the self-wait registry needs of a grant (noteGrant, forgetGrant): whether it still holds. */
export interface SelfWaitGrant {
  readonly held: boolean;
}

/** Which names of one client wait for each other: a read and a write of one name do. */
type Family = 'lock' | 'rw' | 'permit' | 'election';

function familyOf(kind: SequencerKind): Family {
  return kind === 'read' || kind === 'write' ? 'rw' : kind;
}

/** One name's live grants, knowing its map: the last one to leave removes it (a process naming ever new locks keeps no trail). */
class NameGrants extends Set<SelfWaitGrant> {
  constructor(
    readonly byName: Map<string, NameGrants>,
    readonly name: string,
  ) {
    super();
  }
}

/** One client's live grants by family and name, and the names it was warned about. */
class ClientGrants {
  readonly lock = new Map<string, NameGrants>();
  readonly rw = new Map<string, NameGrants>();
  readonly permit = new Map<string, NameGrants>();
  readonly election = new Map<string, NameGrants>();
  readonly warned = new Set<string>();
}

const byClient = new WeakMap<object, ClientGrants>();
/** Each noted grant's set, so that forgetting it is one lookup. */
const setOf = new WeakMap<SelfWaitGrant, NameGrants>();

/**
 * Note that `client` holds `grant` (of `kind` and `name`), until
 * forgetGrant(grant): a later wait of the same client on the same name then
 * warns (warnIfSelfWait). `client` is whatever object the source's grants
 * hang on (its client, its session).
 */
export function noteGrant(client: object, kind: SequencerKind, name: string, grant: SelfWaitGrant): void {
  let grants = byClient.get(client);
  if (grants === undefined) byClient.set(client, (grants = new ClientGrants()));
  const byName = grants[familyOf(kind)];
  let set = byName.get(name);
  if (set === undefined) byName.set(name, (set = new NameGrants(byName, name)));
  set.add(grant);
  setOf.set(grant, set);
}

/** The grant has left (released, resigned): it no longer counts (a no-op for a grant never noted). */
export function forgetGrant(grant: SelfWaitGrant): void {
  const set = setOf.get(grant);
  if (set === undefined) return;
  set.delete(grant);
  setOf.delete(grant);
  if (set.size === 0) set.byName.delete(set.name);
}

/**
 * A wait of `client` on `name` (of `kind`) begins: if the client holds a
 * grant of that name itself, emit the FENCEKEEPER_SELF_WAIT process warning,
 * the first time only for this client and name. Returns whether it warned.
 */
export function warnIfSelfWait(client: object, kind: SequencerKind, name: string): boolean {
  const grants = byClient.get(client);
  if (grants === undefined) return false;
  const family = familyOf(kind);
  const set = grants[family].get(name);
  if (set === undefined || set.size === 0) return false;
  let holds = false;
  for (const grant of set) {
    if (grant.held) {
      holds = true;
      break;
    }
  }
  const key = `${family}\0${name}`;
  if (!holds || grants.warned.has(key)) return false;
  grants.warned.add(key);
  const what = family === 'rw' ? `the read-write lock ${name}` : family === 'lock' ? `the lock ${name}` : family === 'permit' ? `a permit of ${name}` : `the election ${name}`;
  process.emitWarning(
    `this client waits for ${what}, which it holds itself: outside a withLock scope a second acquire queues as a separate holder, and waits until the first grant is released (forever without a timeout). Re-enter it with withLock, or release it first.`,
    { type: 'FencekeeperWarning', code: SELF_WAIT_WARNING },
  );
  return true;
}
