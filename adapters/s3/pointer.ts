// The pointer layout's names and bytes: where a key's data objects live, how
// one is named, and the pointer's body. No requests here.
//
// A key K kept in the pointer layout is two kinds of object:
//   - data objects under `K.fencekeeper/`, one per write, named
//     `<token, 19 digits>-<generation>-<write id>` and created with
//     If-None-Match: *, so a data object's bytes never change once written;
//   - the pointer at K itself: a small object whose metadata names the current
//     data object (or marks a fenced delete) and carries the token. Its body
//     repeats that and adds the write id of the pointer write, so no two
//     pointer writes ever store the same bytes, and their ETags (the MD5 of
//     the bytes for a single-part PUT) never repeat: an If-Match on the
//     pointer can only pass if nobody wrote it since it was read.
import { InvalidArgumentError, MAX_TOKEN, formatToken } from '../../src/index.js';
import type { FencingToken } from '../../src/index.js';

/** What follows a key to form the prefix of its data objects. */
export const DATA_SUFFIX = '.fencekeeper/';

/** Longest data name: 19 token digits, a 16-digit generation, a UUID, two dashes. */
const MAX_DATA_NAME_BYTES = 19 + 1 + 16 + 1 + 36;
/** S3's limit on a key's length (UTF-8 bytes). */
const MAX_KEY_BYTES = 1024;
/** The longest key the pointer layout accepts: its data keys must fit S3's limit too. */
export const MAX_POINTER_KEY_BYTES = MAX_KEY_BYTES - DATA_SUFFIX.length - MAX_DATA_NAME_BYTES;

const TOKEN_DIGITS = MAX_TOKEN.toString().length; // 19: zero-padded, names sort in token order
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const DATA_NAME = new RegExp(`^([0-9]{${TOKEN_DIGITS}})-([1-9][0-9]{0,15})-(${UUID})$`);
const WRITE_ID = new RegExp(`^${UUID}$`);

/** One data object's identity, as its name spells it. */
export interface DataName {
  readonly token: FencingToken;
  /** The pointer's generation when the writer read it (see the collector). */
  readonly generation: number;
  readonly writeId: string;
}

/** What a pointer says besides its token (kept in its metadata). */
export interface PointerState {
  /**
   * Advanced only by the garbage collector. A writer names its data object
   * with the generation of the pointer it read, so a data object of an older
   * generation than the pointer's can never be named by a pointer again.
   */
  readonly generation: number;
  /** When the collector began this generation (ms since the epoch, the collector's clock). */
  readonly generationSince: number;
  /** The current data object; null for a fenced delete (a tombstone pointer). */
  readonly data: DataName | null;
  /** The data object the pointer named when this generation began, if any. */
  readonly carried: DataName | null;
}

export function dataPrefix(Key: string): string {
  return `${Key}${DATA_SUFFIX}`;
}

export function formatDataName(name: DataName): string {
  return `${formatToken(name.token).padStart(TOKEN_DIGITS, '0')}-${name.generation}-${name.writeId}`;
}

/** null for anything that is not a data name this adapter wrote. */
export function parseDataName(text: string): DataName | null {
  const match = DATA_NAME.exec(text);
  if (match === null) return null;
  const token = BigInt(match[1]!);
  const generation = Number(match[2]);
  if (token < 1n || token > MAX_TOKEN || !Number.isSafeInteger(generation)) return null;
  return { token, generation, writeId: match[3]! };
}

export function isWriteId(text: string): boolean {
  return WRITE_ID.test(text);
}

export function dataKey(Key: string, name: DataName): string {
  return `${dataPrefix(Key)}${formatDataName(name)}`;
}

export function sameData(a: DataName | null, b: DataName | null): boolean {
  if (a === null || b === null) return a === b;
  return a.token === b.token && a.generation === b.generation && a.writeId === b.writeId;
}

/** The pointer's bytes: everything its metadata says plus this write's id, so they are unique per write. */
export function pointerBody(token: FencingToken, writeId: string, state: PointerState): string {
  return `${JSON.stringify({
    fencekeeper: 'pointer',
    token: formatToken(token),
    write: writeId,
    data: state.data === null ? null : formatDataName(state.data),
    tombstone: state.data === null,
    generation: state.generation,
    generationSince: state.generationSince,
    carried: state.carried === null ? null : formatDataName(state.carried),
  })}\n`;
}

/**
 * A key the pointer layout can keep: its data keys must fit S3's key limit,
 * and it must not itself lie inside another key's data objects.
 */
export function checkPointerKey(Key: string): void {
  if (Buffer.byteLength(Key, 'utf8') > MAX_POINTER_KEY_BYTES) {
    throw new InvalidArgumentError(
      `Key is too long for the pointer layout (at most ${MAX_POINTER_KEY_BYTES} bytes, so that its data keys fit S3's ${MAX_KEY_BYTES})`,
    );
  }
  checkNotDataKey(Key);
}

/**
 * A key any fenced write may target, in either layout: not inside a data
 * prefix. Every key containing `.fencekeeper/` lies in the data prefix of the
 * key before it, whose collector would take an object there for one of its
 * data objects; and an object that carries its own fence must never be where
 * a collector removes things (its fence would go with it).
 */
export function checkNotDataKey(Key: string): void {
  const at = Key.indexOf(DATA_SUFFIX);
  if (at === -1) return;
  throw new InvalidArgumentError(
    `Key ${JSON.stringify(Key.slice(0, 200))} lies inside the data prefix of ${JSON.stringify(Key.slice(0, Math.min(at, 200)))}: keys containing ${JSON.stringify(DATA_SUFFIX)} are reserved for the pointer layout's data objects; no fenced write goes there`,
  );
}
