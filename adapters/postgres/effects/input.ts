// What withEffect() and the ledger listing accept, checked before any SQL
// is built (a bad argument throws InvalidArgumentError or InvalidTokenError
// and nothing is sent), and the idempotency key derived from an effect.
import { createHash } from 'node:crypto';
import { InvalidArgumentError } from '../../../src/index.js';
import { isKysely, isPgQueryable } from '../database.js';
import { checkResource, describe } from '../identifiers.js';

/** The largest delay a timer keeps, and the largest integer column value here. */
export const MAX_INT32 = 2_147_483_647;

/** Effect keys name one action of the caller's (an order id, a message id): short. */
const MAX_KEY_LENGTH = 1024;

// A lone surrogate cannot be encoded in UTF-8: node-postgres would send U+FFFD
// instead, so two different keys would share one ledger row.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Text PostgreSQL can store exactly as given: no NUL, well-formed UTF-16. */
export function checkText(value: unknown, what: string, maxLength = Number.POSITIVE_INFINITY): string {
  if (typeof value !== 'string' || value.length === 0) throw new InvalidArgumentError(`${what} must be a non-empty string, got ${describe(value)}`);
  if (value.length > maxLength) throw new InvalidArgumentError(`${what} must be at most ${maxLength} characters, got ${value.length}`);
  if (value.includes('\u0000')) throw new InvalidArgumentError(`${what} must not contain NUL characters (PostgreSQL text cannot hold them)`);
  if (LONE_SURROGATE.test(value)) throw new InvalidArgumentError(`${what} must be well-formed Unicode (it holds a lone surrogate)`);
  return value;
}

export function checkEffectResource(value: unknown): string {
  return checkText(checkResource(value), 'resource');
}

export function checkEffectKey(value: unknown): string {
  return checkText(value, 'key', MAX_KEY_LENGTH);
}

export function checkQueryable(db: unknown, what: string): void {
  if (!isKysely(db) && !isPgQueryable(db)) throw new InvalidArgumentError(`${what} needs a pg.Pool or a Kysely instance, got ${describe(db)}`);
}

export function checkDatabase(db: unknown, what: string): void {
  const connects = typeof (db as { connect?: unknown } | null)?.connect === 'function';
  const transacts = typeof (db as { transaction?: unknown } | null)?.transaction === 'function';
  if (!(isKysely(db) && transacts) && !(isPgQueryable(db) && connects)) {
    throw new InvalidArgumentError(`${what} needs a pg.Pool or a Kysely instance, got ${describe(db)}`);
  }
}

export function checkObject(value: unknown, what: string): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidArgumentError(`${what} must be an object, got ${describe(value)}`);
  return value as Record<string, unknown>;
}

export function optionalFunction<F>(value: unknown, what: string): F | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') throw new InvalidArgumentError(`${what} must be a function, got ${describe(value)}`);
  return value as F;
}

export function optionalBoolean(value: unknown, what: string): boolean | undefined {
  if (value === undefined || typeof value === 'boolean') return value;
  throw new InvalidArgumentError(`${what} must be a boolean, got ${describe(value)}`);
}

export function optionalSignal(value: unknown, what: string): AbortSignal | undefined {
  if (value === undefined || value instanceof AbortSignal) return value;
  throw new InvalidArgumentError(`${what} must be an AbortSignal, got ${describe(value)}`);
}

/** An integer in min..max, or undefined. */
export function optionalInteger(value: unknown, what: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(`${what} must be an integer in ${min}..${max}, got ${typeof value === 'number' ? value : describe(value)}`);
  }
  return value;
}

/** A finite number (an instant on the performance.now() clock), or undefined. */
export function optionalInstant(value: unknown, what: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new InvalidArgumentError(`${what} must be a finite number (a performance.now() instant, such as lock.deadline), got ${describe(value)}`);
  return value;
}

/**
 * The Idempotency-Key the outside system sees for an effect's attempt: the
 * same for every holder and every retry of that attempt (so an API that
 * deduplicates by key executes it once), different for another effect and
 * for a later attempt of a failed one (most APIs replay a failure for a key
 * they have seen). A UUID (RFC 9562 §5.8, version 8: its bits are ours to
 * choose) from SHA-256 over the resource, the key and the attempt: the format
 * payment and messaging APIs accept, and the draft's recommendation.
 */
export function effectIdempotencyKey(resource: string, key: string, attempt = 1): string {
  checkEffectResource(resource);
  checkEffectKey(key);
  optionalInteger(attempt, 'attempt', 1, MAX_INT32);
  // JSON of an array: an unambiguous encoding of the three parts.
  const digest = createHash('sha256').update(JSON.stringify(['fencekeeper.effect.v1', resource, key, attempt])).digest();
  digest[6] = (digest[6]! & 0x0f) | 0x80; // version 8
  digest[8] = (digest[8]! & 0x3f) | 0x80; // variant 10
  const hex = digest.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}
