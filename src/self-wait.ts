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

/**
 * What the self-wait registry needs of a grant (noteGrant, forgetGrant):
 * whether it still holds. A grant class that declares the two fields below
 * (initialised to null, so its objects keep one shape) is noted on itself,
 * which costs no lookup table; any other grant object is left untouched and
 * noted in a side table.
 */
export interface SelfWaitGrant {
  readonly held: boolean;
  /** Where noteGrant recorded the grant: its client's names of its family. Null until noted, and again once forgotten. */
  selfWaitIn?: SelfWaitNames | null;
  /** The name noteGrant recorded the grant under. */
  selfWaitName?: string | null;
}

/**
 * One client's live grants of one family, by name: the grant itself while
 * one holds the name (the common case, no collection per held lock), a list
 * while several do.
 */
export type SelfWaitNames = Map<string, SelfWaitGrant | SelfWaitGrant[]>;

/** Which names of one client wait for each other: a read and a write of one name do. */
type Family = 'lock' | 'rw' | 'permit' | 'election';

function familyOf(kind: SequencerKind): Family {
  return kind === 'read' || kind === 'write' ? 'rw' : kind;
}

/** One client's live grants by family and name, and the names it was warned about. */
class ClientGrants {
  readonly lock: SelfWaitNames = new Map();
  readonly rw: SelfWaitNames = new Map();
  readonly permit: SelfWaitNames = new Map();
  readonly election: SelfWaitNames = new Map();
  readonly warned = new Set<string>();
}

const byClient = new WeakMap<object, ClientGrants>();
/** Where grants that do not declare selfWaitIn / selfWaitName were noted (never written onto them). */
const notedAside = new WeakMap<SelfWaitGrant, { readonly names: SelfWaitNames; readonly name: string }>();

/**
 * Note that `client` holds `grant` (of `kind` and `name`), until
 * forgetGrant(grant): a later wait of the same client on the same name then
 * warns (warnIfSelfWait). `client` is whatever object the source's grants
 * hang on (its client, its session).
 */
export function noteGrant(client: object, kind: SequencerKind, name: string, grant: SelfWaitGrant): void {
  let grants = byClient.get(client);
  if (grants === undefined) byClient.set(client, (grants = new ClientGrants()));
  const names = grants[familyOf(kind)];
  const noted = names.get(name);
  if (noted === undefined) names.set(name, grant);
  else if (Array.isArray(noted)) noted.push(grant);
  else names.set(name, [noted, grant]);
  if ('selfWaitIn' in grant) {
    grant.selfWaitIn = names;
    grant.selfWaitName = name;
  } else notedAside.set(grant, { names, name });
}

/** The grant has left (released, resigned): it no longer counts (a no-op for a grant never noted). */
export function forgetGrant(grant: SelfWaitGrant): void {
  let names: SelfWaitNames | null | undefined;
  let name: string | null | undefined;
  if ('selfWaitIn' in grant) {
    names = grant.selfWaitIn;
    name = grant.selfWaitName;
    grant.selfWaitIn = null;
    grant.selfWaitName = null;
  } else {
    const aside = notedAside.get(grant);
    notedAside.delete(grant);
    names = aside?.names;
    name = aside?.name;
  }
  if (names === undefined || names === null || name === undefined || name === null) return;
  const noted = names.get(name);
  if (noted === grant) names.delete(name);
  else if (Array.isArray(noted)) {
    const at = noted.indexOf(grant);
    if (at >= 0) noted.splice(at, 1);
    // The last one to leave removes the name: a process naming ever new locks keeps no trail.
    if (noted.length === 1) names.set(name, noted[0] as SelfWaitGrant);
    else if (noted.length === 0) names.delete(name);
  }
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
  const noted = grants[family].get(name);
  if (noted === undefined) return false;
  const holds = Array.isArray(noted) ? noted.some((grant) => grant.held) : noted.held;
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
