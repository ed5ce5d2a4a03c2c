// What the fence keeps in an item, and the checks every write starts with:
// the attribute names, the key, the item's size, the stored token.
//
// The fence lives in the item itself: a number attribute (`fencing_token` by
// default) holding the token of the last write, on a tombstone (what
// fencedDeleteItem leaves) a boolean `fencing_deleted: true`, and on an item
// bound to a lock (binding.ts) a string `fencing_lock`. A token stored
// as anything but a number, or as a number that is not a token (0, negative,
// fractional, past 2^63-1), is a CorruptFenceError: never overwritten, never
// read as "stale" or "absent".
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { CorruptFenceError, InvalidArgumentError, parseToken, type FencingToken } from '../../src/index.js';

/** The number attribute that holds an item's token unless `tokenAttribute` says otherwise: 'fencing_token'. */
export const DEFAULT_TOKEN_ATTRIBUTE = 'fencing_token';
/** The boolean attribute that marks a tombstone unless `tombstoneAttribute` says otherwise: 'fencing_deleted'. */
export const DEFAULT_TOMBSTONE_ATTRIBUTE = 'fencing_deleted';
/** The string attribute that holds a bound item's lock unless `lockAttribute` says otherwise: 'fencing_lock'. */
export const DEFAULT_LOCK_ATTRIBUTE = 'fencing_lock';

/** DynamoDB's item size limit (names and values, UTF-8): 400 KB. */
export const MAX_ITEM_BYTES = 400 * 1024;

/** The names of the attributes the fence keeps in each item (token, tombstone mark, bound lock), if not the defaults. */
export interface FenceAttributeOptions {
  /** The number attribute that holds the token; default 'fencing_token'. */
  readonly tokenAttribute?: string;
  /** The boolean attribute that marks a tombstone; default 'fencing_deleted'. */
  readonly tombstoneAttribute?: string;
  /** The string attribute that holds the lock the item is bound to (binding.ts); default 'fencing_lock'. */
  readonly lockAttribute?: string;
}

export interface FenceAttributes {
  readonly token: string;
  readonly tombstone: string;
  readonly lock: string;
}

// A plain name: usable in an expression without a placeholder, in any tool,
// and never mistaken for a path ('a.b', 'a[0]'). The fence's own names are
// always sent through placeholders anyway; a name that would need escaping is
// refused so that what the guide says about them (and what an operator types
// in a console query) holds.
const PLAIN_NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
const LONE_SURROGATE = /\p{Cs}/u;

export function fenceAttributes(options: FenceAttributeOptions): FenceAttributes {
  const token = attributeOption('tokenAttribute', options.tokenAttribute, DEFAULT_TOKEN_ATTRIBUTE);
  const tombstone = attributeOption('tombstoneAttribute', options.tombstoneAttribute, DEFAULT_TOMBSTONE_ATTRIBUTE);
  const lock = attributeOption('lockAttribute', options.lockAttribute, DEFAULT_LOCK_ATTRIBUTE);
  if (new Set([token, tombstone, lock]).size !== 3) {
    throw new InvalidArgumentError(`tokenAttribute, tombstoneAttribute and lockAttribute must differ (${[token, tombstone, lock].map((n) => JSON.stringify(n)).join(', ')})`);
  }
  return { token, tombstone, lock };
}

function attributeOption(option: string, value: unknown, fallback: string): string {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !PLAIN_NAME.test(value)) {
    throw new InvalidArgumentError(`${option} must be a plain attribute name (a letter, then letters, digits or _; at most 64), got ${describe(value)}`);
  }
  return value;
}

/** An attribute name (or map key) DynamoDB stores as sent: no NUL, no lone surrogate (UTF-8 cannot carry one: the SDK would send U+FFFD, another name). */
export function checkName(what: string, name: string): void {
  if (name === '') throw new InvalidArgumentError(`${what}: an attribute name must not be empty`);
  if (name.includes('\0')) throw new InvalidArgumentError(`${what}: attribute name ${describe(name)} contains NUL`);
  if (LONE_SURROGATE.test(name)) throw new InvalidArgumentError(`${what}: attribute name ${describe(name)} contains a lone surrogate (not encodable as UTF-8)`);
}

export function checkTableName(table: unknown): string {
  if (typeof table !== 'string' || !/^[A-Za-z0-9_.-]{3,255}$/.test(table)) {
    throw new InvalidArgumentError(`TableName must be a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -), got ${describe(table)}`);
  }
  return table;
}

/**
 * A key (or an item's key attributes): a non-empty map of S, N or B values
 * whose names and strings carry no NUL and no lone surrogate. A key string
 * with a lone surrogate would be sent as U+FFFD and address another item.
 */
export function checkKey(key: unknown, what = 'Key'): Record<string, AttributeValue> {
  if (typeof key !== 'object' || key === null || Array.isArray(key) || Object.keys(key).length === 0) {
    throw new InvalidArgumentError(`${what} must be a map of attribute values, e.g. { pk: { S: 'doc-1' } }`);
  }
  for (const [name, value] of Object.entries(key as Record<string, unknown>)) {
    checkName(what, name);
    const v = value as { S?: unknown; N?: unknown; B?: unknown } | null;
    if (typeof v !== 'object' || v === null) throw new InvalidArgumentError(`${what}.${name} must be an attribute value ({ S }, { N } or { B })`);
    if (typeof v.S === 'string') {
      if (v.S === '') throw new InvalidArgumentError(`${what}.${name}: a key string must not be empty`);
      if (v.S.includes('\0')) throw new InvalidArgumentError(`${what}.${name}: key string ${describe(v.S)} contains NUL`);
      if (LONE_SURROGATE.test(v.S)) throw new InvalidArgumentError(`${what}.${name}: key string ${describe(v.S)} contains a lone surrogate (not encodable as UTF-8)`);
    } else if (typeof v.N !== 'string' && !(v.B instanceof Uint8Array)) {
      throw new InvalidArgumentError(`${what}.${name} must be { S: string }, { N: string } or { B: Uint8Array }`);
    }
  }
  return key as Record<string, AttributeValue>;
}

/** Every attribute name in an item, nested map keys included. */
export function checkItemNames(what: string, item: Record<string, AttributeValue>): void {
  for (const [name, value] of Object.entries(item)) {
    checkName(what, name);
    if (value !== null && typeof value === 'object') {
      if (value.M !== undefined) checkItemNames(`${what}.${name}`, value.M);
      if (value.L !== undefined) for (const element of value.L) if (element?.M !== undefined) checkItemNames(`${what}.${name}[]`, element.M);
    }
  }
}

/**
 * The item's size as DynamoDB counts it (UTF-8 bytes of names and strings,
 * numbers by their digits, binary by length, 1 byte per BOOL/NULL, 3 per
 * list or map plus 1 per element): at least what the service will count, so
 * an item refused here would be refused there, before a byte is sent.
 */
export function itemBytes(item: Record<string, AttributeValue>): number {
  let total = 0;
  for (const [name, value] of Object.entries(item)) total += Buffer.byteLength(name, 'utf8') + valueBytes(value);
  return total;
}

function valueBytes(value: AttributeValue): number {
  if (value.S !== undefined) return Buffer.byteLength(value.S, 'utf8');
  if (value.N !== undefined) return numberBytes(value.N);
  if (value.B !== undefined) return value.B.byteLength;
  if (value.BOOL !== undefined || value.NULL !== undefined) return 1;
  if (value.SS !== undefined) return value.SS.reduce((n, s) => n + Buffer.byteLength(s, 'utf8'), 0);
  if (value.NS !== undefined) return value.NS.reduce((n, s) => n + numberBytes(s), 0);
  if (value.BS !== undefined) return value.BS.reduce((n, b) => n + b.byteLength, 0);
  if (value.L !== undefined) return 3 + value.L.reduce((n, v) => n + 1 + valueBytes(v), 0);
  if (value.M !== undefined) return 3 + Object.entries(value.M).reduce((n, [k, v]) => n + 1 + Buffer.byteLength(k, 'utf8') + valueBytes(v), 0);
  return 0;
}

// DynamoDB: "approximately 1 byte per two significant digits, plus 1 byte".
function numberBytes(text: string): number {
  const digits = text.replace(/[^0-9]/g, '').replace(/^0+/, '').length;
  return Math.ceil(digits / 2) + 1;
}

export function checkItemSize(what: string, item: Record<string, AttributeValue>): void {
  const bytes = itemBytes(item);
  if (bytes > MAX_ITEM_BYTES) {
    throw new InvalidArgumentError(`${what} is ${bytes} bytes, the fence's attributes included, over DynamoDB's item limit of ${MAX_ITEM_BYTES} bytes (400 KB); nothing written`);
  }
}

/** The token an item carries: null when it has none (never written under a fence). */
export function storedToken(resource: string, item: Record<string, AttributeValue> | undefined, attribute: string): FencingToken | null {
  const value = item?.[attribute];
  if (value === undefined) return null;
  const type = Object.keys(value).find((k) => (value as unknown as Record<string, unknown>)[k] !== undefined && k !== '$unknown');
  if (type !== 'N' || typeof value.N !== 'string') {
    throw new CorruptFenceError(resource, `${resource} holds its fencing token ${attribute} as type ${type ?? 'unknown'}, not a number; refusing to overwrite or trust it (fail closed)`);
  }
  try {
    return parseToken(value.N);
  } catch (error) {
    throw new CorruptFenceError(resource, `${resource} holds ${attribute} = ${describe(value.N)}, not a token in 1..2^63-1; refusing to overwrite or trust it (fail closed)`, { cause: error });
  }
}

/** The resource name errors and traces use: table and key, e.g. docs{"pk":{"S":"a"}}. */
export function resourceName(table: string, key: Record<string, AttributeValue>): string {
  const names = Object.keys(key).sort();
  return `${table}${JSON.stringify(Object.fromEntries(names.map((n) => [n, key[n]])), (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('base64') : v))}`;
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  return typeof value;
}
