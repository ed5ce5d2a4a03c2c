// Redis keys as a fenced resource. Each fenced key is one hash:
//   value   the user's value (absent after fencedDelete: a tombstone)
//   token   the largest token that has written it, a canonical decimal
// One key, so a cluster never puts the value and its fence in different
// slots, and one Lua script per write, so the compare and the write are one
// step the server runs atomically (no paused holder between them).
import { CorruptFenceError, StaleTokenError, formatToken, parseToken, publishRefused, resolveFencing, type Fencing, type FencingToken } from '../../src/index.js';
import { send, where, type RedisCommands } from '../../src/shared/redis/client.js';
import { run, script } from '../../src/shared/redis/script.js';
import { checkClient, checkName, checkOptions, checkTimeout, checkValue } from './input.js';
import { below, isToken } from './lua.js';

// The fence of KEYS[1], read by every write script: a missing key is
// {nil}; a key of another type, or a hash without a well-formed token
// field, is returned as a refusal ({-1, what}) before anything is written.
const READ_FENCE = `
local cur = redis.pcall('HGET', KEYS[1], 'token')
if type(cur) == 'table' and cur.err then return {-1, redis.call('TYPE', KEYS[1]).ok} end
if not cur then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-1, 'hash without a token field'} end
elseif not ${isToken('cur')} then
  return {-1, 'token field ' .. string.sub(cur, 1, 40)}
elseif ${below('ARGV[1]', 'cur')} then
  return {0, cur}
end`;

/**
 * Write the value under the fence: {1, previous token or ''} written,
 * {0, current} stale, {-1, what} corrupt. KEYS key; ARGV token, value.
 */
const SET = script(`${READ_FENCE}
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
return {1, cur or ''}
`);

/**
 * Delete the value, keep (or raise) the fence: {1, 1 if a value was there
 * else 0} deleted, {0, current} stale, {-1, what} corrupt. KEYS key; ARGV token.
 */
const DELETE = script(`${READ_FENCE}
local had = redis.call('HDEL', KEYS[1], 'value')
redis.call('HSET', KEYS[1], 'token', ARGV[1])
return {1, had}
`);

export interface FencedWriteOptions {
  /**
   * How long to wait for Redis's reply, in ms (default 10 000); then the call
   * rejects with ConnectionLossError. The script is not withdrawn: it may
   * still run, so the outcome is unknown (write again with the same token:
   * equal passes).
   */
  readonly timeoutMs?: number;
}

export interface FencedValue {
  /** The stored value, as ioredis decodes a reply (a UTF-8 string). */
  readonly value: string;
  /** The token of the write that stored it (the key's fence). */
  readonly token: FencingToken;
}

/**
 * Write `value` to the Redis key `key` if `fencing`'s token is not below the
 * key's fence: equal passes (the same holder writes again), larger advances
 * the fence, smaller rejects with StaleTokenError carrying the current token
 * and writes nothing. The compare and the write are one Lua script.
 *
 * `key` holds a hash (fields `value` and `token`), so read it back with
 * fencedGet, not GET. `fencing` is what the core's fencing input takes: a
 * token, a Sequencer (its token is compared; the Redis fences record no
 * binding), or CURRENT_LOCK inside withLock.
 *
 * No TTL: an expiring key would take its fence with it and a stale holder's
 * write would then pass, so TTL options are refused (InvalidArgumentError),
 * and a fenced key must not be given one with EXPIRE either.
 *
 * Rejects with CorruptFenceError (nothing written) when the key holds
 * another type, or a hash whose token field is missing or malformed;
 * InvalidArgumentError / InvalidTokenError for bad input (nothing sent).
 */
export async function fencedSet(redis: RedisCommands, key: string, value: string | Buffer, fencing: Fencing, options?: FencedWriteOptions): Promise<void> {
  checkClient(redis, 'fencedSet');
  checkName(key, 'key');
  checkValue(value);
  const token = resolveFencing(fencing).token;
  const timeoutMs = checkTimeout(checkOptions(options, 'fencedSet', ['timeoutMs'])['timeoutMs']);
  const reply = await run(redis, where(redis), SET, [key], [formatToken(token), value], timeoutMs);
  settle(key, token, reply);
}

/**
 * Delete the value of the fenced key `key`, keeping its fence: the hash
 * stays with its token field only (a tombstone), so a stale holder cannot
 * write the key again after the delete. Afterwards fencedGet returns null
 * and readFence the token. The same compare as fencedSet (equal passes,
 * smaller is StaleTokenError, larger advances), also on a key that does
 * not exist (the tombstone then records the token). Resolves true when a
 * value was there.
 */
export async function fencedDelete(redis: RedisCommands, key: string, fencing: Fencing, options?: FencedWriteOptions): Promise<boolean> {
  checkClient(redis, 'fencedDelete');
  checkName(key, 'key');
  const token = resolveFencing(fencing).token;
  const timeoutMs = checkTimeout(checkOptions(options, 'fencedDelete', ['timeoutMs'])['timeoutMs']);
  const reply = await run(redis, where(redis), DELETE, [key], [formatToken(token)], timeoutMs);
  return settle(key, token, reply) === 1;
}

/**
 * The value of the fenced key `key` and the token that wrote it, in one
 * read (HMGET); null when the key does not exist or holds a tombstone
 * (fencedDelete). CorruptFenceError when the key holds another type, or
 * a value without a well-formed token.
 */
export async function fencedGet(redis: RedisCommands, key: string, options?: FencedWriteOptions): Promise<FencedValue | null> {
  checkClient(redis, 'fencedGet');
  checkName(key, 'key');
  const timeoutMs = checkTimeout(checkOptions(options, 'fencedGet', ['timeoutMs'])['timeoutMs']);
  const [value, token] = (await read(redis, key, 'hmget', [key, 'value', 'token'], timeoutMs)) as [string | null, string | null];
  if (value === null) {
    if (token !== null) tokenOf(key, token);
    return null;
  }
  if (token === null) throw new CorruptFenceError(key, `the Redis key ${key} holds a value without a token field: not written by fencedSet`);
  return Object.freeze({ value, token: tokenOf(key, token) });
}

/**
 * The fence of the Redis key `key`: the largest token that has written or
 * deleted it (a tombstone keeps it), or null if no fenced write ever
 * reached it. CorruptFenceError when the key holds another type or a
 * malformed token.
 */
export async function readFence(redis: RedisCommands, key: string, options?: FencedWriteOptions): Promise<FencingToken | null> {
  checkClient(redis, 'readFence');
  checkName(key, 'key');
  const timeoutMs = checkTimeout(checkOptions(options, 'readFence', ['timeoutMs'])['timeoutMs']);
  const token = (await read(redis, key, 'hget', [key, 'token'], timeoutMs)) as string | null;
  return token === null ? null : tokenOf(key, token);
}

/** A read; WRONGTYPE (the key holds another type) is a CorruptFenceError. */
async function read(redis: RedisCommands, key: string, command: string, args: string[], timeoutMs: number): Promise<unknown> {
  try {
    return await send(redis, where(redis), command, args, timeoutMs);
  } catch (error) {
    if (/WRONGTYPE/.test(String((error as { cause?: Error }).cause?.message ?? (error as Error).message))) {
      throw new CorruptFenceError(key, `the Redis key ${key} holds another type, not a fenced hash`, { cause: error });
    }
    throw error;
  }
}

function tokenOf(key: string, text: string): FencingToken {
  try {
    return parseToken(text);
  } catch (error) {
    throw new CorruptFenceError(key, `the Redis key ${key} has a malformed token field: ${JSON.stringify(text.slice(0, 40))}`, { cause: error });
  }
}

/** A write script's reply: its result (1), or the refusal it stands for. */
function settle(key: string, token: FencingToken, reply: unknown): unknown {
  const [status, detail] = reply as [number, string | number];
  if (status === 1) return detail;
  if (status === 0) {
    const error = new StaleTokenError(key, token, parseToken(String(detail)));
    publishRefused('redis', error);
    throw error;
  }
  throw new CorruptFenceError(key, `the Redis key ${key} is not a fenced hash (${String(detail)}): nothing written`);
}
