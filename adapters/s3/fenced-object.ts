// Fenced writes to S3 objects: compare the key's token with ours, then write
// with a precondition that the key has not changed since we compared
// (conditional-write.ts), in one of two layouts:
//
//   'in-place' (the default): the object carries its own fence in its
//      metadata and is overwritten conditionally on its ETag. Sound only when
//      every write's body is unique (carries the token or a write id): the
//      ETag hashes the bytes, and a body that repeats an earlier version lets
//      a paused holder's PUT through, putting the fence back (in-place.ts). A
//      body equal to the current one is refused (RepeatedBodyError).
//   'pointer': immutable data objects, one per write, plus a small pointer at
//      the key whose bytes are unique per write; sound for any body
//      (pointer-write.ts). Readers follow the pointer; collectGarbage removes
//      data objects no pointer can name any more.
//
// A key is kept in one layout: a write of the other layout is refused
// (LayoutMismatchError), so one layout's fence is never hidden from the
// other's writers. fencedGetObject and readFence read either. Keys containing
// `.fencekeeper/` (a pointer's data prefix) take no fenced write at all
// (InvalidArgumentError, before any request): the collector removes objects
// there, and a fence must never be among them.
//
// Objects and metadata (fail closed):
//   - An object with no fence metadata was written without fencing; any token
//     may overwrite it, in either layout (conditionally, like any other).
//   - An object whose `fencing-token` is not a valid token, or a pointer that
//     does not parse, is never overwritten: InvalidTokenError or
//     CorruptFenceError naming the object. An operator must repair or remove it.
//
// Deletes keep the fence: fencedDeleteObject writes a tombstone (in place: an
// object with a body unique to that delete; in the pointer layout: a pointer
// naming no data) carrying the token. RGW 16 ignores If-Match on DELETE, and a
// real DELETE would erase the high-water mark. fencedGetObject answers null
// for a tombstone; readFence still reports its token.
import type { PutObjectCommandInput, S3Client } from '@aws-sdk/client-s3';
import { InvalidArgumentError, formatToken, resolveFencing } from '../../src/index.js';
import { fenceAdvances, refuseCheckOnly, traceS3Delete, traceS3Put } from '../../src/extend.js';
import type { FenceBinding, Fencing, FencingToken } from '../../src/index.js';
import { checkBindOption } from './binding.js';
import { conditionalWrite } from './conditional-write.js';
import type { FencedWriteOptions } from './conditional-write.js';
import { inPlacePlan } from './in-place.js';
import { TOKEN_METADATA, TOMBSTONE_METADATA, WRITE_ID_METADATA, isReservedMetadataName } from './metadata.js';
import { checkNotDataKey, checkPointerKey } from './pointer.js';
import { pointerContextOf, pointerPlan } from './pointer-write.js';
import { checkLocation, readContextOf, resourceName } from './requests.js';
import type { ObjectLocation, ReadContext } from './requests.js';
import { md5Etag } from './wire.js';

/**
 * How a key is kept. 'in-place' (the default): the object carries its own
 * fence in its metadata and is overwritten conditionally on its ETag; sound
 * only when every write's body is unique (a body equal to the current one is
 * refused with RepeatedBodyError). 'pointer': one immutable data object per
 * write plus a small pointer at the key; sound for any body, readers follow
 * the pointer, and collectGarbage removes data objects no pointer names. A key
 * is kept in one layout: a write of the other is refused (LayoutMismatchError).
 */
export type ObjectLayout = 'in-place' | 'pointer';

/** fencedPutObject's and fencedDeleteObject's options: the `layout` ('in-place' or 'pointer'), `bind`, and those of every write. */
export interface FencedObjectOptions extends FencedWriteOptions {
  /** Default 'in-place'. Use 'pointer' wherever two writes may store the same bytes. */
  readonly layout?: ObjectLayout;
  /**
   * Bind the key's fence to this lock (a FenceBinding: the lock's kind, name and source) with this write: the
   * write must present a sequencer of that lock. From then on the key takes
   * only that lock's sequencers (SequencerMismatchError for any other lock's
   * and for bare tokens). Binding again to the same lock is a no-op. Keys
   * never bound take bare tokens and sequencers alike.
   */
  readonly bind?: FenceBinding;
  /**
   * Only `true` (the default) is taken: S3 fences have no check-only mode
   * (`false` is an InvalidArgumentError, nothing sent). The object carries
   * its own mark, so a write that does not advance would have to write back
   * the mark it read; after a lost reply or a lost race the adapter tells
   * its own write from another's by the token on the object, and readers
   * writing one old mark could not be told apart.
   */
  readonly advance?: true;
}

/** fencedPutObject's input: PutObject's (Bucket, Key, a buffered Body, metadata) and the `token` (a token, a sequencer or CURRENT_LOCK). */
export type FencedPutObjectInput = Omit<PutObjectCommandInput, 'IfMatch' | 'IfNoneMatch' | 'Body'> & {
  /**
   * The holder's fencing token (the lock's `token`), its sequencer (the
   * lock's `sequencer`: needed for a bound key), the Lock or Leadership
   * itself (its sequencer; LockLostError before any request once it is not
   * held), or CURRENT_LOCK (the lock of the enclosing withLock).
   */
  readonly token: Fencing;
  /**
   * A body the adapter can send again after a lost race: string, Buffer or
   * Uint8Array. Streams are refused (InvalidArgumentError): buffer them first.
   */
  readonly Body?: string | Uint8Array;
};

/** What a fenced S3 write resolves to: the ETag, the token, and for a pointer the data object's key. */
export interface FencedWriteResult {
  /** The ETag of the object holding the body, as S3 returned it (quoted); for a pointer: the data object's. */
  readonly etag: string;
  readonly token: FencingToken;
  /** Pointer layout only: the key of the data object the pointer now names. */
  readonly dataKey?: string;
}

/** fencedDeleteObject's input: Bucket, Key and the `token`; the key is replaced by a tombstone that keeps the fence. */
export type FencedDeleteObjectInput = ObjectLocation & {
  /** As FencedPutObjectInput.token. */
  readonly token: Fencing;
  readonly ExpectedBucketOwner?: string | undefined;
};

/**
 * Write an object only if `token` is at least the key's current fencing
 * token. Throws StaleTokenError (nothing written) when the key holds a larger
 * token; InvalidTokenError for a bad `token` or an object whose stored token is
 * corrupt; CorruptFenceError for a pointer that does not parse;
 * LayoutMismatchError for a key kept in the other layout; RepeatedBodyError
 * (in place) for a body equal to the current object's; InvalidArgumentError
 * for unusable input (a key containing `.fencekeeper/` too); UnknownOutcomeError
 * when a 5xx or lost reply could not be settled by reading the key back, or
 * when contention outlasted `maxAttempts`. S3 errors (NoSuchBucket, AccessDenied, ...) pass through.
 */
export async function fencedPutObject(
  client: S3Client,
  input: FencedPutObjectInput,
  options: FencedObjectOptions = {},
): Promise<FencedWriteResult> {
  const { fencing, token, location, layout, bind, resource } = checkWrite(input, options);
  checkBody(input.Body);
  checkNoConditions(input);
  for (const name of Object.keys(input.Metadata ?? {})) {
    if (isReservedMetadataName(name)) {
      throw new InvalidArgumentError(`metadata ${JSON.stringify(name)} is reserved for the fence`);
    }
  }
  const { token: _token, Metadata, ...rest } = input;
  const readContext = readContextOf(input);
  return traceS3Put(resource, token, layout, async () => {
    if (layout === 'pointer') {
      checkPointerKey(location.Key);
      const pointerContext = pointerContextOf(input);
      const data: PutObjectCommandInput = { ...rest, ...(Metadata === undefined ? {} : { Metadata }) };
      const plan = pointerPlan(client, { resource, location, token, fencing, bind, readContext, pointerContext, signal: options.signal, data });
      await conditionalWrite(client, plan, options);
      const written = plan.written();
      return { etag: written?.etag ?? '', token, ...(written === undefined ? {} : { dataKey: written.dataKey }) };
    }

    const plan = inPlacePlan(client, {
      resource, location, token, fencing, bind, context: readContext, signal: options.signal, tombstone: false,
      bodyEtag: md5Etag(input.Body),
      makeInput: (writeId) => ({
        ...rest,
        ...location,
        Metadata: { ...Metadata, [TOKEN_METADATA]: formatToken(token), [WRITE_ID_METADATA]: writeId },
      }),
    });
    return { etag: await conditionalWrite(client, plan, options), token };
  });
}

/**
 * Delete an object without losing its fence: overwrite it (conditionally, as
 * fencedPutObject does) with a tombstone carrying `token`. Afterwards a smaller
 * token is refused, an equal or larger one may write the key again, and
 * fencedGetObject answers null. Deleting a missing key creates a tombstone
 * too. Pass the key's layout; in the pointer layout the data objects stay
 * until collectGarbage removes them.
 */
export async function fencedDeleteObject(
  client: S3Client,
  input: FencedDeleteObjectInput,
  options: FencedObjectOptions = {},
): Promise<FencedWriteResult> {
  const { fencing, token, location, layout, bind, resource } = checkWrite(input, options);
  const context: ReadContext = input.ExpectedBucketOwner === undefined ? {} : { ExpectedBucketOwner: input.ExpectedBucketOwner };
  return traceS3Delete(resource, token, layout, async () => {
    if (layout === 'pointer') {
      checkPointerKey(location.Key);
      const plan = pointerPlan(client, { resource, location, token, fencing, bind, readContext: context, pointerContext: context, signal: options.signal, data: undefined });
      return { etag: await conditionalWrite(client, plan, options), token };
    }

    const plan = inPlacePlan(client, {
      resource, location, token, fencing, bind, context, signal: options.signal, tombstone: true, bodyEtag: undefined,
      makeInput: (writeId) => ({
        ...context,
        ...location,
        // Unique bytes, so two tombstones never share an ETag.
        Body: `fencekeeper tombstone token=${formatToken(token)} write=${writeId}\n`,
        ContentType: 'text/plain; charset=utf-8',
        Metadata: { [TOKEN_METADATA]: formatToken(token), [WRITE_ID_METADATA]: writeId, [TOMBSTONE_METADATA]: '1' },
      }),
    });
    return { etag: await conditionalWrite(client, plan, options), token };
  });
}

function checkLayoutOption(layout: unknown): ObjectLayout {
  if (layout === undefined) return 'in-place';
  if (layout === 'in-place' || layout === 'pointer') return layout;
  throw new InvalidArgumentError(`layout must be 'in-place' or 'pointer', got ${typeof layout === 'string' ? JSON.stringify(layout.slice(0, 40)) : typeof layout}`);
}

// A lost race means sending the body again, so it must be replayable; and a
// stream of unknown length would get a 411 from the server only after the read.
function checkBody(body: unknown): void {
  if (body === undefined || typeof body === 'string' || body instanceof Uint8Array) return;
  const kind = typeof body === 'object' && body !== null ? (body.constructor?.name ?? 'object') : typeof body;
  throw new InvalidArgumentError(
    `fencedPutObject needs a body it can resend after a lost race (string, Buffer or Uint8Array), got ${kind}; buffer a stream first`,
  );
}

// Why S3 fences refuse { advance: false } (see FencedObjectOptions.advance).
const NO_CHECK_ONLY = 'the object carries its own mark, so a write that does not advance would write back the mark it read, and after a lost reply or race the adapter recognises its own write by the token on the object: readers writing one old mark could not be told apart';

function checkNoConditions(input: object): void {
  for (const field of ['IfMatch', 'IfNoneMatch'] as const) {
    if ((input as Record<string, unknown>)[field] !== undefined) {
      throw new InvalidArgumentError(`${field} is set by the fence; do not pass it to fencedPutObject`);
    }
  }
}

/** The checks every fenced write starts with, before any request: the token (or sequencer), the key, the layout and the binding. */
function checkWrite(input: { readonly Bucket?: unknown; readonly Key?: unknown }, options: FencedObjectOptions) {
  const fencing = resolveFencing((input as { token?: unknown }).token);
  const location = checkLocation(input);
  checkNotDataKey(location.Key);
  const layout = checkLayoutOption(options.layout);
  const bind = checkBindOption(options.bind, fencing);
  refuseCheckOnly(fenceAdvances(options, 'an S3 fenced write'), 'an S3 fenced write', NO_CHECK_ONLY);
  return { fencing, token: fencing.token, location, layout, bind, resource: resourceName(location.Bucket, location.Key) };
}
