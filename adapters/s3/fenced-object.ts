// Fenced writes to S3 objects: compare the object's token with ours, then write
// with a precondition that the object has not changed since we compared.
//
// The protocol, per call (ARCHITECTURE.md, "S3"; S3 conditional writes:
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html):
//   1. Read the fence: the pair {ETag, token} from this process's own last write
//      to the key (cache), else a HEAD. The token is user metadata `fencing-token`.
//   2. Decide: our token smaller than the object's -> StaleTokenError, nothing
//      sent. Equal passes (the same holder writes many times); larger advances.
//   3. PUT with If-Match: <ETag without quotes> (If-None-Match: * for a missing
//      key), carrying our token and a random write id in the metadata.
//   4. 412 (or AWS's 409 ConditionalRequestConflict): someone wrote in between.
//      HEAD again and go back to 2, with jittered backoff, at most maxAttempts PUTs.
//      A 5xx or a lost reply is an unknown outcome: the same HEAD tells whether
//      the object carries our write id (ours landed: success) or not (decide again).
//
// Objects and metadata (fail closed):
//   - An object with no `fencing-token` metadata was written without fencing;
//     any token may overwrite it (conditionally, like any other).
//   - An object whose `fencing-token` is not a valid token is never overwritten:
//     InvalidTokenError naming the object. An operator must repair or remove it.
//
// Deletes keep the fence: fencedDeleteObject overwrites the object with a
// tombstone (a small body unique to that delete, metadata `fencing-tombstone: 1`
// and the token). RGW 16 ignores If-Match on DELETE, and a real DELETE would
// erase the high-water mark. fencedGetObject answers null for a tombstone;
// readFence still reports its token; isTombstone() tells for a plain GetObject.
//
// SDK retries: the user's client may retry a PUT (a 5xx, a reset). A retried
// conditional PUT whose first try had landed answers 412 (the ETag moved, or the
// key now exists); that goes down the race path, and the HEAD finds our write id:
// success. Nothing here changes the client's retry configuration.
// After an unknown outcome, a read-back that shows someone else's write means
// ours did not stick (it never landed, or it landed and was overwritten since):
// the call decides again, so it may end in StaleTokenError (the object has moved
// past our token; anything we wrote is superseded) or in a fresh attempt.
// UnknownOutcomeError is left for a read-back that itself fails, and for
// contention outlasting maxAttempts.
//
// The limit of If-Match (ABA): for a single-part PUT the ETag is the MD5 of the
// body, so the condition sees a change of *bytes*, not of writes. A holder that
// read body A, paused, while a newer holder wrote B and then A again (or wrote A
// over A), finds the ETag it read and its PUT succeeds. A body that embeds the
// writer's token closes this: identical bytes then mean an identical token, so
// the fence the paused holder judged is still the object's fence. Tombstones
// embed their write id for this reason. (test/integration/s3.test.ts shows both.)
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { debuglog } from 'node:util';
import {
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  PutObjectCommand,
} from '@aws-sdk/client-s3';
import type {
  GetObjectCommandInput,
  GetObjectCommandOutput,
  HeadObjectCommandInput,
  PutObjectCommandInput,
  S3Client,
} from '@aws-sdk/client-s3';
import {
  InvalidArgumentError,
  StaleTokenError,
  UnknownOutcomeError,
  assertToken,
  formatToken,
} from '../../src/index.js';
import type { FencingToken } from '../../src/index.js';
import { forgetCachedFence, getCachedFence, setCachedFence } from './fence-cache.js';
import {
  TOKEN_METADATA,
  TOMBSTONE_METADATA,
  WRITE_ID_METADATA,
  fenceFromMetadata,
  isReservedMetadataName,
  isTombstone,
} from './metadata.js';
import type { StoredFence } from './metadata.js';
import { addCondition, isConditionFailure, isMissingKey, isNotFound, isUnknownOutcome } from './wire.js';
import type { PutCondition } from './wire.js';

const debug = debuglog('fencekeeper');

export type FencedPutObjectInput = Omit<PutObjectCommandInput, 'IfMatch' | 'IfNoneMatch' | 'Body'> & {
  /** The holder's fencing token (the lock's `token`). */
  readonly token: FencingToken;
  /**
   * A body the adapter can send again after a lost race: string, Buffer or
   * Uint8Array. Streams are refused (InvalidArgumentError): buffer them first.
   */
  readonly Body?: string | Uint8Array;
};

export interface FencedWriteOptions {
  /**
   * Cancels the wait between attempts and the requests in flight (AbortError).
   * An abort while a PUT is in flight leaves that PUT's outcome unknown; readFence tells.
   */
  readonly signal?: AbortSignal;
  /** Conditional PUTs tried before giving up under contention (default 20). */
  readonly maxAttempts?: number;
  /**
   * For tests and advanced use: awaited after the fence was read and judged,
   * right before each conditional PUT. A test holds a writer here to open the
   * window a paused holder would have.
   */
  readonly beforePut?: () => Promise<void>;
}

export interface FencedWriteResult {
  /** The new object's ETag as S3 returned it (quoted). */
  readonly etag: string;
  readonly token: FencingToken;
}

export interface ObjectLocation {
  readonly Bucket: string;
  readonly Key: string;
}

export type FencedDeleteObjectInput = ObjectLocation & {
  readonly token: FencingToken;
  readonly ExpectedBucketOwner?: string | undefined;
};

const DEFAULT_MAX_ATTEMPTS = 20;
const BACKOFF_BASE_MS = 4;
const BACKOFF_CAP_MS = 200;

/** Pass-through fields a HEAD needs to read what the PUT writes (SSE-C objects, bucket-owner checks). */
type ReadContext = Pick<
  HeadObjectCommandInput,
  'ExpectedBucketOwner' | 'RequestPayer' | 'SSECustomerAlgorithm' | 'SSECustomerKey' | 'SSECustomerKeyMD5'
>;

/**
 * Write an object only if `token` is at least the object's current fencing
 * token. Throws StaleTokenError (nothing written) when the object holds a larger
 * token; InvalidTokenError for a bad `token` or an object whose stored token is
 * corrupt; InvalidArgumentError for unusable input; UnknownOutcomeError when a
 * 5xx or lost reply could not be settled by reading the object back, or when
 * contention outlasted `maxAttempts`. S3 errors (NoSuchBucket, AccessDenied, ...)
 * pass through unchanged.
 */
export async function fencedPutObject(
  client: S3Client,
  input: FencedPutObjectInput,
  options: FencedWriteOptions = {},
): Promise<FencedWriteResult> {
  const token = assertToken((input as { token?: unknown }).token);
  const { Bucket, Key } = checkLocation(input);
  checkBody(input.Body);
  checkNoConditions(input);
  for (const name of Object.keys(input.Metadata ?? {})) {
    if (isReservedMetadataName(name)) {
      throw new InvalidArgumentError(`metadata ${JSON.stringify(name)} is reserved for the fence`);
    }
  }
  const { token: _token, Metadata, ...rest } = input;
  return conditionalWrite(client, Bucket, Key, token, options, readContextOf(input), (writeId) => ({
    ...rest,
    Bucket,
    Key,
    Metadata: { ...Metadata, [TOKEN_METADATA]: formatToken(token), [WRITE_ID_METADATA]: writeId },
  }));
}

/**
 * Delete an object without losing its fence: overwrite it (conditionally, as
 * fencedPutObject does) with a tombstone carrying `token`. Afterwards a smaller
 * token is refused, an equal or larger one may write the key again, and
 * fencedGetObject answers null. Deleting a missing key creates a tombstone too.
 */
export async function fencedDeleteObject(
  client: S3Client,
  input: FencedDeleteObjectInput,
  options: FencedWriteOptions = {},
): Promise<FencedWriteResult> {
  const token = assertToken((input as { token?: unknown }).token);
  const { Bucket, Key } = checkLocation(input);
  const context: ReadContext = input.ExpectedBucketOwner === undefined ? {} : { ExpectedBucketOwner: input.ExpectedBucketOwner };
  return conditionalWrite(client, Bucket, Key, token, options, context, (writeId) => ({
    ...context,
    Bucket,
    Key,
    // Unique bytes, so two tombstones never share an ETag (see ABA above).
    Body: `fencekeeper tombstone token=${formatToken(token)} write=${writeId}\n`,
    ContentType: 'text/plain; charset=utf-8',
    Metadata: { [TOKEN_METADATA]: formatToken(token), [WRITE_ID_METADATA]: writeId, [TOMBSTONE_METADATA]: '1' },
  }));
}

/**
 * The object's stored fencing token: null when the key does not exist or was
 * written without fencing. A tombstone reports the token of the delete.
 * Metadata that is not a valid token throws InvalidTokenError (fail closed);
 * a bucket that does not exist throws InvalidArgumentError.
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
 * else the SDK's output plus the object's `token` (null if written unfenced).
 * Corrupt fence metadata throws InvalidTokenError.
 */
export async function fencedGetObject(
  client: S3Client,
  input: GetObjectCommandInput,
  options: { readonly signal?: AbortSignal } = {},
): Promise<(GetObjectCommandOutput & { readonly token: FencingToken | null }) | null> {
  const { Bucket, Key } = checkLocation(input);
  let output: GetObjectCommandOutput;
  try {
    output = await client.send(new GetObjectCommand(input), sendOptions(options.signal));
  } catch (error) {
    if (isNotFound(error) && (error as { name?: unknown }).name !== 'NoSuchBucket') return null;
    throw error;
  }
  let fence: StoredFence;
  try {
    fence = fenceFromMetadata(resourceName(Bucket, Key), output.ETag ?? '', output.Metadata);
  } catch (error) {
    await discardBody(output);
    throw error;
  }
  if (fence.tombstone) {
    await discardBody(output);
    return null;
  }
  return Object.assign(output, { token: fence.token });
}

export { isTombstone };

// ---------------------------------------------------------------------------

async function conditionalWrite(
  client: S3Client,
  Bucket: string,
  Key: string,
  token: FencingToken,
  options: FencedWriteOptions,
  context: ReadContext,
  makeInput: (writeId: string) => PutObjectCommandInput,
): Promise<FencedWriteResult> {
  const maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new InvalidArgumentError(`maxAttempts must be a positive integer, got ${String(maxAttempts)}`);
  }
  const resource = resourceName(Bucket, Key);
  const signal = options.signal;
  // One write id for every attempt of this call: each attempt writes the same
  // body and token, so whichever of them landed is "ours".
  const writeId = randomUUID();
  const putInput = makeInput(writeId);

  // What we believe the object is: a cached pair, a HEAD's answer, null for
  // "does not exist", undefined for "read it". The cached pair is our own
  // last write. It is trusted for the same token (the same holder writing
  // again: one request) and for a smaller one (refused at once: fences only
  // go up). A larger token means the lock changed hands since, and another
  // holder has likely written in between: reading first costs HEAD + PUT,
  // where trusting the cache would cost a failed PUT, the HEAD and the PUT.
  const cached = getCachedFence(client, Bucket, Key);
  let known: { readonly etag: string; readonly token: FencingToken | null } | null | undefined =
    cached !== undefined && cached.token < token ? undefined : cached;
  let unsettled: unknown; // the error of a PUT whose outcome we have not seen yet
  let attempts = 0;

  for (;;) {
    if (known === undefined) {
      let fence: StoredFence | null;
      try {
        fence = await headFence(client, Bucket, Key, context, signal);
      } catch (error) {
        if (unsettled === undefined) throw error;
        throw new UnknownOutcomeError(
          `${resource}: a conditional PUT with token ${token} may or may not have landed (${describeError(unsettled)}), and reading the object back failed (${describeError(error)})`,
          { cause: error },
        );
      }
      if (attempts > 0 && fence !== null && fence.writeId === writeId) {
        // Ours landed: a retried PUT (by the SDK) or a 5xx whose write went through.
        debug('s3 %s: write %s found after %d attempt(s)', resource, writeId, attempts);
        setCachedFence(client, Bucket, Key, { etag: fence.etag, token });
        return { etag: fence.etag, token };
      }
      known = fence;
      unsettled = undefined; // the object is not ours: whatever we sent did not stick
    }

    if (known !== null && known.token !== null && token < known.token) {
      throw new StaleTokenError(resource, token, known.token);
    }
    if (attempts >= maxAttempts) {
      throw new UnknownOutcomeError(
        `${resource}: gave up after ${attempts} conditional PUTs with token ${token}: each lost to a concurrent write (or its outcome was lost, and the object then was not ours)`,
      );
    }

    if (options.beforePut !== undefined) await options.beforePut();
    signal?.throwIfAborted();
    const condition: PutCondition = known === null ? { ifNoneMatch: '*' } : { ifMatch: known.etag };
    const command = new PutObjectCommand(putInput);
    const wire = addCondition(command, condition);
    attempts += 1;
    try {
      const output = await client.send(command, sendOptions(signal));
      // RGW and AWS always return the ETag of a PUT; without it the next write
      // could not be conditioned, so do not cache.
      const etag = output.ETag;
      if (etag === undefined) forgetCachedFence(client, Bucket, Key);
      else setCachedFence(client, Bucket, Key, { etag, token });
      return { etag: etag ?? '', token };
    } catch (error) {
      forgetCachedFence(client, Bucket, Key);
      if (isConditionFailure(error) || ('ifMatch' in condition && isMissingKey(error))) {
        // (AWS answers If-Match on a key deleted since our read with 404 NoSuchKey; RGW with 412.)
        debug('s3 %s: condition %o failed (attempt %d), reading again', resource, condition, attempts);
      } else if (wire.sent() && isUnknownOutcome(error) && !isAbort(error)) {
        debug('s3 %s: unknown outcome (attempt %d): %s', resource, attempts, describeError(error));
        unsettled = error;
      } else {
        throw error;
      }
      known = undefined;
      await sleep(backoffMs(attempts), undefined, signal === undefined ? undefined : { signal });
    }
  }
}

/** HEAD the object and read its fence; null when it does not exist (or the bucket does not). */
async function headFence(
  client: S3Client,
  Bucket: string,
  Key: string,
  context: ReadContext,
  signal: AbortSignal | undefined,
): Promise<StoredFence | null> {
  try {
    const head = await client.send(new HeadObjectCommand({ ...context, Bucket, Key }), sendOptions(signal));
    return fenceFromMetadata(resourceName(Bucket, Key), head.ETag ?? '', head.Metadata);
  } catch (error) {
    if (isNotFound(error)) return null;
    throw error;
  }
}

// A HEAD answers a bare 404 both for a missing key and a missing bucket; a
// reader asking for a fence in a bucket that does not exist has a typo, not a
// fresh key.
async function assertBucketExists(client: S3Client, Bucket: string, signal: AbortSignal | undefined): Promise<void> {
  try {
    await client.send(new HeadBucketCommand({ Bucket }), sendOptions(signal));
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArgumentError(`bucket ${JSON.stringify(Bucket)} does not exist`, { cause: error });
    throw error;
  }
}

function checkLocation(input: { readonly Bucket?: unknown; readonly Key?: unknown }): ObjectLocation {
  const { Bucket, Key } = input;
  if (typeof Bucket !== 'string' || Bucket === '') throw new InvalidArgumentError('Bucket must be a non-empty string');
  if (typeof Key !== 'string' || Key === '') throw new InvalidArgumentError('Key must be a non-empty string');
  return { Bucket, Key };
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

function checkNoConditions(input: object): void {
  for (const field of ['IfMatch', 'IfNoneMatch'] as const) {
    if ((input as Record<string, unknown>)[field] !== undefined) {
      throw new InvalidArgumentError(`${field} is set by the fence; do not pass it to fencedPutObject`);
    }
  }
}

function readContextOf(input: ReadContext): ReadContext {
  const context: { -readonly [K in keyof ReadContext]: ReadContext[K] } = {};
  if (input.ExpectedBucketOwner !== undefined) context.ExpectedBucketOwner = input.ExpectedBucketOwner;
  if (input.RequestPayer !== undefined) context.RequestPayer = input.RequestPayer;
  if (input.SSECustomerAlgorithm !== undefined) context.SSECustomerAlgorithm = input.SSECustomerAlgorithm;
  if (input.SSECustomerKey !== undefined) context.SSECustomerKey = input.SSECustomerKey;
  if (input.SSECustomerKeyMD5 !== undefined) context.SSECustomerKeyMD5 = input.SSECustomerKeyMD5;
  return context;
}

function resourceName(Bucket: string, Key: string): string {
  return `s3://${Bucket}/${Key}`;
}

function sendOptions(signal: AbortSignal | undefined): { abortSignal?: AbortSignal } {
  return signal === undefined ? {} : { abortSignal: signal };
}

/** Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"). */
function backoffMs(attempt: number): number {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(attempt, 16));
  return Math.random() * ceiling;
}

function isAbort(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { name?: unknown }).name === 'AbortError';
}

function describeError(error: unknown): string {
  if (typeof error !== 'object' || error === null) return String(error);
  const e = error as { name?: unknown; message?: unknown; $metadata?: { httpStatusCode?: number } };
  const status = e.$metadata?.httpStatusCode;
  return `${String(e.name ?? 'Error')}${status === undefined ? '' : ` ${status}`}: ${String(e.message ?? '')}`;
}

async function discardBody(output: GetObjectCommandOutput): Promise<void> {
  const body = output.Body as { transformToByteArray?: () => Promise<Uint8Array> } | undefined;
  await body?.transformToByteArray?.();
}
