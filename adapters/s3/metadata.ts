// The fence as it is stored on an S3 object: user-metadata entries
// (x-amz-meta-*). S3 lower-cases metadata names on the way back, and RGW does
// too, so every name here is lower case and lookups ignore case.
import { CorruptFenceError, InvalidTokenError, formatToken, parseToken } from '../../src/index.js';
import type { FencingToken } from '../../src/index.js';
import type { FenceBinding } from '../../src/index.js';
import { BINDING_METADATA, bindingMetadata, parseBinding } from './binding.js';
import { formatDataName, isWriteId, parseDataName } from './pointer.js';
import type { DataName, PointerState } from './pointer.js';

/** The object's fencing token, decimal (x-amz-meta-fencing-token). */
export const TOKEN_METADATA = 'fencing-token';
/** A random id per fenced write: tells, after a lost reply, whether our PUT landed. */
export const WRITE_ID_METADATA = 'fencing-write';
/** '1' on a tombstone: the object was deleted by a fenced delete and only keeps the fence. */
export const TOMBSTONE_METADATA = 'fencing-tombstone';
/** 'pointer' on a pointer, 'data' on a pointer's data object; absent on an object written in place. */
export const LAYOUT_METADATA = 'fencing-layout';
/** On a pointer: the name of the data object it points to (absent on a tombstone pointer). */
export const DATA_METADATA = 'fencing-data';
/** On a pointer: the collector's generation, its start, and the data object current at its start. */
export const GENERATION_METADATA = 'fencing-generation';
export const GENERATION_SINCE_METADATA = 'fencing-generation-since';
export const CARRIED_METADATA = 'fencing-carried';

const RESERVED = new Set([
  TOKEN_METADATA, WRITE_ID_METADATA, TOMBSTONE_METADATA, LAYOUT_METADATA,
  DATA_METADATA, GENERATION_METADATA, GENERATION_SINCE_METADATA, CARRIED_METADATA, BINDING_METADATA,
]);

export function isReservedMetadataName(name: string): boolean {
  return RESERVED.has(name.toLowerCase());
}

/**
 * How a key is kept: 'unfenced' (no fence metadata: written without fencing),
 * 'in-place' (the object carries its own fence), 'pointer', or 'data' (a
 * pointer's immutable data object).
 */
export type StoredLayout = 'unfenced' | 'in-place' | 'pointer' | 'data';

/** What one HEAD (or GET) of an object says about its fence. */
export interface StoredFence {
  /** The ETag exactly as S3 returned it (quoted). */
  readonly etag: string;
  readonly layout: StoredLayout;
  /** null: the object was written without fencing; any token may overwrite it. */
  readonly token: FencingToken | null;
  readonly writeId: string | null;
  readonly tombstone: boolean;
  /** Only for layout 'pointer'. */
  readonly pointer: PointerState | null;
  /** The lock the key's fence is bound to (./binding.ts); null: never bound. */
  readonly binding: FenceBinding | null;
}

function lookup(metadata: Record<string, string> | undefined, name: string): string | undefined {
  if (metadata === undefined) return undefined;
  const exact = metadata[name];
  if (exact !== undefined) return exact;
  for (const [key, value] of Object.entries(metadata)) {
    if (key.toLowerCase() === name) return value;
  }
  return undefined;
}

/**
 * Read the fence from an object's metadata. Metadata that is present but not
 * valid fails closed: InvalidTokenError for a token that does not parse,
 * CorruptFenceError for a pointer that does not, both naming the object, so
 * the caller never overwrites (or trusts) an object whose fence it cannot read.
 */
export function fenceFromMetadata(
  resource: string,
  etag: string,
  metadata: Record<string, string> | undefined,
): StoredFence {
  const text = lookup(metadata, TOKEN_METADATA);
  let token: FencingToken | null = null;
  if (text !== undefined) {
    try {
      token = parseToken(text);
    } catch (cause) {
      throw new InvalidTokenError(
        `${resource} carries ${TOKEN_METADATA} metadata that is not a token; refusing to overwrite or trust it (fail closed)`,
        { cause },
      );
    }
  }
  const writeId = lookup(metadata, WRITE_ID_METADATA) ?? null;
  const tombstone = lookup(metadata, TOMBSTONE_METADATA) === '1';
  const marker = lookup(metadata, LAYOUT_METADATA);
  const boundText = lookup(metadata, BINDING_METADATA);
  const binding = boundText === undefined ? null : parseBinding(resource, boundText);
  if (marker === undefined) {
    return { etag, layout: token === null && !tombstone ? 'unfenced' : 'in-place', token, writeId, tombstone, pointer: null, binding };
  }
  const corrupt = (what: string): CorruptFenceError =>
    new CorruptFenceError(resource, `${resource} is marked ${LAYOUT_METADATA}=${JSON.stringify(marker.slice(0, 40))} but ${what}; refusing to overwrite or trust it (fail closed)`);
  if (token === null) throw corrupt(`has no ${TOKEN_METADATA}`);
  if (writeId === null || !isWriteId(writeId)) throw corrupt(`its ${WRITE_ID_METADATA} is missing or malformed`);
  if (marker === 'data') return { etag, layout: 'data', token, writeId, tombstone: false, pointer: null, binding: null };
  if (marker !== 'pointer') throw corrupt('that is not a layout this adapter knows');
  return { etag, layout: 'pointer', token, writeId, tombstone, pointer: pointerFromMetadata(token, tombstone, metadata, corrupt), binding };
}

function pointerFromMetadata(
  token: FencingToken,
  tombstone: boolean,
  metadata: Record<string, string> | undefined,
  corrupt: (what: string) => CorruptFenceError,
): PointerState {
  const generation = decimal(lookup(metadata, GENERATION_METADATA), 1);
  if (generation === null) throw corrupt(`its ${GENERATION_METADATA} is missing or malformed`);
  const generationSince = decimal(lookup(metadata, GENERATION_SINCE_METADATA), 0);
  if (generationSince === null) throw corrupt(`its ${GENERATION_SINCE_METADATA} is missing or malformed`);
  const dataText = lookup(metadata, DATA_METADATA);
  let data: DataName | null = null;
  if (tombstone) {
    if (dataText !== undefined) throw corrupt(`it is a tombstone that names a data object`);
  } else {
    data = dataText === undefined ? null : parseDataName(dataText);
    // A pointer's data object is written with the pointer's token, in a
    // generation the pointer has reached.
    if (data === null || data.token !== token || data.generation > generation) {
      throw corrupt(`its ${DATA_METADATA} is missing, malformed or does not match its token and generation`);
    }
  }
  const carriedText = lookup(metadata, CARRIED_METADATA);
  const carried = carriedText === undefined ? null : parseDataName(carriedText);
  if (carriedText !== undefined && (carried === null || carried.generation >= generation)) {
    throw corrupt(`its ${CARRIED_METADATA} is malformed`);
  }
  return { generation, generationSince, data, carried };
}

/** A decimal safe integer >= min without leading zeros, else null. */
function decimal(text: string | undefined, min: number): number | null {
  if (text === undefined || !/^(0|[1-9][0-9]{0,15})$/.test(text)) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) && value >= min ? value : null;
}

/** The metadata of a pointer write (the user's metadata lives on the data object), its binding carried along. */
export function pointerMetadata(token: FencingToken, writeId: string, state: PointerState, binding: FenceBinding | null): Record<string, string> {
  return {
    ...bindingMetadata(binding),
    [TOKEN_METADATA]: formatToken(token),
    [WRITE_ID_METADATA]: writeId,
    [LAYOUT_METADATA]: 'pointer',
    [GENERATION_METADATA]: String(state.generation),
    [GENERATION_SINCE_METADATA]: String(state.generationSince),
    ...(state.data === null ? { [TOMBSTONE_METADATA]: '1' } : { [DATA_METADATA]: formatDataName(state.data) }),
    ...(state.carried === null ? {} : { [CARRIED_METADATA]: formatDataName(state.carried) }),
  };
}

/** True when a GetObject/HeadObject answer is a fenced delete's tombstone (in place or a pointer). */
export function isTombstone(output: { readonly Metadata?: Record<string, string> | undefined }): boolean {
  return lookup(output.Metadata, TOMBSTONE_METADATA) === '1';
}
