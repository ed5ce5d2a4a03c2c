// Fenced writes in the pointer layout (names and bytes in pointer.ts): sound
// for any body, because the one object a conditional PUT compares, the
// pointer, never stores the same bytes twice.
//
// A write, after the fence was read and judged (conditional-write.ts):
//   1. Create the data object under a name no one else uses (our token, the
//      pointer's generation, our write id) with If-None-Match: *. Readers do
//      not see it yet: they follow the pointer, which still names the old one.
//   2. Move the pointer with If-Match: <the pointer's ETag as we read it>,
//      naming the new data object. This PUT is the write: until it lands,
//      readers get the previous version; once it lands, the new one, whole.
//   3. A 412 (or 409) or an unknown outcome: read the pointer again. If it
//      names our data object, ours landed. Otherwise judge again; a pointer of
//      a newer generation means the collector has moved on, and our data
//      object may be collected: write a fresh one in that generation. (The
//      same when step 1's reply was lost and the collector removed the object
//      before we could see it: read the pointer again, write anew.)
// A write that ends without moving the pointer (stale, given up) removes its
// own data object when every pointer PUT it sent was answered with a refusal
// (so none can land later); otherwise the collector removes it.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { debuglog } from 'node:util';
import { DeleteObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import type { PutObjectCommandInput, S3Client } from '@aws-sdk/client-s3';
import { LayoutMismatchError, UnknownOutcomeError, formatToken } from '../../src/index.js';
import { forgetCachedFence, getCachedFence, setCachedFence } from './fence-cache.js';
import { LAYOUT_METADATA, TOKEN_METADATA, WRITE_ID_METADATA, pointerMetadata } from './metadata.js';
import { dataKey, pointerBody } from './pointer.js';
import type { DataName, PointerState } from './pointer.js';
import { backoffMs, describeError, headFence, isAbort, sendOptions } from './requests.js';
import type { ReadContext } from './requests.js';
import { planned, type FencedWrite, type WritePlan } from './conditional-write.js';
import { addCondition, httpStatus, isConditionFailure, isNotFound, isUnknownOutcome } from './wire.js';

const debug = debuglog('fencekeeper');

/** Data PUTs tried when their answers are lost (each is idempotent: a unique name, If-None-Match). */
const DATA_ATTEMPTS = 5;

/**
 * The PutObject fields a fenced write of a pointer-layout object copies onto
 * its pointer as well as its data object (bucket owner, requester pays, SSE and
 * SSE-C keys, KMS settings, canned ACL and grants), so a reader allowed to read
 * the data can read the pointer with the same request fields.
 */
export type PointerWriteContext = Pick<
  PutObjectCommandInput,
  | 'ExpectedBucketOwner' | 'RequestPayer' | 'SSECustomerAlgorithm' | 'SSECustomerKey' | 'SSECustomerKeyMD5'
  | 'ServerSideEncryption' | 'SSEKMSKeyId' | 'SSEKMSEncryptionContext' | 'BucketKeyEnabled'
  | 'ACL' | 'GrantFullControl' | 'GrantRead' | 'GrantReadACP' | 'GrantWriteACP'
>;

/**
 * PutObject fields that apply to the pointer as well as to the data object:
 * who may read it and how it is encrypted, so a reader that can read the data
 * can read the pointer with the same request fields.
 */
export const POINTER_FIELDS = [
  'ExpectedBucketOwner', 'RequestPayer', 'SSECustomerAlgorithm', 'SSECustomerKey', 'SSECustomerKeyMD5',
  'ServerSideEncryption', 'SSEKMSKeyId', 'SSEKMSEncryptionContext', 'BucketKeyEnabled',
  'ACL', 'GrantFullControl', 'GrantRead', 'GrantReadACP', 'GrantWriteACP',
] as const satisfies readonly (keyof PointerWriteContext)[];
// Every field of the type is in the list (a field added to one and not the other fails to compile).
const POINTER_FIELDS_COMPLETE: Exclude<keyof PointerWriteContext, (typeof POINTER_FIELDS)[number]> extends never ? true : never = true;
void POINTER_FIELDS_COMPLETE;

export function pointerContextOf(input: PointerWriteContext): PointerWriteContext {
  const context: Record<string, unknown> = {};
  for (const field of POINTER_FIELDS) if (input[field] !== undefined) context[field] = input[field];
  return context as PointerWriteContext;
}

export interface PointerWrite extends FencedWrite {
  readonly readContext: ReadContext;
  readonly pointerContext: PointerWriteContext;
  /** The data object's PUT without Bucket/Key/metadata of the fence; undefined for a fenced delete (a tombstone pointer). */
  readonly data: PutObjectCommandInput | undefined;
}

export interface PointerWritePlan extends WritePlan {
  /** After the write landed: the data object the pointer names and its ETag (undefined for a tombstone). */
  written(): { readonly dataKey: string; readonly etag: string } | undefined;
}

export function pointerPlan(client: S3Client, write: PointerWrite): PointerWritePlan {
  const { resource, token, signal, readContext, pointerContext } = write;
  const { Bucket, Key } = write.location;
  const writeId = randomUUID();
  /** Data objects this call wrote (or may have), by generation: key and ETag. */
  const dataObjects = new Map<number, { readonly key: string; etag: string | undefined }>();
  const pointerWriteIds = new Set<string>();
  let lastState: PointerState | undefined;
  let lastPointerWriteId = '';
  let landedGeneration: number | undefined; // the generation of the data object our landed pointer names

  const cached = getCachedFence(client, Bucket, Key);
  const own = cached !== undefined && cached.layout === 'pointer' && cached.token !== null ? cached : undefined;
  // As in place: our own last write is trusted for the same or a smaller token.
  const believed = own !== undefined && own.token !== null && token <= own.token ? own : undefined;

  /**
   * Write this call's data object for `generation` (once per generation).
   * 'collected': it was written and the collector has removed it since, so the
   * pointer has moved past `generation` (read it again).
   */
  async function writeData(generation: number): Promise<'written' | 'collected'> {
    if (write.data === undefined || dataObjects.get(generation)?.etag !== undefined) return 'written';
    const name: DataName = { token, generation, writeId };
    const key = dataKey(Key, name);
    const entry = { key, etag: undefined as string | undefined };
    dataObjects.set(generation, entry);
    const input: PutObjectCommandInput = {
      ...write.data,
      Bucket,
      Key: key,
      Metadata: { ...write.data.Metadata, [TOKEN_METADATA]: formatToken(token), [WRITE_ID_METADATA]: writeId, [LAYOUT_METADATA]: 'data' },
    };
    for (let attempt = 1; ; attempt += 1) {
      const command = new PutObjectCommand(input);
      const wire = addCondition(command, { ifNoneMatch: '*' });
      try {
        entry.etag = (await client.send(command, sendOptions(signal))).ETag ?? '';
        return 'written';
      } catch (error) {
        if (httpStatus(error) === 412) {
          // The name is ours alone: an earlier send of this PUT (ours after a
          // lost reply, or an SDK retry) created it.
          try {
            const head = await client.send(new HeadObjectCommand({ ...readContext, Bucket, Key: key }), sendOptions(signal));
            entry.etag = head.ETag ?? '';
            return 'written';
          } catch (headError) {
            if (!isNotFound(headError)) throw headError;
            // Created, then removed: the collector removes a data object only
            // once the pointer's generation is past its own, so the pointer we
            // judged is gone for good and ours can never name this object.
            // Forget it; the caller reads the pointer again and writes anew.
            debug('s3 %s: data object %s was collected before the pointer could name it; reading the pointer again', resource, key);
            dataObjects.delete(generation);
            return 'collected';
          }
        }
        // 409 ConditionalRequestConflict: a concurrent conditional write on the
        // same name, which can only be an earlier send of this one.
        const retry = isConditionFailure(error) || (wire.sent() && isUnknownOutcome(error) && !isAbort(error));
        if (!retry) throw error;
        if (attempt >= DATA_ATTEMPTS) {
          throw new UnknownOutcomeError(`${resource}: could not write the data object ${key} (${describeError(error)}); the pointer was not moved`, { cause: error });
        }
        debug('s3 %s: data object %s: %s, trying again', resource, key, describeError(error));
        await sleep(backoffMs(attempt), undefined, signal === undefined ? undefined : { signal });
      }
    }
  }

  return {
    ...planned(write),
    believed,
    read: () => headFence(client, Bucket, Key, readContext, signal),
    isOurs(fence) {
      if (fence.layout !== 'pointer' || fence.pointer === null) return false;
      // Ours if it names our data object, even after the collector moved the
      // pointer to a new generation (a new pointer write id, the same data).
      const data = fence.pointer.data;
      if (data !== null) return data.writeId === writeId && data.token === token;
      return fence.writeId !== null && pointerWriteIds.has(fence.writeId);
    },
    checkLayout(fence) {
      if (fence === null || fence.layout === 'pointer' || fence.layout === 'unfenced') return;
      if (fence.layout === 'data') {
        throw new LayoutMismatchError(resource, 'pointer', fence.layout, `${resource} is a data object of another key's pointer; it is never overwritten.`);
      }
      // Taking the key over would change what its other writers and its plain
      // GetObject readers find there (a pointer's bytes, not the body).
      throw new LayoutMismatchError(resource, 'pointer', fence.layout,
        `${resource} is written in place (it carries its own fence); its writers and readers expect the body there, not a pointer. Keep writing it in place, or move to a new key in the pointer layout.`);
    },
    checkWrite() {},
    async prepare(fence, binding) {
      // A new key, or one written without fencing: the first generation.
      const generation = fence?.pointer?.generation ?? 1;
      const generationSince = fence?.pointer?.generationSince ?? Date.now();
      if (await writeData(generation) === 'collected') return null;
      const state: PointerState = {
        generation,
        generationSince,
        data: write.data === undefined ? null : { token, generation, writeId },
        carried: fence?.pointer?.carried ?? null,
      };
      // A fresh id per pointer PUT, so even two attempts of one call never store the same bytes.
      const pointerWriteId = randomUUID();
      pointerWriteIds.add(pointerWriteId);
      lastState = state;
      lastPointerWriteId = pointerWriteId;
      return {
        ...pointerContext,
        Bucket,
        Key,
        Body: pointerBody(token, pointerWriteId, state),
        ContentType: 'application/json',
        Metadata: pointerMetadata(token, pointerWriteId, state, binding),
      };
    },
    landed(etag, readBack, binding) {
      landedGeneration = (readBack === null ? lastState?.data : readBack.pointer?.data)?.generation;
      if (readBack !== null) setCachedFence(client, Bucket, Key, readBack);
      else if (etag === undefined || lastState === undefined) forgetCachedFence(client, Bucket, Key);
      else {
        setCachedFence(client, Bucket, Key, {
          etag, layout: 'pointer', token, writeId: lastPointerWriteId, tombstone: lastState.data === null, pointer: lastState, binding,
        });
      }
    },
    forget: () => forgetCachedFence(client, Bucket, Key),
    async abandon(refused) {
      if (!refused) return; // a pointer PUT of ours may name them (now or later): the collector decides
      for (const { key } of dataObjects.values()) {
        try {
          await client.send(new DeleteObjectCommand({ ...(readContext.ExpectedBucketOwner === undefined ? {} : { ExpectedBucketOwner: readContext.ExpectedBucketOwner }), Bucket, Key: key }));
        } catch (error) {
          debug('s3 %s: could not remove the unused data object %s (%s); the collector will', resource, key, describeError(error));
        }
      }
    },
    written() {
      const entry = landedGeneration === undefined ? undefined : dataObjects.get(landedGeneration);
      return entry === undefined ? undefined : { dataKey: entry.key, etag: entry.etag ?? '' };
    },
  };
}
