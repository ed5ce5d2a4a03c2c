// Reads that know about the fence, in either layout: the token a key holds,
// and its current body (following a pointer to its data object).
import { GetObjectCommand } from '@aws-sdk/client-s3';
import type { GetObjectCommandInput, GetObjectCommandOutput, S3Client } from '@aws-sdk/client-s3';
import { CorruptFenceError, InvalidArgumentError, UnknownOutcomeError } from '../../src/index.js';
import type { FencingToken } from '../../src/index.js';
import { DEFAULT_MAX_ATTEMPTS } from './conditional-write.js';
import { fenceFromMetadata } from './metadata.js';
import type { StoredFence } from './metadata.js';
import { dataKey, sameData } from './pointer.js';
import type { DataName } from './pointer.js';
import {
  assertBucketExists, checkLocation, checkMaxAttempts, discardBody, headFence, readContextOf, resourceName, sendOptions,
} from './requests.js';
import type { ObjectLocation, ReadContext } from './requests.js';
import { isNotFound } from './wire.js';

/** fencedGetObject's options: an abort signal, and how many data objects to try when the pointer's was collected meanwhile. */
export interface FencedReadOptions {
  readonly signal?: AbortSignal;
  /**
   * Pointer layout: how many data objects to try when each one the pointer
   * names has been collected before it could be read (default 20).
   */
  readonly maxAttempts?: number;
}

/** What fencedGetObject returns: GetObject's output for the data (following a pointer), with the token that wrote it. */
export type FencedGetObjectOutput = GetObjectCommandOutput & { readonly token: FencingToken | null };

/**
 * GetObject fields that must apply to the body, not to a pointer: with any of
 * them set, the key is HEADed first to learn its layout.
 */
const BODY_ONLY_FIELDS = ['IfMatch', 'IfNoneMatch', 'IfModifiedSince', 'IfUnmodifiedSince', 'Range', 'PartNumber', 'VersionId'] as const;

/**
 * The key's stored fencing token, in either layout: null when the key does
 * not exist or was written without fencing. A tombstone reports the token of
 * the delete. Metadata that is not a valid token throws InvalidTokenError, a
 * pointer that does not parse CorruptFenceError (fail closed); a bucket that
 * does not exist throws InvalidArgumentError.
 */
export async function readFence(
  client: S3Client,
  input: ObjectLocation & ReadContext,
  options: { readonly signal?: AbortSignal } = {},
): Promise<FencingToken | null> {
  const { Bucket, Key } = checkLocation(input);
  const fence = await headFence(client, Bucket, Key, readContextOf(input), options.signal);
  if (fence === null) {
    await assertBucketExists(client, Bucket, options.signal);
    return null;
  }
  return fence.token;
}

/**
 * GetObject that knows about the fence: null for a missing key or a tombstone,
 * else the SDK's output plus the key's `token` (null if written unfenced).
 * A pointer is followed to its data object: the body is the version the
 * pointer named when it was read, whole; if the collector removed that data
 * object since, the pointer is read again. Corrupt fence metadata throws
 * InvalidTokenError or CorruptFenceError.
 */
export async function fencedGetObject(
  client: S3Client,
  input: GetObjectCommandInput,
  options: FencedReadOptions = {},
): Promise<FencedGetObjectOutput | null> {
  const { Bucket, Key } = checkLocation(input);
  const maxAttempts = checkMaxAttempts(options.maxAttempts, DEFAULT_MAX_ATTEMPTS);
  const { signal } = options;
  if (BODY_ONLY_FIELDS.some((field) => input[field] !== undefined)) {
    const head = await headFence(client, Bucket, Key, readContextOf(input), signal);
    if (head?.layout === 'pointer') return follow(client, input, head, maxAttempts, signal);
    return readInPlace(client, input, signal);
  }
  const output = await getOrNull(client, input, signal);
  if (output === null) return null;
  const fence = await fenceOf(output, Bucket, Key);
  if (fence.layout !== 'pointer') return answer(output, fence);
  await discardBody(output);
  return follow(client, input, fence, maxAttempts, signal);
}

async function readInPlace(client: S3Client, input: GetObjectCommandInput, signal: AbortSignal | undefined): Promise<FencedGetObjectOutput | null> {
  const output = await getOrNull(client, input, signal);
  return output === null ? null : answer(output, await fenceOf(output, input.Bucket!, input.Key!));
}

async function follow(
  client: S3Client,
  input: GetObjectCommandInput,
  pointer: StoredFence,
  maxAttempts: number,
  signal: AbortSignal | undefined,
): Promise<FencedGetObjectOutput | null> {
  const Bucket = input.Bucket!;
  const Key = input.Key!;
  const resource = resourceName(Bucket, Key);
  if (input.VersionId !== undefined) {
    // A version of the pointer is not a version of the body: the data objects have their own.
    throw new InvalidArgumentError(`${resource} is kept in the pointer layout; VersionId does not apply (use an unversioned bucket)`);
  }
  const context = readContextOf(input);
  let current = pointer;
  for (let attempt = 1; ; attempt += 1) {
    const data = current.pointer?.data ?? null;
    if (data === null) return null; // a tombstone pointer
    const key = dataKey(Key, data);
    const output = await getOrNull(client, { ...input, Key: key }, signal);
    if (output !== null) return Object.assign(output, { token: await checkData(output, Bucket, key, current, data) });

    // The data object is gone: the pointer has moved on since we read it and
    // the collector removed the old one. Read the pointer again.
    const fresh = await headFence(client, Bucket, Key, context, signal);
    if (fresh === null || fresh.layout !== 'pointer') return readInPlace(client, input, signal);
    if (sameData(fresh.pointer?.data ?? null, data)) {
      throw new CorruptFenceError(resource, `${resource}: the pointer names the data object ${key}, which does not exist (removed by something other than collectGarbage?); refusing to guess a version`);
    }
    if (attempt >= maxAttempts) {
      throw new UnknownOutcomeError(`${resource}: read ${attempt} pointers in a row whose data objects were collected before they could be read; is the collector's grace period shorter than a read?`);
    }
    current = fresh;
  }
}

/** The data object must be the one the pointer names: written by that write, with that token. */
async function checkData(output: GetObjectCommandOutput, Bucket: string, key: string, pointer: StoredFence, data: DataName): Promise<FencingToken | null> {
  const fence = await fenceOf(output, Bucket, key);
  if (fence.layout === 'data' && fence.token === data.token && fence.writeId === data.writeId) return pointer.token;
  await discardBody(output);
  const resource = resourceName(Bucket, key);
  throw new CorruptFenceError(resource, `${resource} does not carry the fence its pointer names; refusing to trust it`);
}

async function getOrNull(client: S3Client, input: GetObjectCommandInput, signal: AbortSignal | undefined): Promise<GetObjectCommandOutput | null> {
  try {
    return await client.send(new GetObjectCommand(input), sendOptions(signal));
  } catch (error) {
    if (isNotFound(error) && (error as { name?: unknown }).name !== 'NoSuchBucket') return null;
    throw error;
  }
}

/** The fence of a GET's answer; the body is drained if the metadata fails to parse. */
async function fenceOf(output: GetObjectCommandOutput, Bucket: string, Key: string): Promise<StoredFence> {
  try {
    return fenceFromMetadata(resourceName(Bucket, Key), output.ETag ?? '', output.Metadata);
  } catch (error) {
    await discardBody(output);
    throw error;
  }
}

async function answer(output: GetObjectCommandOutput, fence: StoredFence): Promise<FencedGetObjectOutput | null> {
  if (fence.tombstone) {
    await discardBody(output);
    return null;
  }
  return Object.assign(output, { token: fence.token });
}
