// Checks on what a caller passes the Redis fences, made before any I/O: a
// bad key, value or option is an InvalidArgumentError and nothing is sent.
import { InvalidArgumentError } from '../../src/index.js';
import type { RedisCommands } from '../../src/shared/redis/client.js';

// A lone surrogate cannot be encoded in UTF-8: ioredis would send U+FFFD
// instead, so two different names would share one key.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** The node timeout when a call names none: a command not answered by then rejects (ConnectionLossError). */
export const DEFAULT_TIMEOUT_MS = 10_000;

export function checkClient(redis: unknown, fn: string): asserts redis is RedisCommands {
  if (typeof redis !== 'object' || redis === null || typeof (redis as { call?: unknown }).call !== 'function') {
    throw new InvalidArgumentError(`${fn} needs an ioredis client (an object with call())`);
  }
}

/**
 * A Redis key or fence resource name: a non-empty string without NUL and
 * without lone surrogates (Redis would store a lone surrogate as U+FFFD, so
 * two different names would share one fence).
 */
export function checkName(name: unknown, what: string): asserts name is string {
  if (typeof name !== 'string' || name.length === 0) throw new InvalidArgumentError(`${what} must be a non-empty string`);
  if (name.includes('\0')) throw new InvalidArgumentError(`${what} must not contain NUL`);
  if (LONE_SURROGATE.test(name)) throw new InvalidArgumentError(`${what} must not contain lone surrogates (they would be stored as U+FFFD)`);
}

export function checkValue(value: unknown): asserts value is string | Buffer {
  if (typeof value === 'string') {
    if (LONE_SURROGATE.test(value)) throw new InvalidArgumentError('value must not contain lone surrogates (they would be stored as U+FFFD); pass a Buffer for binary data');
    return;
  }
  if (!Buffer.isBuffer(value)) throw new InvalidArgumentError(`value must be a string or a Buffer, got ${value === null ? 'null' : typeof value}`);
}

export function checkTimeout(ms: unknown, what = 'timeoutMs'): number {
  if (ms === undefined) return DEFAULT_TIMEOUT_MS;
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 1 || ms > 2_147_483_647) throw new InvalidArgumentError(`${what} must be a positive integer of milliseconds`);
  return ms;
}

/** Option names that would put a TTL on a fenced key, refused with a reason (the fence would expire with the value). */
const EXPIRY = new Set(['ttl', 'ttlMs', 'ex', 'px', 'exat', 'pxat', 'expire', 'expireMs', 'expiresIn', 'keepTtl']);

/** The options object of a call: undefined or a plain object with only `allowed` keys. */
export function checkOptions(options: unknown, fn: string, allowed: readonly string[], refuseExpiry = true): Record<string, unknown> {
  if (options === undefined) return {};
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new InvalidArgumentError(`${fn}: options must be an object`);
  for (const key of Object.keys(options)) {
    if (refuseExpiry && EXPIRY.has(key)) {
      throw new InvalidArgumentError(`${fn}: a fenced key takes no TTL (${key}): expiring the key would erase its fence with its value, and a stale holder's write would then pass; delete it with fencedDelete instead`);
    }
    if (!allowed.includes(key)) throw new InvalidArgumentError(`${fn}: unknown option ${key}`);
  }
  return options as Record<string, unknown>;
}
