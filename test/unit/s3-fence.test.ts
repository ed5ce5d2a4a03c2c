// fencekeeper/s3 pieces that need no server: the fence read from metadata, ETag
// quoting, the answer classification, and the per-client cache bound.
import { describe, expect, it } from 'vitest';
import { InvalidTokenError } from '../../src/index.js';
import { fenceFromMetadata, isReservedMetadataName, isTombstone } from '../../adapters/s3/metadata.js';
import type { StoredFence } from '../../adapters/s3/metadata.js';
import { isConditionFailure, isMissingKey, isUnknownOutcome, unquoteEtag } from '../../adapters/s3/wire.js';
import { forgetCachedFence, getCachedFence, setCachedFence } from '../../adapters/s3/fence-cache.js';

const answer = (status: number | undefined, name = 'Error') =>
  Object.assign(new Error(name), { name, ...(status === undefined ? {} : { $metadata: { httpStatusCode: status } }) });

describe('fenceFromMetadata', () => {
  it('reads the token, the write id and the tombstone flag, ignoring the case of names', () => {
    expect(fenceFromMetadata('s3://b/k', '"e"', { 'Fencing-Token': '35', 'fencing-write': 'w1', 'FENCING-TOMBSTONE': '1' }))
      .toEqual({ etag: '"e"', layout: 'in-place', token: 35n, writeId: 'w1', tombstone: true, pointer: null, binding: null });
  });

  it('no metadata: written unfenced, token null', () => {
    expect(fenceFromMetadata('s3://b/k', '"e"', undefined)).toEqual({ etag: '"e"', layout: 'unfenced', token: null, writeId: null, tombstone: false, pointer: null, binding: null });
    expect(fenceFromMetadata('s3://b/k', '"e"', { owner: 'x' }).token).toBeNull();
  });

  it.each(['', '0', '-1', '035', '1e3', ' 35', '9223372036854775808', 'abc'])('fails closed on %j, naming the object', (text) => {
    expect(() => fenceFromMetadata('s3://b/key-1', '"e"', { 'fencing-token': text })).toThrow(InvalidTokenError);
    expect(() => fenceFromMetadata('s3://b/key-1', '"e"', { 'fencing-token': text })).toThrow(/s3:\/\/b\/key-1/);
  });

  it('keeps a 64-bit token exact', () => {
    expect(fenceFromMetadata('s3://b/k', '"e"', { 'fencing-token': '9223372036854775807' }).token).toBe(9223372036854775807n);
  });

  it('isTombstone and reserved names', () => {
    expect(isTombstone({ Metadata: { 'fencing-tombstone': '1' } })).toBe(true);
    expect(isTombstone({ Metadata: { 'fencing-tombstone': '0' } })).toBe(false);
    expect(isTombstone({})).toBe(false);
    expect(isReservedMetadataName('Fencing-Write')).toBe(true);
    expect(isReservedMetadataName('owner')).toBe(false);
  });
});

describe('wire', () => {
  it('unquotes ETags for If-Match (RGW refuses the quoted form)', () => {
    expect(unquoteEtag('"0cc175b9c0f1b6a831c399e269772661"')).toBe('0cc175b9c0f1b6a831c399e269772661');
    expect(unquoteEtag('W/"abc"')).toBe('abc');
    expect(unquoteEtag('abc-2')).toBe('abc-2');
    expect(unquoteEtag('"')).toBe('"');
  });

  it('classifies answers: 412/409-conflict are races, 5xx and no answer are unknown, other 4xx definite', () => {
    expect(isConditionFailure(answer(412, 'PreconditionFailed'))).toBe(true);
    expect(isConditionFailure(answer(409, 'ConditionalRequestConflict'))).toBe(true);
    expect(isConditionFailure(answer(409, 'OperationAborted'))).toBe(false);
    expect(isUnknownOutcome(answer(500, 'InternalError'))).toBe(true);
    expect(isUnknownOutcome(answer(503, 'SlowDown'))).toBe(true);
    expect(isUnknownOutcome(answer(undefined, 'TimeoutError'))).toBe(true);
    expect(isUnknownOutcome(answer(403, 'AccessDenied'))).toBe(false);
    expect(isMissingKey(answer(404, 'NoSuchKey'))).toBe(true);
    expect(isMissingKey(answer(404, 'NoSuchBucket'))).toBe(false);
  });
});

const fence = (etag: string, token: bigint): StoredFence => ({ etag, layout: 'in-place', token, writeId: null, tombstone: false, pointer: null, binding: null });

describe('fence cache', () => {
  it('is per client and per key, and forgets on demand', () => {
    const a = {};
    const b = {};
    setCachedFence(a, 'bucket', 'k', fence('"1"', 5n));
    expect(getCachedFence(a, 'bucket', 'k')).toEqual(fence('"1"', 5n));
    expect(getCachedFence(b, 'bucket', 'k')).toBeUndefined();
    expect(getCachedFence(a, 'bucket', 'k2')).toBeUndefined();
    // bucket and key are kept apart: "a/b" + "c" is not "a" + "b/c"
    expect(getCachedFence(a, 'bucketk', '')).toBeUndefined();
    forgetCachedFence(a, 'bucket', 'k');
    expect(getCachedFence(a, 'bucket', 'k')).toBeUndefined();
  });

  it('is bounded, dropping the least recently used key', () => {
    const client = {};
    setCachedFence(client, 'b', 'first', fence('"f"', 1n));
    for (let i = 0; i < 4095; i += 1) setCachedFence(client, 'b', `k${i}`, fence('"x"', 1n));
    expect(getCachedFence(client, 'b', 'first')).toBeDefined(); // touched: now the most recent
    setCachedFence(client, 'b', 'one-more', fence('"y"', 1n));
    expect(getCachedFence(client, 'b', 'first')).toBeDefined();
    expect(getCachedFence(client, 'b', 'k0')).toBeUndefined();
  });
});
