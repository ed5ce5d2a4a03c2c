import { InvalidTokenError } from './errors.js';

/**
 * A fencing token: a number that grows with every grant of one lock source,
 * so that a resource can refuse a write carrying a smaller one (a paused
 * holder's). Each source takes it from its own history: ZooKeeper the
 * creation zxid of the holder's queue node, etcd the create revision of its
 * key, Redis a counter. Always a bigint, never a JS number: a zxid is
 * (epoch << 32 | counter), past 2^53 once the epoch passes 2^21, and the
 * resources store tokens as signed 64-bit values (int8, a decimal header,
 * metadata) where a `number` would silently round two grants onto one value.
 */
export type FencingToken = bigint;

/** The largest token: PostgreSQL's int8, ZooKeeper's zxid and etcd's revision are all signed 64-bit. */
export const MAX_TOKEN: FencingToken = (1n << 63n) - 1n;

// Strict decimal: no sign, no leading zero, no exponent, no whitespace, ASCII
// digits only (\d would be ASCII in JS, but spell it out: a header value of
// Arabic-Indic digits must not parse). 19 digits is the width of 2^63-1.
const DECIMAL = /^[1-9][0-9]{0,18}$/;

/**
 * Parse a token from text (an HTTP header, S3 metadata, an environment
 * variable). Accepts exactly the decimal form `formatToken` writes, in
 * 1..2^63-1; anything else throws InvalidTokenError without echoing huge input.
 */
export function parseToken(text: string): FencingToken {
  if (typeof text !== 'string') {
    throw new InvalidTokenError(`a token must be a decimal string, got ${describe(text)}`);
  }
  if (!DECIMAL.test(text)) {
    throw new InvalidTokenError(`not a token (a decimal integer in 1..${MAX_TOKEN}): ${preview(text)}`);
  }
  const token = BigInt(text);
  if (token > MAX_TOKEN) {
    throw new InvalidTokenError(`token exceeds 2^63-1: ${preview(text)}`);
  }
  return token;
}

/** Check a value a caller passed as a token (bigint in 1..2^63-1) and return it. */
export function assertToken(value: unknown): FencingToken {
  if (typeof value !== 'bigint') {
    throw new InvalidTokenError(`a token must be a bigint, got ${describe(value)}`);
  }
  if (value < 1n || value > MAX_TOKEN) {
    throw new InvalidTokenError(`token out of range 1..2^63-1: ${value}`);
  }
  return value;
}

/** The canonical decimal form, the one `parseToken` reads back. */
export function formatToken(token: FencingToken): string {
  return assertToken(token).toString(10);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return `string ${preview(value)}`;
  return typeof value;
}

function preview(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text);
}
