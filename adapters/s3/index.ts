/**
 * Fenced writes to S3 objects through conditional PUTs, in place or through a
 * pointer, and the garbage collector of the pointer layout. Guide: docs/s3.md
 * in the package.
 *
 * @module fencekeeper/s3
 */
// fencekeeper/s3: fenced writes to S3 objects through conditional PUTs, in
// place or through a pointer. The design and its limits are described at the
// top of fenced-object.ts, in-place.ts, pointer-write.ts and collect-garbage.ts.
export { fencedPutObject, fencedDeleteObject } from './fenced-object.js';
export type {
  ObjectLayout,
  FencedObjectOptions,
  FencedPutObjectInput,
  FencedDeleteObjectInput,
  FencedWriteResult,
} from './fenced-object.js';
export type { FencedWriteOptions } from './conditional-write.js';
export { fencedGetObject, readFence } from './fenced-read.js';
export type { FencedGetObjectOutput, FencedReadOptions } from './fenced-read.js';
export { collectGarbage, DEFAULT_GRACE_MS } from './collect-garbage.js';
export type { CollectGarbageOptions, CollectGarbageResult } from './collect-garbage.js';
export type { ObjectLocation, ReadContext } from './requests.js';
export type { PointerWriteContext } from './pointer-write.js';
export { isTombstone, TOKEN_METADATA, WRITE_ID_METADATA, TOMBSTONE_METADATA, LAYOUT_METADATA } from './metadata.js';
