// RedisFenceStore: the core's FenceStore with the mark kept in Redis, for
// the Express guards of replicas that share only a Redis.
//
// Keys of resource R (the hash tag {R} keeps both in one cluster slot):
//   fencekeeper:fence:{R}       the mark, a canonical decimal, never expires
//   fencekeeper:fence-hold:{R}  the hold: "<admission id>", with the lease TTL
import { randomUUID } from 'node:crypto';
import { CorruptFenceError, InvalidArgumentError, StaleTokenError, parseToken, resolveFencing, formatToken, type FenceAdmission, type FenceMode, type FenceStore, type Fencing, type FencingToken } from '../../src/index.js';
import { fenceAdvances, publishRefused } from '../../src/extend.js';
import { send, where, type RedisCommands } from '../../src/shared/redis/client.js';
import { run, script } from '../../src/shared/redis/script.js';
import { checkClient, checkName, checkOptions, checkTimeout } from './input.js';
import { below, isToken } from './lua.js';

/**
 * Admit: compare with the mark, take the hold, advance the mark, in one
 * step. {1, previous mark or ''} admitted, {0, mark} stale, {2, hold's
 * PTTL} held by another admission, {-1, mark} corrupt.
 * KEYS mark, hold; ARGV token, admission id, lease ms, '0' check only
 * (the mark stays; none yet becomes 1, which admits every token as none
 * does) or '1' advance.
 */
const ADMIT = script(`
local mark = redis.call('GET', KEYS[1])
if mark then
  if not ${isToken('mark')} then return {-1, string.sub(mark, 1, 40)} end
  if ${below('ARGV[1]', 'mark')} then return {0, mark} end
end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return {2, redis.call('PTTL', KEYS[2])} end
if ARGV[4] == '0' then
  if not mark then redis.call('SET', KEYS[1], '1') end
elseif not mark or ${below('mark', 'ARGV[1]')} then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {1, mark or ''}
`);

/** Compare-and-pexpire the hold: 1 still ours (lease renewed), 0 not. KEYS hold; ARGV admission id, lease ms. */
const RENEW = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`);

/** Compare-and-delete the hold: 1 it was ours, 0 not (its lease had run out). KEYS hold; ARGV admission id. */
const RELEASE = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

/** RedisFenceStore's options: the lease of a hold on a resource (`leaseMs`, default 30 000, renewed while the process runs) and the reply timeout. */
export interface RedisFenceStoreOptions {
  /**
   * The hold's lease, in ms (default 30 000): renewed every third of it
   * while this process runs, so a live handler keeps the resource however
   * long it takes; a process that stops (paused, partitioned, dead) loses
   * the hold when the lease runs out, and the next admission proceeds
   * while it may still be running. Keep it above the longest pause you
   * want covered.
   */
  readonly leaseMs?: number;
  /** How long to wait for each Redis reply, in ms (default 10 000), then ConnectionLossError. */
  readonly timeoutMs?: number;
}

/**
 * A FenceStore whose marks and holds live in Redis, so replicas that share
 * only a Redis fence the same resources. Weaker than PostgresFenceStore in
 * two ways, by what Redis is:
 *
 * - The hold is a TTL lease, not a row lock. PostgresFenceStore's hold
 *   lasts as long as the admission's transaction, so a paused replica keeps
 *   the next admission waiting for as long as it is paused. Here the lease
 *   (renewed while the process runs) runs out while a replica is paused,
 *   and the next admission, with its larger token, proceeds: the two
 *   handlers may then overlap. The mark still refuses every smaller token
 *   afterwards, so writes that check the token themselves stay safe.
 * - The mark can go back. Redis acknowledges a write before it reaches
 *   disk or a replica: a failover to a replica that had not received it,
 *   or a restart without the data (no AOF with appendfsync always), loses
 *   the latest advances, and a stale token is admitted again.
 *   PostgreSQL commits the advance durably before admitting.
 *
 * Use it where the guarded work is itself fenced (fencedSet on the same
 * Redis, a store that checks the token) or where those grades are
 * acceptable; otherwise PostgresFenceStore.
 *
 * A Sequencer is compared by its token only: this store records no binding
 * (unlike PostgresFenceStore's bindFence). An admit whose reply is lost
 * (ConnectionLossError after `timeoutMs`) may have taken the hold: it is
 * freed when its lease runs out.
 *
 * Waiting: an admission that finds the resource held polls the hold (every
 * 5..50 ms, sooner as its lease ends), not in arrival order; `signal` ends
 * the wait. Every admission must be settled (commit() or abort()): an
 * abandoned one holds the resource until its lease runs out, which its
 * renewal never lets happen while the process lives.
 */
export class RedisFenceStore implements FenceStore<undefined> {
  readonly #redis: RedisCommands;
  readonly #where: string;
  readonly #leaseMs: number;
  readonly #timeoutMs: number;

  constructor(redis: RedisCommands, options?: RedisFenceStoreOptions) {
    checkClient(redis, 'RedisFenceStore');
    const o = checkOptions(options, 'RedisFenceStore', ['leaseMs', 'timeoutMs'], false);
    this.#redis = redis;
    this.#where = where(redis);
    this.#leaseMs = checkTimeout(o['leaseMs'] ?? 30_000, 'leaseMs');
    if (this.#leaseMs < 30) throw new InvalidArgumentError('RedisFenceStore: leaseMs must be at least 30');
    this.#timeoutMs = checkTimeout(o['timeoutMs']);
  }

  async current(resource: string): Promise<FencingToken | null> {
    checkName(resource, 'resource');
    const mark = (await send(this.#redis, this.#where, 'get', [keysOf(resource)[0]], this.#timeoutMs)) as string | null;
    return mark === null ? null : markOf(resource, mark);
  }

  /**
   * As FenceStore.admit; `advance: false` checks the mark without moving it
   * (admissions still take the hold one at a time: check-only readers wait
   * for each other here, they do not refuse each other).
   */
  async admit(resource: string, presented: Fencing, options?: { signal?: AbortSignal } & FenceMode): Promise<FenceAdmission<undefined>> {
    checkName(resource, 'resource');
    const token = resolveFencing(presented).token;
    const advance = fenceAdvances(options, 'RedisFenceStore.admit');
    const keys = keysOf(resource);
    const id = randomUUID();
    const args = [formatToken(token), id, this.#leaseMs, advance ? '1' : '0'];
    for (;;) {
      const [status, detail] = (await run(this.#redis, this.#where, ADMIT, keys, args, this.#timeoutMs)) as [number, string | number];
      if (status === 1) return new RedisAdmission(this, resource, token, detail === '' ? null : markOf(resource, String(detail)), keys[1], id);
      if (status === 0) {
        const error = new StaleTokenError(resource, token, markOf(resource, String(detail)));
        publishRefused('redis', error);
        throw error;
      }
      if (status === -1) throw new CorruptFenceError(resource, `the fence of ${resource} in Redis (${keys[0]}) holds no token: ${JSON.stringify(detail)}`);
      // Held: wait, then try again (the mark may have passed us meanwhile: then stale).
      await pause(Math.max(5, Math.min(50, Number(detail))), options?.signal);
    }
  }

  /** @internal */
  renew(hold: string, id: string): Promise<unknown> {
    return run(this.#redis, this.#where, RENEW, [hold], [id, this.#leaseMs], this.#timeoutMs);
  }

  /** @internal */
  release(hold: string, id: string): Promise<unknown> {
    return run(this.#redis, this.#where, RELEASE, [hold], [id], this.#timeoutMs);
  }

  /** @internal */
  get leaseMs(): number {
    return this.#leaseMs;
  }
}

class RedisAdmission implements FenceAdmission<undefined> {
  readonly resource: string;
  readonly token: FencingToken;
  readonly previous: FencingToken | null;
  readonly transaction = undefined;
  readonly #store: RedisFenceStore;
  readonly #hold: string;
  readonly #id: string;
  readonly #renewal: NodeJS.Timeout;
  #settled: Promise<void> | undefined;

  constructor(store: RedisFenceStore, resource: string, token: FencingToken, previous: FencingToken | null, hold: string, id: string) {
    this.resource = resource;
    this.token = token;
    this.previous = previous;
    this.#store = store;
    this.#hold = hold;
    this.#id = id;
    // A failed renewal changes nothing here: the lease then runs out, as a paused process's does.
    this.#renewal = setInterval(() => void store.renew(hold, id).catch(() => undefined), Math.floor(store.leaseMs / 3));
    this.#renewal.unref();
  }

  // The mark moved on admission and stays; both only free the hold (this
  // store has no transaction to keep or undo).
  commit(): Promise<void> {
    return this.#settle();
  }

  abort(): Promise<void> {
    return this.#settle();
  }

  #settle(): Promise<void> {
    if (this.#settled === undefined) {
      clearInterval(this.#renewal);
      this.#settled = this.#store.release(this.#hold, this.#id).then(() => undefined);
    }
    return this.#settled;
  }
}

function keysOf(resource: string): [mark: string, hold: string] {
  return [`fencekeeper:fence:{${resource}}`, `fencekeeper:fence-hold:{${resource}}`];
}

function markOf(resource: string, text: string): FencingToken {
  try {
    return parseToken(text);
  } catch (error) {
    throw new CorruptFenceError(resource, `the fence of ${resource} in Redis holds a malformed token: ${JSON.stringify(text.slice(0, 40))}`, { cause: error });
  }
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const done = (): void => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const aborted = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', aborted, { once: true });
  });
}
