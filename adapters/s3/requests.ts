// The reads and small pieces every fenced operation shares: HEAD a key's
// fence, name a resource, pass a signal, back off, describe an S3 error.
import { HeadBucketCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import type { GetObjectCommandOutput, HeadObjectCommandInput, S3Client } from '@aws-sdk/client-s3';
import { InvalidArgumentError } from '../../src/index.js';
import { fenceFromMetadata } from './metadata.js';
import type { StoredFence } from './metadata.js';
import { isNotFound } from './wire.js';

/**
 * The request fields fencekeeper passes through to the HEAD and GET it sends to
 * read an object's fence (ExpectedBucketOwner, RequestPayer and the SSE-C key
 * fields): give the same values as the write, or S3 refuses to show an SSE-C
 * object or answers for another owner's bucket.
 */
export type ReadContext = Pick<
  HeadObjectCommandInput,
  'ExpectedBucketOwner' | 'RequestPayer' | 'SSECustomerAlgorithm' | 'SSECustomerKey' | 'SSECustomerKeyMD5'
>;

/** Where an object is: its Bucket and Key. */
export interface ObjectLocation {
  readonly Bucket: string;
  readonly Key: string;
}

const BACKOFF_BASE_MS = 4;
const BACKOFF_CAP_MS = 200;

export function readContextOf(input: ReadContext): ReadContext {
  const context: { -readonly [K in keyof ReadContext]: ReadContext[K] } = {};
  if (input.ExpectedBucketOwner !== undefined) context.ExpectedBucketOwner = input.ExpectedBucketOwner;
  if (input.RequestPayer !== undefined) context.RequestPayer = input.RequestPayer;
  if (input.SSECustomerAlgorithm !== undefined) context.SSECustomerAlgorithm = input.SSECustomerAlgorithm;
  if (input.SSECustomerKey !== undefined) context.SSECustomerKey = input.SSECustomerKey;
  if (input.SSECustomerKeyMD5 !== undefined) context.SSECustomerKeyMD5 = input.SSECustomerKeyMD5;
  return context;
}

export function checkLocation(input: { readonly Bucket?: unknown; readonly Key?: unknown }): ObjectLocation {
  const { Bucket, Key } = input;
  if (typeof Bucket !== 'string' || Bucket === '') throw new InvalidArgumentError('Bucket must be a non-empty string');
  if (typeof Key !== 'string' || Key === '') throw new InvalidArgumentError('Key must be a non-empty string');
  return { Bucket, Key };
}

/** HEAD the object and read its fence; null when it does not exist (or the bucket does not). */
export async function headFence(
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
export async function assertBucketExists(client: S3Client, Bucket: string, signal: AbortSignal | undefined): Promise<void> {
  try {
    await client.send(new HeadBucketCommand({ Bucket }), sendOptions(signal));
  } catch (error) {
    if (isNotFound(error)) throw new InvalidArgumentError(`bucket ${JSON.stringify(Bucket)} does not exist`, { cause: error });
    throw error;
  }
}

export function resourceName(Bucket: string, Key: string): string {
  return `s3://${Bucket}/${Key}`;
}

export function sendOptions(signal: AbortSignal | undefined): { abortSignal?: AbortSignal } {
  return signal === undefined ? {} : { abortSignal: signal };
}

/** Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"). */
export function backoffMs(attempt: number): number {
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(attempt, 16));
  return Math.random() * ceiling;
}

export function isAbort(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { name?: unknown }).name === 'AbortError';
}

export function describeError(error: unknown): string {
  if (typeof error !== 'object' || error === null) return String(error);
  const e = error as { name?: unknown; message?: unknown; $metadata?: { httpStatusCode?: number } };
  const status = e.$metadata?.httpStatusCode;
  return `${String(e.name ?? 'Error')}${status === undefined ? '' : ` ${status}`}: ${String(e.message ?? '')}`;
}

export async function discardBody(output: GetObjectCommandOutput): Promise<void> {
  const body = output.Body as { transformToByteArray?: () => Promise<Uint8Array> } | undefined;
  await body?.transformToByteArray?.();
}

export function checkMaxAttempts(value: number | undefined, fallback: number): number {
  const maxAttempts = value ?? fallback;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) {
    throw new InvalidArgumentError(`maxAttempts must be a positive integer, got ${String(maxAttempts)}`);
  }
  return maxAttempts;
}
