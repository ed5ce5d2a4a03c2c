// The pointer layout's names and metadata, without a server: data names sort
// in token order and parse back exactly, a pointer's metadata round-trips,
// and anything malformed fails closed.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CorruptFenceError, InvalidArgumentError, InvalidTokenError } from '../../src/index.js';
import { fenceFromMetadata, isReservedMetadataName, pointerMetadata } from '../../adapters/s3/metadata.js';
import {
  MAX_POINTER_KEY_BYTES, checkNotDataKey, checkPointerKey, dataKey, formatDataName, parseDataName, pointerBody,
} from '../../adapters/s3/pointer.js';
import type { PointerState } from '../../adapters/s3/pointer.js';
import { md5Etag } from '../../adapters/s3/wire.js';

const writeId = randomUUID();

describe('data names', () => {
  it('round-trip, zero-padded so that names sort in token order', () => {
    const small = { token: 35n, generation: 1, writeId };
    const large = { token: 9223372036854775807n, generation: 12, writeId };
    expect(formatDataName(small)).toBe(`0000000000000000035-1-${writeId}`);
    expect(parseDataName(formatDataName(small))).toEqual(small);
    expect(parseDataName(formatDataName(large))).toEqual(large);
    expect([formatDataName(large), formatDataName(small)].sort()[0]).toBe(formatDataName(small));
    expect(dataKey('reports/daily.txt', small)).toBe(`reports/daily.txt.fencekeeper/${formatDataName(small)}`);
  });

  it.each([
    '', 'notes.txt', `35-1-${writeId}`, `0000000000000000000-1-${writeId}`, `9223372036854775808-1-${writeId}`,
    `0000000000000000035-0-${writeId}`, `0000000000000000035-01-${writeId}`, '0000000000000000035-1-not-a-uuid',
    `0000000000000000035-1-${writeId.toUpperCase()}`, `0000000000000000035-1-${writeId}.bak`,
  ])('refuses %j', (text) => {
    expect(parseDataName(text)).toBeNull();
  });
});

describe('pointer metadata', () => {
  const state: PointerState = {
    generation: 3,
    generationSince: 1_700_000_000_000,
    data: { token: 35n, generation: 2, writeId },
    carried: { token: 30n, generation: 1, writeId: randomUUID() },
  };

  it('round-trips through fenceFromMetadata, names lower-cased or not', () => {
    const pointerWrite = randomUUID();
    const binding = { kind: 'lock', lock: 'jobs/a b', source: { kind: 'zookeeper', id: 'z-1' } } as const;
    const metadata = pointerMetadata(35n, pointerWrite, state, binding);
    const upper = Object.fromEntries(Object.entries(metadata).map(([k, v]) => [k.toUpperCase(), v]));
    for (const m of [metadata, upper]) {
      expect(fenceFromMetadata('s3://b/k', '"e"', m)).toEqual({
        etag: '"e"', layout: 'pointer', token: 35n, writeId: pointerWrite, tombstone: false, pointer: state, binding,
      });
    }
    expect(fenceFromMetadata('s3://b/k', '"e"', pointerMetadata(35n, pointerWrite, state, null)).binding).toBeNull();
    const tombstone = fenceFromMetadata('s3://b/k', '"e"', pointerMetadata(35n, pointerWrite, { ...state, data: null }, null));
    expect(tombstone.tombstone).toBe(true);
    expect(tombstone.pointer?.data).toBeNull();
    for (const name of Object.keys(metadata)) expect(isReservedMetadataName(name)).toBe(true);
  });

  it('pointer bytes differ for every write id, even for the same state', () => {
    const a = pointerBody(35n, randomUUID(), state);
    const b = pointerBody(35n, randomUUID(), state);
    expect(a).not.toBe(b);
    expect(md5Etag(a)).not.toBe(md5Etag(b));
    expect(JSON.parse(a)).toMatchObject({ fencekeeper: 'pointer', token: '35', data: formatDataName(state.data!), generation: 3 });
  });

  it.each([
    ['no token', { 'fencing-token': undefined }, CorruptFenceError],
    ['a bad token', { 'fencing-token': '035' }, InvalidTokenError],
    ['a bad generation', { 'fencing-generation': '1.5' }, CorruptFenceError],
    ['a generation past 2^53', { 'fencing-generation': '9007199254740993' }, CorruptFenceError],
    ['a bad generation start', { 'fencing-generation-since': '-1' }, CorruptFenceError],
    ['data from a later generation', { 'fencing-data': formatDataName({ token: 35n, generation: 4, writeId }) }, CorruptFenceError],
    ['a carried object of its own generation', { 'fencing-carried': formatDataName({ token: 35n, generation: 3, writeId }) }, CorruptFenceError],
    ['a tombstone that names data', { 'fencing-tombstone': '1' }, CorruptFenceError],
    ['a data object without a write id', { 'fencing-layout': 'data', 'fencing-write': undefined }, CorruptFenceError],
    ['a binding that does not parse', { 'fencing-lock': 'fk1:lock:zookeeper:z-1' }, CorruptFenceError],
    ['a binding of an unknown kind', { 'fencing-lock': 'fk1:mutex:zookeeper:z-1:a' }, CorruptFenceError],
    ['a binding in non-canonical percent-encoding', { 'fencing-lock': 'fk1:lock:zookeeper:z-1:a%2fb' }, CorruptFenceError],
  ] as const)('fails closed on %s, naming the object', (_, change, type) => {
    const metadata: Record<string, string | undefined> = { ...pointerMetadata(35n, randomUUID(), state, null), ...change };
    const defined = Object.fromEntries(Object.entries(metadata).filter((e): e is [string, string] => e[1] !== undefined));
    expect(() => fenceFromMetadata('s3://b/key-1', '"e"', defined)).toThrow(type);
    expect(() => fenceFromMetadata('s3://b/key-1', '"e"', defined)).toThrow(/s3:\/\/b\/key-1/);
  });
});

describe('pointer keys', () => {
  it('must leave room for the data names and not lie among data objects', () => {
    expect(() => checkPointerKey('k'.repeat(MAX_POINTER_KEY_BYTES))).not.toThrow();
    expect(() => checkPointerKey('k'.repeat(MAX_POINTER_KEY_BYTES + 1))).toThrow(InvalidArgumentError);
    expect(() => checkPointerKey('é'.repeat(MAX_POINTER_KEY_BYTES / 2 + 1))).toThrow(InvalidArgumentError); // bytes, not characters
    expect(() => checkPointerKey('a.fencekeeper/b')).toThrow(InvalidArgumentError);
    expect(() => checkPointerKey('a.fencekeeper')).not.toThrow();
    expect(Buffer.byteLength(dataKey('k'.repeat(MAX_POINTER_KEY_BYTES), { token: 2n ** 63n - 1n, generation: 2 ** 53 - 1, writeId }))).toBeLessThanOrEqual(1024);
  });

  it('no fenced write, in either layout, goes inside a data prefix', () => {
    expect(() => checkNotDataKey('reports/daily.txt.fencekeeper/notes')).toThrow(/inside the data prefix of "reports\/daily\.txt"/);
    expect(() => checkNotDataKey('.fencekeeper/x')).toThrow(InvalidArgumentError);
    expect(() => checkNotDataKey('a.fencekeeper')).not.toThrow();
    expect(() => checkNotDataKey('a/fencekeeper/b')).not.toThrow();
  });
});
