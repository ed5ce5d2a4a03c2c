// The in-place layout: the object at the key carries its own fence (token and
// write id in its metadata) and is overwritten by a PUT conditioned on the
// ETag it had when its fence was judged.
//
// The limit of If-Match: for a single-part PUT the ETag is the MD5 of the
// body, so the condition sees a change of *bytes*, not of writes. Say the
// object holds body A with token 33. Holder 34 reads it and pauses; holder 35
// writes B, holder 36 writes A again. Holder 34 resumes, finds the ETag it
// read, and its PUT lands over 36's write: the object's token is 34 again, so
// the fence itself has gone back, and a holder with 35 would now be admitted.
// The same happens with no B at all when 36 writes A over A. Only stored bytes
// that are unique to each write make the condition sound: a body that embeds
// the writer's token or a write id, or the pointer layout, whose pointer
// bytes are unique by construction.
//
// What can be detected is refused: a body byte for byte equal to the current
// object's (its MD5 equals the object's ETag) would leave the ETag unchanged,
// so it fails with RepeatedBodyError before anything is sent. A body that
// repeats an *older* version (A, B, A) cannot be told from a new one by the
// ETag we read, and is the caller's to avoid.
import { randomUUID } from 'node:crypto';
import type { PutObjectCommandInput, S3Client } from '@aws-sdk/client-s3';
import { LayoutMismatchError, RepeatedBodyError } from '../../src/index.js';
import { bindingMetadata } from './binding.js';
import { forgetCachedFence, getCachedFence, setCachedFence } from './fence-cache.js';
import { headFence } from './requests.js';
import type { ReadContext } from './requests.js';
import { planned, type FencedWrite, type WritePlan } from './conditional-write.js';
import { unquoteEtag } from './wire.js';

export interface InPlaceWrite extends FencedWrite {
  readonly context: ReadContext;
  /** The PUT, given this call's write id (the same for every attempt). */
  readonly makeInput: (writeId: string) => PutObjectCommandInput;
  /** The MD5 of the body, to compare with the current object's ETag; undefined for a tombstone (unique by construction). */
  readonly bodyEtag: string | undefined;
  readonly tombstone: boolean;
}

export function inPlacePlan(client: S3Client, write: InPlaceWrite): WritePlan {
  const { resource, token, signal, context, tombstone } = write;
  const { Bucket, Key } = write.location;
  // One write id for every attempt of this call: each attempt writes the same
  // body and token, so whichever of them landed is "ours".
  const writeId = randomUUID();
  const input = write.makeInput(writeId);
  const { bodyEtag } = write;

  // The cached pair is our own last write. It is trusted for the same token
  // (the same holder writing again: one request) and for a smaller one
  // (refused at once: fences only go up). A larger token means the lock
  // changed hands since, and another holder has likely written in between:
  // reading first costs HEAD + PUT, where trusting the cache would cost a
  // failed PUT, the HEAD and the PUT. A body equal to our last one is read
  // first too: it is refused only for what the object holds now.
  const cached = getCachedFence(client, Bucket, Key);
  const own = cached !== undefined && cached.layout === 'in-place' && cached.token !== null ? cached : undefined;
  const repeatsOwn = own !== undefined && bodyEtag !== undefined && unquoteEtag(own.etag) === bodyEtag;
  const believed = own !== undefined && own.token !== null && (token < own.token || (token === own.token && !repeatsOwn)) ? own : undefined;

  return {
    ...planned(write),
    believed,
    read: () => headFence(client, Bucket, Key, context, signal),
    isOurs: (fence) => fence.writeId === writeId,
    checkLayout(fence) {
      if (fence === null || fence.layout === 'in-place' || fence.layout === 'unfenced') return;
      if (fence.layout === 'data') {
        throw new LayoutMismatchError(resource, 'in-place', fence.layout, `${resource} is a data object of another key's pointer; it is never overwritten.`);
      }
      // Writing the body over the pointer would orphan its data objects and
      // give up, for this key, the pointer's soundness for repeated bodies.
      throw new LayoutMismatchError(resource, 'in-place', fence.layout,
        `${resource} is a pointer (the pointer layout); write it with { layout: 'pointer' }.`);
    },
    checkWrite(fence) {
      if (fence === null || bodyEtag === undefined || unquoteEtag(fence.etag) !== bodyEtag) return;
      throw new RepeatedBodyError(resource,
        `${resource}: the body is byte for byte the object's current body (ETag ${fence.etag}). Written in place, the ETag would not change, and a paused holder that read the object earlier could still pass its If-Match and put its older token back. Make each write's body unique (embed the token or a write id), or keep this key in the pointer layout ({ layout: 'pointer' }), which is safe for any body.`);
    },
    prepare: async (_fence, binding) => (binding === null ? input : { ...input, Metadata: { ...input.Metadata, ...bindingMetadata(binding) } }),
    landed(etag, readBack, binding) {
      // RGW and AWS always return the ETag of a PUT; without it the next write
      // could not be conditioned, so do not cache.
      if (etag === undefined) forgetCachedFence(client, Bucket, Key);
      else setCachedFence(client, Bucket, Key, readBack ?? { etag, layout: 'in-place', token, writeId, tombstone, pointer: null, binding });
    },
    forget: () => forgetCachedFence(client, Bucket, Key),
    abandon: async () => {},
  };
}
