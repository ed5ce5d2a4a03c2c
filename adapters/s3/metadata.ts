// The fence as it is stored on an S3 object: three user-metadata entries
// (x-amz-meta-*). S3 lower-cases metadata names on the way back, and RGW does
// too, so every name here is lower case and lookups ignore case.
import { InvalidTokenError, parseToken } from '../../src/index.js';
import type { FencingToken } from '../../src/index.js';

/** The object's fencing token, decimal (x-amz-meta-fencing-token). */
export const TOKEN_METADATA = 'fencing-token';
/** A random id per fencedPutObject/fencedDeleteObject call: tells, after a lost reply, whether our PUT landed. */
export const WRITE_ID_METADATA = 'fencing-write';
/** '1' on a tombstone: the object was deleted by a fenced delete and only keeps the fence. */
export const TOMBSTONE_METADATA = 'fencing-tombstone';

const RESERVED = new Set([TOKEN_METADATA, WRITE_ID_METADATA, TOMBSTONE_METADATA]);

export function isReservedMetadataName(name: string): boolean {
  return RESERVED.has(name.toLowerCase());
}

/** What one HEAD (or GET) of an object says about its fence. */
export interface StoredFence {
  /** The ETag exactly as S3 returned it (quoted). */
  readonly etag: string;
  /** null: the object was written without fencing; any token may overwrite it. */
  readonly token: FencingToken | null;
  readonly writeId: string | null;
  readonly tombstone: boolean;
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
 * Read the fence from an object's metadata. Metadata that is present but not a
 * valid token fails closed: InvalidTokenError naming the object, so the caller
 * never overwrites (or trusts) an object whose fence it cannot read.
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
  return {
    etag,
    token,
    writeId: lookup(metadata, WRITE_ID_METADATA) ?? null,
    tombstone: lookup(metadata, TOMBSTONE_METADATA) === '1',
  };
}

/** True when a GetObject/HeadObject answer is a fenced delete's tombstone. */
export function isTombstone(output: { readonly Metadata?: Record<string, string> | undefined }): boolean {
  return lookup(output.Metadata, TOMBSTONE_METADATA) === '1';
}
