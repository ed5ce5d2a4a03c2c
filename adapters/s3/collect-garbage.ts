// Removing the pointer layout's superseded data objects, and only those no
// pointer can ever name again.
//
// Age alone says nothing: the current data object may be the oldest one (no
// write for a month), and a writer paused between writing its data object and
// moving the pointer may resume at any time and name its object. So the
// pointer carries a generation, advanced only here, and writers name their
// data objects with the generation of the pointer they read:
//   - A writer's pointer PUT is conditioned on the pointer it read, whose
//     bytes never repeat; once the collector has advanced the generation,
//     that pointer is gone for good, so a data object of an older generation
//     can never be named again (its writer, if it is still trying, reads the
//     new pointer and writes a fresh data object in the new generation).
//   - When the collector starts generation g, it records the data object the
//     pointer names at that moment ("carried" into g). Any other data object of
//     an older generation was superseded before g began.
// A call therefore removes the data objects of older generations than the
// pointer's, except the current and the carried one, once the generation has
// lasted graceMs (so each was unreferenced for at least that long: a reader
// that read an older pointer has had time to fetch its body; and a reader that
// finds its data object gone reads the pointer again anyway). Then it starts
// the next generation. A superseded object is removed by the second call that
// comes at least graceMs after the one before; call it periodically.
//
// A name under the key's data prefix is not proof of a data object: the
// prefix is an ordinary part of the bucket, and anything may have been put
// there (by hand, or, before fenced writes into a data prefix were refused, an
// object carrying its own fence, which must never be removed: its fence would
// go back). So each object the names single out is HEADed first, and removed
// only if its metadata marks it as the data object its name spells (layout
// 'data', the name's token and write id; the name alone ties it to this key,
// as no other key's data prefix can contain it). The cost: one LIST page per
// thousand objects under the prefix, plus a HEAD and a DELETE per object
// removed; names that are current, carried or of the current generation cost
// nothing more. (A LIST does not return user metadata, so nothing cheaper
// tells; and a data object never changes once written, so the HEAD's answer
// still holds at the DELETE.)
//
// graceMs is measured on the wall clocks of the processes that call this
// (the generation's start is stored in the pointer): clock skew between them
// shortens or lengthens a reader's grace, never a writer's safety, which rests
// on the generations alone.
import { randomUUID } from 'node:crypto';
import { debuglog } from 'node:util';
import { DeleteObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import type { S3Client } from '@aws-sdk/client-s3';
import { CorruptFenceError, InvalidArgumentError, InvalidTokenError, LayoutMismatchError, UnknownOutcomeError } from '../../src/index.js';
import { DEFAULT_MAX_ATTEMPTS } from './conditional-write.js';
import { pointerMetadata } from './metadata.js';
import type { StoredFence } from './metadata.js';
import { checkPointerKey, dataPrefix, parseDataName, pointerBody, sameData } from './pointer.js';
import type { DataName, PointerState } from './pointer.js';
import { pointerContextOf } from './pointer-write.js';
import type { PointerWriteContext } from './pointer-write.js';
import { checkLocation, checkMaxAttempts, describeError, headFence, readContextOf, resourceName, sendOptions } from './requests.js';
import type { ObjectLocation, ReadContext } from './requests.js';
import { addCondition, isConditionFailure, isMissingKey, isUnknownOutcome } from './wire.js';

const debug = debuglog('fencekeeper');

/** Default grace: ten minutes. */
export const DEFAULT_GRACE_MS = 10 * 60 * 1000;
/** Deletes in flight at once. */
const DELETE_CONCURRENCY = 8;

/** collectGarbage's options: how long a data object must have been unreferenced before it is removed (`graceMs`, default ten minutes), an abort signal, and how many attempts under contention. */
export interface CollectGarbageOptions {
  /** How long a superseded data object is kept for readers that still hold an older pointer (default ten minutes). */
  readonly graceMs?: number;
  readonly signal?: AbortSignal;
  /** Attempts to start the next generation when writers keep moving the pointer (default 20). */
  readonly maxAttempts?: number;
}

/** What collectGarbage removed, and the pointer's generation after it. */
export interface CollectGarbageResult {
  /** The data objects removed by this call. */
  readonly deleted: readonly string[];
  /** The pointer's generation after this call; null when the key does not exist. */
  readonly generation: number | null;
}

/**
 * Remove the superseded data objects of a key kept in the pointer layout (see
 * above for which, and when). Needs no token: it never changes the fence.
 * Throws LayoutMismatchError for a key written in place, and what a pointer
 * read throws for a corrupt pointer.
 */
export async function collectGarbage(
  client: S3Client,
  input: ObjectLocation & PointerWriteContext,
  options: CollectGarbageOptions = {},
): Promise<CollectGarbageResult> {
  const { Bucket, Key } = checkLocation(input);
  checkPointerKey(Key);
  const graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
  if (!Number.isSafeInteger(graceMs) || graceMs < 0) {
    throw new InvalidArgumentError(`graceMs must be a non-negative integer, got ${String(graceMs)}`);
  }
  const maxAttempts = checkMaxAttempts(options.maxAttempts, DEFAULT_MAX_ATTEMPTS);
  const { signal } = options;
  const resource = resourceName(Bucket, Key);
  const readContext = readContextOf(input);
  const read = (): Promise<StoredFence | null> => headFence(client, Bucket, Key, readContext, signal);

  let pointer = await read();
  if (pointer === null) return { deleted: [], generation: null };
  if (pointer.layout !== 'pointer' || pointer.pointer === null) {
    throw new LayoutMismatchError(resource, 'pointer', pointer.layout, `${resource} is not kept in the pointer layout; there is nothing to collect`);
  }
  const state = pointer.pointer;
  if (Date.now() - state.generationSince < graceMs) return { deleted: [], generation: state.generation };

  const deleted = await removeSuperseded(client, Bucket, Key, state, readContext, signal);

  // Start the next generation: the same token and data, a new pointer write
  // (so a writer that read the old pointer fails its If-Match and reads this one).
  const pointerContext = pointerContextOf(input);
  for (let attempts = 1; ; attempts += 1) {
    if (pointer === null || pointer.layout !== 'pointer' || pointer.pointer === null || pointer.token === null) {
      return { deleted, generation: null }; // removed or rewritten behind our back: nothing to advance
    }
    const current: PointerState = pointer.pointer;
    if (current.generation > state.generation) return { deleted, generation: current.generation }; // another collector did
    const next: PointerState = { generation: current.generation + 1, generationSince: Date.now(), data: current.data, carried: current.data };
    const writeId = randomUUID();
    const command = new PutObjectCommand({
      ...pointerContext,
      Bucket,
      Key,
      Body: pointerBody(pointer.token, writeId, next),
      ContentType: 'application/json',
      // The binding stays with the fence: a rewrite by the collector never unbinds the key.
      Metadata: pointerMetadata(pointer.token, writeId, next, pointer.binding),
    });
    const wire = addCondition(command, { ifMatch: pointer.etag });
    try {
      await client.send(command, sendOptions(signal));
      return { deleted, generation: next.generation };
    } catch (error) {
      const lostRace = isConditionFailure(error) || isMissingKey(error);
      if (!lostRace && !(wire.sent() && isUnknownOutcome(error))) throw error;
      pointer = await read();
      if (pointer?.writeId === writeId) return { deleted, generation: next.generation };
      if (attempts >= maxAttempts) {
        throw new UnknownOutcomeError(`${resource}: could not start generation ${next.generation} in ${attempts} attempts, writers kept moving the pointer (last: ${describeError(error)}); the next call tries again`, { cause: error });
      }
    }
  }
}

/** Delete the data objects of older generations than `state`'s, except the current and the carried one. */
async function removeSuperseded(
  client: S3Client,
  Bucket: string,
  Key: string,
  state: PointerState,
  readContext: ReadContext,
  signal: AbortSignal | undefined,
): Promise<string[]> {
  const { ExpectedBucketOwner } = readContext;
  const prefix = dataPrefix(Key);
  const doomed: { readonly key: string; readonly name: DataName }[] = [];
  let ContinuationToken: string | undefined;
  do {
    const page = await client.send(new ListObjectsV2Command({
      Bucket,
      Prefix: prefix,
      ...(ContinuationToken === undefined ? {} : { ContinuationToken }),
      ...(ExpectedBucketOwner === undefined ? {} : { ExpectedBucketOwner }),
    }), sendOptions(signal));
    for (const object of page.Contents ?? []) {
      const key = object.Key;
      if (key === undefined) continue;
      const name = parseDataName(key.slice(prefix.length));
      if (name === null) {
        debug('s3 %s: %s is not a data object name; left alone', resourceName(Bucket, Key), key);
        continue;
      }
      if (name.generation < state.generation && !sameData(name, state.data) && !sameData(name, state.carried)) doomed.push({ key, name });
    }
    ContinuationToken = page.IsTruncated === true ? page.NextContinuationToken : undefined;
  } while (ContinuationToken !== undefined);

  const deleted: string[] = [];
  for (let i = 0; i < doomed.length; i += DELETE_CONCURRENCY) {
    await Promise.all(doomed.slice(i, i + DELETE_CONCURRENCY).map(async ({ key, name }) => {
      if (!(await isDataObject(client, Bucket, Key, key, name, readContext, signal))) return;
      await client.send(new DeleteObjectCommand({ Bucket, Key: key, ...(ExpectedBucketOwner === undefined ? {} : { ExpectedBucketOwner }) }), sendOptions(signal));
      deleted.push(key);
    }));
  }
  return deleted;
}

/** Whether the object at `key` is the data object `name` spells, by its metadata (false when it is gone). */
async function isDataObject(
  client: S3Client,
  Bucket: string,
  Key: string,
  key: string,
  name: DataName,
  readContext: ReadContext,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  let fence: StoredFence | null;
  try {
    fence = await headFence(client, Bucket, key, readContext, signal);
  } catch (error) {
    // Fence metadata that does not parse is not a data object we wrote.
    if (!(error instanceof InvalidTokenError || error instanceof CorruptFenceError)) throw error;
    debug('s3 %s: %s carries unreadable fence metadata (%s); left alone', resourceName(Bucket, Key), key, describeError(error));
    return false;
  }
  if (fence === null) return false; // removed since the listing (another collector)
  if (fence.layout === 'data' && fence.token === name.token && fence.writeId === name.writeId) return true;
  debug('s3 %s: %s is named like a data object but its metadata says %s (token %s); left alone', resourceName(Bucket, Key), key, fence.layout, String(fence.token));
  return false;
}
