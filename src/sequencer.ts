/**
 * A sequencer: a fencing token together with what it is a token *of*.
 *
 * Tokens are ordered only within one lock's history at one source: a holder
 * of `jobs/other` whose token happens to be larger must not pass the fence of
 * a resource guarded by `jobs/reindex`, nor a grant from another ZooKeeper
 * ensemble or another Redis. A sequencer names the kind of grant (a lock or
 * an election: they can share a name), the lock's name, the source's stable
 * identity and the token, so a fence that has been bound to one lock can
 * refuse every other.
 *
 * Text form, for headers and metadata (strictly parsed, one spelling per value):
 *
 *   fk1:<kind>:<source kind>:<source id>:<token>:<name, percent-encoded>
 *   fk1:lock:zookeeper:3f0c2a8e-6d1b-4a57-9b0e-2c7f1d5e8a90:4294967311:jobs%2Freindex
 *
 * The name comes last and is percent-encoded (encodeURIComponent), so it
 * never contains the separator and the value is visible ASCII.
 */
import { InvalidArgumentError, InvalidTokenError } from './errors.js';
import { assertToken, formatToken, parseToken, type FencingToken } from './token.js';

/**
 * Which kind of grant a sequencer stands for. Each kind is its own namespace:
 * a plain lock, a read lock and a write lock of one name are different locks
 * (their tokens compare only within their kind), an election is not a lock,
 * and a permit's sequencer names one slot (`<name>#<slot>`), so a fence bound
 * to one slot refuses every other slot's holder.
 */
export type SequencerKind = 'lock' | 'election' | 'read' | 'write' | 'permit';

const KINDS: ReadonlySet<string> = new Set<SequencerKind>(['lock', 'election', 'read', 'write', 'permit']);

/** Who granted the token: shared by every client of that source, stable across restarts. */
export interface SourceIdentity {
  /** 'zookeeper', 'etcd', 'redis', 'redlock' (LockSource.kind). */
  readonly kind: string;
  /** The source's own id (a UUID kept by the source, an etcd cluster id). */
  readonly id: string;
}

/**
 * A fencing token together with the lock it belongs to: the kind of grant,
 * its name, the source's stable identity and the token. Tokens compare only
 * within one lock's history at one source, so a fence bound to a lock admits
 * only sequencers of that lock (`lock.sequencer`, `leadership.sequencer`).
 */
export interface Sequencer {
  readonly kind: SequencerKind;
  /** The lock's (or election's) name, as passed to acquireLock / campaign. */
  readonly name: string;
  readonly source: SourceIdentity;
  readonly token: FencingToken;
}

/** What a fence is bound to: a sequencer without its token. */
export interface FenceBinding {
  readonly kind: SequencerKind;
  /** The lock's (or election's) name. */
  readonly lock: string;
  readonly source: SourceIdentity;
}

const VERSION = 'fk1';
const SOURCE_KIND = /^[a-z][a-z0-9-]{0,31}$/;
const SOURCE_ID = /^[A-Za-z0-9_-]{1,128}$/;
const MAX_NAME = 1024;
const LONE_SURROGATE = /\p{Cs}/u;

/** Check the fields of a sequencer and return a frozen copy. */
export function sequencer(fields: Sequencer): Sequencer {
  if (typeof fields !== 'object' || fields === null) throw new InvalidArgumentError('a sequencer must be an object');
  const kind = checkKind(fields.kind);
  const name = checkName(fields.name);
  const source = checkSource(fields.source);
  const token = assertToken(fields.token);
  return Object.freeze({ kind, name, source, token });
}

/** Check the fields of a fence binding and return a frozen copy. */
export function fenceBinding(fields: FenceBinding): FenceBinding {
  if (typeof fields !== 'object' || fields === null) throw new InvalidArgumentError('a fence binding must be an object');
  return Object.freeze({ kind: checkKind(fields.kind), lock: checkName(fields.lock), source: checkSource(fields.source) });
}

/** True for a value shaped like a sequencer (the fields are checked by `sequencer()`). */
export function isSequencer(value: unknown): value is Sequencer {
  return typeof value === 'object' && value !== null && 'token' in value && 'source' in value && 'kind' in value && 'name' in value;
}

/** Does the sequencer belong to the lock the fence is bound to? The token is not compared. */
export function matchesBinding(presented: Sequencer, binding: FenceBinding): boolean {
  return presented.kind === binding.kind && presented.name === binding.lock
    && presented.source.kind === binding.source.kind && presented.source.id === binding.source.id;
}

/**
 * The text form, one for every place a sequencer or a binding is written
 * (an HTTP header, S3 metadata, an environment variable):
 *   sequencer  fk1:<kind>:<source kind>:<source id>:<token>:<name, percent-encoded>
 *   binding    fk1:<kind>:<source kind>:<source id>:<name, percent-encoded>
 * A binding is a sequencer without its token. The version prefix keeps both
 * apart from a bare token (decimal digits), so one field can carry either.
 */
export const SEQUENCER_FORMAT = `${VERSION}:<kind>:<source kind>:<source id>:<token>:<name>`;

/**
 * The strict text form of a sequencer, for a header or an environment
 * variable: `fk1:<kind>:<source kind>:<source id>:<token>:<percent-encoded name>`.
 * parseSequencer reads it back.
 */
export function formatSequencer(value: Sequencer): string {
  const s = sequencer(value);
  return [VERSION, s.kind, s.source.kind, s.source.id, formatToken(s.token), encodeURIComponent(s.name)].join(':');
}

/** Parse the text form `formatSequencer` writes; anything else throws InvalidTokenError. */
export function parseSequencer(text: string): Sequencer {
  const [kind, sourceKind, sourceId, token, name] = splitText(text, 6, 'sequencer', SEQUENCER_FORMAT) as [string, string, string, string, string];
  try {
    return sequencer({ kind: kind as SequencerKind, name, source: { kind: sourceKind, id: sourceId }, token: parseToken(token) });
  } catch (error) {
    if (error instanceof InvalidTokenError) throw error;
    throw new InvalidTokenError(`not a sequencer: ${(error as Error).message}`, { cause: error });
  }
}

/** A bare token (decimal) or a sequencer (`fk1:...`), told apart by the version prefix; anything else throws InvalidTokenError. */
export function parseFencing(text: string): FencingToken | Sequencer {
  return typeof text === 'string' && text.startsWith(`${VERSION}:`) ? parseSequencer(text) : parseToken(text);
}

/** A fence binding's text form: a sequencer's without its token. */
export function formatBinding(value: FenceBinding): string {
  const b = fenceBinding(value);
  return [VERSION, b.kind, b.source.kind, b.source.id, encodeURIComponent(b.lock)].join(':');
}

/** Parse the text form `formatBinding` writes; anything else throws InvalidTokenError. */
export function parseBinding(text: string): FenceBinding {
  const [kind, sourceKind, sourceId, lock] = splitText(text, 5, 'fence binding', `${VERSION}:<kind>:<source kind>:<source id>:<name>`) as [string, string, string, string];
  try {
    return fenceBinding({ kind: kind as SequencerKind, lock, source: { kind: sourceKind, id: sourceId } });
  } catch (error) {
    throw new InvalidTokenError(`not a fence binding: ${(error as Error).message}`, { cause: error });
  }
}

/** The fields after the version, the last one (the name) percent-decoded in its one canonical spelling. */
function splitText(text: string, count: number, what: string, format: string): string[] {
  if (typeof text !== 'string') throw new InvalidTokenError(`a ${what} must be a string, got ${typeof text}`);
  if (text.length > 4 * MAX_NAME) throw new InvalidTokenError(`a ${what} is at most 4096 characters`);
  const parts = text.split(':');
  if (parts.length !== count || parts[0] !== VERSION) throw new InvalidTokenError(`not a ${what} (${format}): ${preview(text)}`);
  const encodedName = parts[count - 1] as string;
  let name: string;
  try {
    name = decodeURIComponent(encodedName);
  } catch {
    throw new InvalidTokenError(`a ${what}'s name is not valid percent-encoding: ${preview(text)}`);
  }
  // One spelling per value: `%2f`, `%41` or a raw character encodeURIComponent would escape are refused.
  if (encodeURIComponent(name) !== encodedName) throw new InvalidTokenError(`a ${what}'s name is not in canonical percent-encoding: ${preview(text)}`);
  return [...parts.slice(1, count - 1), name];
}

function checkKind(kind: unknown): SequencerKind {
  if (typeof kind !== 'string' || !KINDS.has(kind)) throw new InvalidArgumentError(`a sequencer's kind is one of ${[...KINDS].map((k) => `'${k}'`).join(', ')}, got ${describe(kind)}`);
  return kind as SequencerKind;
}

function checkName(name: unknown): string {
  assertLockName(name);
  return name;
}

/**
 * Throws InvalidArgumentError unless `name` is a name any sequencer can
 * carry: a string of 1..1024 UTF-16 code units, without NUL, and
 * well-formed Unicode (no lone surrogate: it has no UTF-8 form, so a
 * server would store U+FFFD instead, and two names such as "\ud800" and
 * "\udc00" would become one lock). Every source's name check calls this
 * before its own rules and before any I/O, so a granted lock's `sequencer`
 * never throws for its name; a LockSource of your own can do the same.
 */
export function assertLockName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME) {
    throw new InvalidArgumentError(`a lock name must be a string of 1..${MAX_NAME} characters, got ${describe(name)}`);
  }
  if (name.includes('\0')) throw new InvalidArgumentError('a lock name must not contain NUL');
  const surrogate = LONE_SURROGATE.exec(name);
  if (surrogate !== null) {
    const unit = name.charCodeAt(surrogate.index).toString(16);
    throw new InvalidArgumentError(`a lock name must be well-formed Unicode: a lone surrogate \\u${unit} at index ${surrogate.index} of ${describe(name)}`);
  }
}

function checkSource(source: unknown): SourceIdentity {
  if (typeof source !== 'object' || source === null) throw new InvalidArgumentError('a sequencer\'s source must be { kind, id }');
  const { kind, id } = source as { kind?: unknown; id?: unknown };
  if (typeof kind !== 'string' || !SOURCE_KIND.test(kind)) throw new InvalidArgumentError(`a source kind is lowercase letters, digits and -, got ${describe(kind)}`);
  if (typeof id !== 'string' || !SOURCE_ID.test(id)) throw new InvalidArgumentError(`a source id is 1..128 of A-Z a-z 0-9 _ -, got ${describe(id)}`);
  return Object.freeze({ kind, id });
}

function describe(value: unknown): string {
  if (typeof value === 'string') return preview(value);
  return value === null ? 'null' : typeof value;
}

function preview(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
}
