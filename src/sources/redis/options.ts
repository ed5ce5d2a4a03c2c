// Every argument checked before the first command: a bad call changes nothing.
import { InvalidArgumentError, type AcquireOptions } from '../../index.js';
import { DEFAULT_OWNER, assertLockName, safetyMargin } from '../../extend.js';
import type { RedisClient } from '../../shared/redis/client.js';

/** The settings of a Redis or Redlock source, fixed when it is made. */
export interface RedisLockSettings {
  /**
   * How long a grant lives on the server without a renewal (the key's TTL).
   * Default 10000; at most 2147483647 (24.8 days), the longest delay a Node
   * timer keeps.
   */
  readonly ttlMs?: number;
  /**
   * Redlock: how long one node may take to answer before it counts as down
   * for this round. Default a twentieth of the TTL, within [50, 500] ms.
   * Single instance: the limit on every command (default: the same).
   */
  readonly nodeTimeoutMs?: number;
}

/** acquireLock's options: every source's, and the settings above. */
export interface RedisAcquireOptions extends AcquireOptions, RedisLockSettings {}
/** tryAcquireLock's options over Redis: RedisAcquireOptions without `timeoutMs` (it never waits). */
export type RedisTryAcquireOptions = Omit<RedisAcquireOptions, 'timeoutMs'>;

export interface CheckedOptions {
  readonly ttlMs: number;
  readonly marginMs: number;
  readonly nodeTimeoutMs: number;
  readonly timeoutMs: number | undefined;
  readonly signal: AbortSignal | undefined;
  readonly owner: string;
}

export const DEFAULT_TTL_MS = 10_000;
/**
 * The longest TTL: every timer of a grant and of its waiters is at most a
 * TTL (the watchdog a third of it, the node timeout below it, a waiter's
 * sleep the holder's remaining TTL), and setTimeout turns a longer delay
 * into 1 ms: a waiter would poll and the watchdog renew in a tight loop.
 */
export const MAX_TTL_MS = 2_147_483_647;

let owner: string | undefined;
/** DEFAULT_OWNER (hostname:pid), checked once: a host name could carry a control character. */
const defaultOwner = (): string => (owner ??= checkOwner(DEFAULT_OWNER));
const MAX_NAME_BYTES = 512;

/** The name checkName last passed: a process that takes one lock again and again checks it once. */
let lastGoodName = '';

/**
 * A lock name becomes part of three keys and of a hash tag: printable, no
 * spaces (they separate the fields of a key's value), no braces (they would
 * end the hash tag early and scatter the keys of one lock), and a name every
 * sequencer can carry (well-formed Unicode: a lone surrogate would reach the
 * server as U+FFFD, one key for several names).
 */
export function checkName(name: unknown): string {
  if (name === lastGoodName && name !== '') return name;
  if (typeof name !== 'string' || name === '') throw new InvalidArgumentError('a Redis lock name must be a non-empty string');
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) throw new InvalidArgumentError(`a Redis lock name has at most ${MAX_NAME_BYTES} bytes, got ${Buffer.byteLength(name)}`);
  if (/[\s{}\p{Cc}]/u.test(name)) throw new InvalidArgumentError(`bad Redis lock name ${JSON.stringify(name)}: no spaces, braces or control characters`);
  assertLockName(name);
  lastGoodName = name;
  return name;
}

function checkOwner(owner: unknown): string {
  if (typeof owner !== 'string' || owner === '' || /\p{Cc}/u.test(owner)) throw new InvalidArgumentError('owner must be a non-empty string without control characters');
  return owner;
}

function positive(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw new InvalidArgumentError(`${what} must be a positive integer of milliseconds, got ${String(value)}`);
  }
  return value;
}

export function checkSettings(settings: RedisLockSettings | undefined): { ttlMs: number; nodeTimeoutMs: number } {
  const ttlMs = checkTtl(settings?.ttlMs);
  return { ttlMs, nodeTimeoutMs: checkNodeTimeout(settings?.nodeTimeoutMs, ttlMs) };
}

function checkTtl(ttlMs: number | undefined): number {
  if (ttlMs === undefined) return DEFAULT_TTL_MS;
  const checked = positive(ttlMs, 'ttlMs');
  if (checked > MAX_TTL_MS) throw new InvalidArgumentError(`ttlMs must be at most ${MAX_TTL_MS} (24.8 days, the longest delay a timer keeps), got ${checked}`);
  return checked;
}

function checkNodeTimeout(nodeTimeoutMs: number | undefined, ttlMs: number): number {
  const checked = nodeTimeoutMs === undefined ? Math.max(50, Math.min(500, Math.round(ttlMs / 20))) : positive(nodeTimeoutMs, 'nodeTimeoutMs');
  if (checked >= ttlMs) throw new InvalidArgumentError(`nodeTimeoutMs (${checked}) must be below ttlMs (${ttlMs})`);
  return checked;
}

export function checkOptions(options: RedisAcquireOptions | undefined, defaults: RedisLockSettings | undefined): CheckedOptions {
  if (options !== undefined && (typeof options !== 'object' || options === null)) throw new InvalidArgumentError('options must be an object');
  // A setting given with the call overrides the source's (without an object spread per acquire).
  const ttlMs = checkTtl(options?.ttlMs !== undefined ? options.ttlMs : defaults?.ttlMs);
  const nodeTimeoutMs = checkNodeTimeout(options?.nodeTimeoutMs !== undefined ? options.nodeTimeoutMs : defaults?.nodeTimeoutMs, ttlMs);
  const marginMs = safetyMargin(ttlMs, options?.safetyMarginMs);
  const timeoutMs = options?.timeoutMs === undefined ? undefined : checkTimeout(options.timeoutMs);
  const signal = options?.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new InvalidArgumentError('signal must be an AbortSignal');
  const owner = options?.owner === undefined ? defaultOwner() : checkOwner(options.owner);
  return { ttlMs, marginMs, nodeTimeoutMs, timeoutMs, signal, owner };
}

function checkTimeout(value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new InvalidArgumentError(`timeoutMs must be a non-negative number, got ${String(value)}`);
  return value;
}

function isClient(value: unknown): value is RedisClient {
  return typeof value === 'object' && value !== null && typeof (value as RedisClient).call === 'function' && typeof (value as RedisClient).duplicate === 'function';
}

/** One client (the single-instance lock) or at least three distinct ones (Redlock). */
export function checkTarget(target: unknown): RedisClient | readonly RedisClient[] {
  if (Array.isArray(target)) {
    if (target.length < 3) throw new InvalidArgumentError(`Redlock needs at least 3 independent Redis clients, got ${target.length}`);
    target.forEach((c, i) => {
      if (!isClient(c)) throw new InvalidArgumentError(`Redlock client ${i} is not a Redis client (an ioredis instance)`);
    });
    if (new Set(target).size !== target.length) throw new InvalidArgumentError('Redlock was given the same client object twice: each node must be an independent Redis server');
    return Object.freeze([...target]) as readonly RedisClient[];
  }
  if (!isClient(target)) throw new InvalidArgumentError('expected a Redis client (an ioredis instance) or an array of at least 3 for Redlock');
  return target;
}
