// fencekeeper/s3: fenced writes to S3 objects through conditional PUTs.
// The design and its limits are described at the top of fenced-object.ts.
export {
  fencedPutObject,
  fencedDeleteObject,
  fencedGetObject,
  readFence,
  isTombstone,
} from './fenced-object.js';
export type {
  FencedPutObjectInput,
  FencedDeleteObjectInput,
  FencedWriteOptions,
  FencedWriteResult,
  ObjectLocation,
} from './fenced-object.js';
export { TOKEN_METADATA, WRITE_ID_METADATA, TOMBSTONE_METADATA } from './metadata.js';
