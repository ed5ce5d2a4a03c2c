/**
 * Fenced writes to DynamoDB items, the token compared and stored in the
 * write's own condition expression. Guide: docs/dynamodb.md in the package.
 *
 * @module fencekeeper/dynamodb
 */
// fencekeeper/dynamodb: fenced writes to DynamoDB items, the token compared
// and stored in the write's own condition (one request per write). The design
// and its limits are described at the top of fenced-item.ts, expressions.ts
// attributes.ts and binding.ts.
export { fencedPutItem, fencedUpdateItem, fencedDeleteItem, readFence, isTombstone } from './fenced-item.js';
export type { FencedItemOptions, FencedUpdateOptions, FencedPutItemInput, FencedUpdateItemInput, FencedDeleteItemInput, FencedItemResult, FencedItemToken, FencedItemOmittedField } from './fenced-item.js';
export type { FenceAttributeOptions } from './attributes.js';
export { DEFAULT_TOKEN_ATTRIBUTE, DEFAULT_TOMBSTONE_ATTRIBUTE, DEFAULT_LOCK_ATTRIBUTE, MAX_ITEM_BYTES } from './attributes.js';
