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
import { ProtocolError, type FencingToken } from '../../src/index.js';
import { now, where, type RedisClient } from './client.js';
import { clockFor, holdGrant, type RedisLock } from './held-lock.js';
import type { CheckedOptions } from './options.js';
import { ACQUIRE, RELEASE, RENEW, WAKE_CHANNEL, lockKeys, run } from './scripts.js';
import { redisSourceIds } from './source-id.js';
import { acquireLoop, type Attempt } from './waiting.js';

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

export async function acquireSingle(client: RedisClient, name: string, options: CheckedOptions, mode: 'wait' | 'try'): Promise<RedisLock | null> {
  const at = where(client);
  const keys = lockKeys(name);
  const [lockKey, , waitersKey] = keys;
  const { ttlMs, nodeTimeoutMs } = options;

  const release = async (value: string): Promise<void> => {
    await run(client, at, RELEASE, [lockKey, waitersKey], [value, WAKE_CHANNEL], nodeTimeoutMs).catch(() => {
      // No answer: the key, if it is still there, ends with its TTL.
    });
  };

  const attempt = async ([entry = '']: readonly string[]): Promise<Attempt<RedisLock>> => {
    const value = grantValue(options.owner);
    const sentAt = now();
    let reply: unknown;
    try {
      reply = await run(client, at, ACQUIRE, keys, [value, ttlMs, entry], nodeTimeoutMs);
    } catch (error) {
      // It may still run on the server: the compare-and-delete queued behind it undoes it.
      void release(value);
      throw error;
    }
    const [granted, n] = Array.isArray(reply) ? (reply as unknown[]) : [];
    if (granted === 1) {
      const token = toToken(n);
      return {
        granted: holdGrant({
          name,
          token,
          clock: clockFor(client, 'Redis'),
          marginMs: options.marginMs,
          ttlMs,
          validUntil: sentAt + ttlMs,
          async renew() {
            const renewSentAt = now();
            const r = await run(client, at, RENEW, [lockKey], [value, ttlMs], nodeTimeoutMs);
            return r === 1 ? { validUntil: renewSentAt + ttlMs } : 'refused';
          },
          release: () => release(value),
          identity: () => redisSourceIds.known(client),
        }),
      };
    }
    if (granted !== 0 || typeof n !== 'number') throw new ProtocolError(`unexpected reply to the lock script: ${JSON.stringify(reply)}`);
    // n: the holder's remaining TTL (-1: a key without one, set by someone else; -2: gone meanwhile)
    return { retryInMs: n === -2 ? 0 : n === -1 ? ttlMs : n + 1 };
  };

  return redisSourceIds.afterGrant(client, acquireLoop([client], name, options, mode, attempt, (lock) => lock.release()), (lock) => lock.release(), nodeTimeoutMs);
}
