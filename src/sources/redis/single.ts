// The single-instance lock: one Redis server holds the key and the counter.
//
// The grant and its token are one script: SET key value NX PX ttl and, only if
// it took, INCR of the lock's counter. Every later grant of the lock on this
// server gets a larger token, for as long as the server keeps its data: a
// failover to a replica that had not received the last INCR, or a restart
// without the data, can hand the lock out twice AND repeat a token. Use it
// where a rare double grant costs efficiency, not correctness; for the rest,
// Redlock over independent nodes with persistence, or a consensus source.
import { randomBytes } from 'node:crypto';
import { ProtocolError, type FencingToken, type SourceIdentity } from '../../index.js';
import { send, where, type RedisClient } from '../../shared/redis/client.js';
import { now } from '../../shared/redis/deadlines.js';
import { grantsOf, holdGrant, type GrantKey, type RedisLock, type Renewal } from './held-lock.js';
import type { CheckedOptions } from './options.js';
import { ACQUIRE, ACQUIRE_FIRST, RELEASE, RENEW, WAKE_CHANNEL, lockKeys } from './scripts.js';
import { redisSourceIds } from './source-id.js';
import { keepGrant, waitAfterRefusal, type Attempt } from './waiting.js';

// A value no other grant of any lock ever carries, so the compare-and-*
// scripts tell our key from a successor's: 120 random bits per process, and a
// counter within it.
const PROCESS_ID = randomBytes(15).toString('base64url');
let grants = 0;

export function grantValue(owner: string): string {
  return `${PROCESS_ID}.${(++grants).toString(36)} ${owner}`;
}

export function toToken(reply: unknown): FencingToken {
  if (typeof reply === 'number' && Number.isSafeInteger(reply) && reply > 0) return BigInt(reply);
  if (typeof reply === 'string' && /^[1-9][0-9]*$/.test(reply)) return BigInt(reply);
  throw new ProtocolError(`a lock counter must be a positive integer, got ${JSON.stringify(reply)}`);
}

// A release without an answer changes nothing: the key, if it is still there, ends with its TTL.
const nothing = (): void => undefined;

/** One lock name on one client: the attempts of one acquire. */
class SingleLockKey {
  readonly #client: RedisClient;
  readonly #at: string;
  readonly #name: string;
  readonly #options: CheckedOptions;
  readonly #lockKey: string;
  readonly #counterKey: string;
  readonly #waitersKey: string;

  constructor(client: RedisClient, name: string, options: CheckedOptions) {
    this.#client = client;
    this.#at = where(client);
    this.#name = name;
    this.#options = options;
    [this.#lockKey, this.#counterKey, this.#waitersKey] = lockKeys(name);
  }

  /**
   * One run of the acquire script (`entry` '': the first attempt, without a
   * place in the waiter list): the lock, or how long until the holder's key may expire (ms).
   */
  async attempt(entry: string): Promise<RedisLock | number> {
    const { ttlMs, nodeTimeoutMs } = this.#options;
    const value = grantValue(this.#options.owner);
    const sentAt = now();
    let reply: unknown;
    try {
      reply = await (entry === ''
        ? send(this.#client, this.#at, 'evalsha', [ACQUIRE_FIRST.sha, 2, this.#lockKey, this.#counterKey, value, ttlMs], nodeTimeoutMs, ACQUIRE_FIRST.text)
        : send(this.#client, this.#at, 'evalsha', [ACQUIRE.sha, 3, this.#lockKey, this.#counterKey, this.#waitersKey, value, ttlMs, entry], nodeTimeoutMs, ACQUIRE.text));
    } catch (error) {
      // It may still run on the server: the compare-and-delete queued behind it undoes it.
      void this.release(value);
      throw error;
    }
    if (typeof reply === 'number' && reply > 0) {
      const parts = { name: this.#name, token: toToken(reply), grants: grantsOf(this.#client, 'Redis'), marginMs: this.#options.marginMs, ttlMs, validUntil: sentAt + ttlMs };
      return holdGrant(parts, new SingleGrantKey(this, value));
    }
    // Refused: -3 - the holder's PTTL (-1: the key went meanwhile; -2: a key without a TTL, set by someone else).
    if (typeof reply !== 'number' || !Number.isSafeInteger(reply) || reply === 0) throw new ProtocolError(`unexpected reply to the lock script: ${JSON.stringify(reply)}`);
    // At most our own TTL, as Redlock's: a waiter's sleep stays within a timer's range (options.ts MAX_TTL_MS) whatever TTL the holder set.
    return reply === -1 ? 0 : reply === -2 ? ttlMs : Math.min(ttlMs, -reply - 3 + 1);
  }

  /** An attempt of the waiting loop (./waiting.ts), with this waiter's entry. */
  async waitingAttempt([entry = '']: readonly string[]): Promise<Attempt<RedisLock>> {
    const result = await this.attempt(entry);
    return typeof result === 'number' ? { retryInMs: result } : { granted: result };
  }

  /** Compare-and-extend the key carrying `value`: 1 if it was still ours. */
  async renew(value: string): Promise<Renewal> {
    const { ttlMs, nodeTimeoutMs } = this.#options;
    const sentAt = now();
    const r = await send(this.#client, this.#at, 'evalsha', [RENEW.sha, 1, this.#lockKey, value, ttlMs], nodeTimeoutMs, RENEW.text);
    return r === 1 ? { validUntil: sentAt + ttlMs } : 'refused';
  }

  /** Compare-and-delete the key carrying `value`, and wake a waiter. */
  release(value: string): Promise<void> {
    return send(this.#client, this.#at, 'evalsha', [RELEASE.sha, 2, this.#lockKey, this.#waitersKey, value, WAKE_CHANNEL], this.#options.nodeTimeoutMs, RELEASE.text).then(nothing, nothing);
  }

  identity(): SourceIdentity | undefined {
    return redisSourceIds.known(this.#client);
  }
}

/** One grant's key: its value, on its lock's key. */
class SingleGrantKey implements GrantKey {
  readonly #key: SingleLockKey;
  readonly #value: string;

  constructor(key: SingleLockKey, value: string) {
    this.#key = key;
    this.#value = value;
  }

  renew(): Promise<Renewal> {
    return this.#key.renew(this.#value);
  }

  release(): Promise<void> {
    return this.#key.release(this.#value);
  }

  identity(): SourceIdentity | undefined {
    return this.#key.identity();
  }
}

const giveBack = (lock: RedisLock): Promise<void> => lock.release();

export async function acquireSingle(client: RedisClient, name: string, options: CheckedOptions, mode: 'wait' | 'try'): Promise<RedisLock | null> {
  const { signal } = options;
  signal?.throwIfAborted();
  const key = new SingleLockKey(client, name, options);
  // First without a place in the queue: an uncontended acquire costs no subscriber (./waiting.ts).
  const first = await key.attempt('');
  let lock: RedisLock;
  if (typeof first !== 'number') lock = signal?.aborted ? await keepGrant(signal, first, giveBack) : first;
  else if (mode === 'try') return null;
  else lock = await waitAfterRefusal([client], name, options, (entries) => key.waitingAttempt(entries), giveBack);
  // The client's first grant: its identity is read before the grant is handed out (../../src/source-identity.ts).
  if (redisSourceIds.known(client) === undefined) {
    try {
      await redisSourceIds.of(client, options.nodeTimeoutMs);
    } catch (error) {
      await lock.release().catch(() => undefined);
      throw error;
    }
  }
  return lock;
}
