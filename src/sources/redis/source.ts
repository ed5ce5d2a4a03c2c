// The entry's functions: one client is the single-instance lock, an array of
// independent clients is Redlock. And both as a LockSource.
import { type LockSource, type LockStatus, type LockStatusEntry, type AcquireOptions, type TryAcquireOptions } from '../../index.js';
import { traceAcquire } from '../../extend.js';
import { send, where, type RedisClient } from '../../shared/redis/client.js';
import type { RedisLock } from './held-lock.js';
import { checkName, checkOptions, checkSettings, checkTarget, type CheckedOptions, type RedisAcquireOptions, type RedisLockSettings, type RedisTryAcquireOptions } from './options.js';
import { acquireRedlock, canonicalSet, checkDistinctServers, quorumOf } from './redlock.js';
import { RESERVED, lockKeys } from './scripts.js';
import { acquireSingle, toToken } from './single.js';

/** A single client or an array of at least three independent ones (Redlock). */
export type RedisTarget = RedisClient | readonly RedisClient[];

function acquire(target: RedisTarget, name: string, options: RedisAcquireOptions | undefined, mode: 'wait' | 'try', defaults?: RedisLockSettings): Promise<RedisLock | null> {
  // Every check before the first command: a bad call sends nothing (and rejects: it never throws).
  let checked: RedisTarget;
  let o: CheckedOptions;
  try {
    checked = checkTarget(target);
    checkName(name);
    o = checkOptions(options, defaults);
  } catch (error) {
    return Promise.reject(error);
  }
  return Array.isArray(checked) ? acquireRedlock(checked, name, o, mode) : acquireSingle(checked as RedisClient, name, o, mode);
}

/**
 * Wait for the lock and return it, with a fencing token larger than any
 * earlier grant's of this lock on this server (or this Redlock set).
 * Rejects with LockTimeoutError after `timeoutMs`, with the signal's reason
 * when it aborts (nothing left behind either way). A single server that does
 * not answer within the node timeout: ConnectionLossError; Redlock:
 * QuorumError when fewer than a majority of its nodes answer. Both are
 * retryable, and neither leaves a key behind where a server answers.
 */
export function acquireLock(target: RedisTarget, name: string, options?: RedisAcquireOptions): Promise<RedisLock> {
  // The acquire's own promise, not an async wrapper around it (one hop less on every acquire).
  return traceAcquire(Array.isArray(target) ? 'redlock' : 'redis', name, 'wait', () => acquire(target, name, options, 'wait')) as Promise<RedisLock>;
}

/** Take the lock only if it is free now; null otherwise, leaving nothing behind. */
export function tryAcquireLock(target: RedisTarget, name: string, options?: RedisTryAcquireOptions): Promise<RedisLock | null> {
  return traceAcquire(Array.isArray(target) ? 'redlock' : 'redis', name, 'try', () => acquire(target, name, options, 'try'));
}

/** A lock's holder as the server(s) show it; Redis keeps no queue of waiters with tokens, so `waiters` is empty. */
export interface RedisLockStatusEntry extends LockStatusEntry {
  /** The lock key. */
  readonly key: string;
}

/**
 * Who holds the lock `name` now, as the server(s) show it: on one client its
 * key and counter; on Redlock's clients the holder a majority of nodes carry,
 * with the token a majority of those carry (a grant still fixing its token
 * shows no holder yet). A reservation made by a release for the waiter it
 * woke is no holder. Redlock clients that reach one server twice (by run_id)
 * are refused with INVALID_ARGUMENT, as at acquire: such a read could count
 * one server twice toward a majority.
 */
export async function lockStatus(target: RedisTarget, name: string, options?: Pick<RedisLockSettings, 'nodeTimeoutMs'>): Promise<LockStatus<RedisLockStatusEntry>> {
  const checked = checkTarget(target);
  checkName(name);
  const { nodeTimeoutMs } = checkSettings(options);
  const clients: readonly RedisClient[] = Array.isArray(checked) ? canonicalSet(checked) : [checked as RedisClient];
  if (clients.length > 1) await checkDistinctServers(clients, nodeTimeoutMs);
  const [lockKey, counterKey] = lockKeys(name);
  const read = await Promise.all(
    clients.map((c) =>
      send(c, where(c), 'mget', [lockKey, counterKey], nodeTimeoutMs).then(
        (r) => (Array.isArray(r) ? (r as unknown[]) : []),
        (error: unknown) => {
          if (clients.length === 1) throw error;
          return [];
        },
      ),
    ),
  );
  // The value a majority carries is the holder's (one client: its only value),
  // and its token the counter a majority of those nodes carry: a Redlock grant
  // stands only where a majority set the counter to its token, and a node
  // that took the SET without that (its counter already higher, or never
  // raised) shows another.
  const needed = clients.length === 1 ? 1 : quorumOf(clients.length);
  const counts = new Map<string, { count: number; tokens: Map<bigint, number> }>();
  for (const [value, counter] of read) {
    // A reservation (a release handing the lock to the waiter it woke) is no grant: no holder there yet.
    if (typeof value !== 'string' || value.startsWith(RESERVED)) continue;
    const token = typeof counter === 'string' ? toToken(counter) : 0n;
    let seen = counts.get(value);
    if (seen === undefined) counts.set(value, (seen = { count: 0, tokens: new Map() }));
    seen.count++;
    seen.tokens.set(token, (seen.tokens.get(token) ?? 0) + 1);
  }
  for (const [value, { count, tokens }] of counts) {
    // A grant still being made: Redlock claims the key on the nodes first and
    // may fix its token (the counter) a round trip later, so a key whose lock
    // has no token on a majority yet has no token to show.
    if (count < needed) continue;
    const token = [...tokens].find(([t, k]) => t !== 0n && k >= needed)?.[0];
    if (token === undefined) continue;
    const space = value.indexOf(' ');
    return { name, holder: { token, owner: space < 0 ? '' : value.slice(space + 1), key: lockKey }, waiters: [] };
  }
  return { name, holder: null, waiters: [] };
}

export interface RedisSource extends LockSource {
  readonly kind: 'redis' | 'redlock';
  /** The TTL and node timeout every grant of this source uses (the defaults filled in). */
  readonly settings: Readonly<Required<RedisLockSettings>>;
  acquireLock(name: string, options?: AcquireOptions): Promise<RedisLock>;
  tryAcquireLock(name: string, options?: TryAcquireOptions): Promise<RedisLock | null>;
  lockStatus(name: string): Promise<LockStatus<RedisLockStatusEntry>>;
}

/**
 * Redis (one client) or Redlock (an array) as a LockSource, its TTL and node
 * timeout fixed here. Closing the clients stays their owner's job.
 */
export function redisSource(target: RedisTarget, settings?: RedisLockSettings): RedisSource {
  const checked = checkTarget(target);
  const fixed = Object.freeze(checkSettings(settings));
  const redlock = Array.isArray(checked);
  const bound: RedisTarget = redlock ? canonicalSet(checked as readonly RedisClient[]) : checked;
  const clients: readonly RedisClient[] = redlock ? (bound as readonly RedisClient[]) : [bound as RedisClient];
  const only = (options: object | undefined): RedisAcquireOptions => {
    // The source's settings are fixed: a caller's own ttlMs would make two holders of one source disagree.
    const { ttlMs: _t, nodeTimeoutMs: _n, ...rest } = (options ?? {}) as RedisAcquireOptions;
    return rest;
  };
  return Object.freeze({
    kind: redlock ? 'redlock' : 'redis',
    description: `${redlock ? 'Redlock over' : 'Redis at'} ${clients.map(where).join(', ')} (ttl ${fixed.ttlMs} ms)`,
    settings: fixed,
    acquireLock: (name: string, options?: AcquireOptions) => acquire(bound, name, only(options), 'wait', fixed) as Promise<RedisLock>,
    tryAcquireLock: (name: string, options?: TryAcquireOptions) => acquire(bound, name, only(options), 'try', fixed),
    lockStatus: (name: string) => lockStatus(bound, name, { nodeTimeoutMs: fixed.nodeTimeoutMs }),
  } as const);
}
