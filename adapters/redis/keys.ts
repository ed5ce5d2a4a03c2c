// Redis keys as a fenced resource. Each fenced key is one hash:
//   value   the user's value (absent after fencedDelete: a tombstone)
//   token   the largest token that has written it, a canonical decimal
//   lock    the lock the fence is bound to (bindFence), if it is bound:
//           fk1:<kind>:<source kind>:<source id>:<name, percent-encoded>
// One key, so a cluster never puts the value and its fence in different
// slots, and one Lua script per write, so the compare and the write are one
// step the server runs atomically (no paused holder between them).
import {
  CorruptFenceError,
  FenceAlreadyBoundError,
  SequencerMismatchError,
  StaleTokenError,
  fenceBinding,
  formatToken,
  parseToken,
  resolveFencing,
  type FenceBinding,
  type FenceMode,
  type Fencing,
  type FencingToken,
  type ResolvedFencing,
} from '../../src/index.js';
import { fenceAdvances, publishRefused } from '../../src/extend.js';
import { send, where, type RedisCommands } from '../../src/shared/redis/client.js';
import { run, script } from '../../src/shared/redis/script.js';
import { checkClient, checkName, checkOptions, checkTimeout, checkValue } from './input.js';
import { below, isToken } from './lua.js';

// The fence of KEYS[1], read by every write script: a missing key is
// {nil}; a key of another type, or a hash without a well-formed token
// field, is returned as a refusal ({-1, what}) before anything is written;
// a bound fence ('lock' field) and another binding presented (ARGV[3], ''
// for a bare token), {-2, the bound lock}.
const READ_FENCE = `
local got = redis.pcall('HMGET', KEYS[1], 'token', 'lock')
if got.err then return {-1, redis.call('TYPE', KEYS[1]).ok} end
local cur, lock = got[1], got[2]
if lock and lock ~= ARGV[3] then return {-2, lock} end
if not cur then
  if not lock and redis.call('EXISTS', KEYS[1]) == 1 then return {-1, 'hash without a token field'} end
elseif not ${isToken('cur')} then
  return {-1, 'token field ' .. string.sub(cur, 1, 40)}
elseif ${below('ARGV[1]', 'cur')} then
  return {0, cur}
end`;

/**
 * Bind the fence: {1} bound (or already bound to this lock), {-2, lock}
 * bound to another, {-1, what} corrupt. KEYS key; ARGV binding.
 */
const BIND = script(`
local got = redis.pcall('HMGET', KEYS[1], 'token', 'lock')
if got.err then return {-1, redis.call('TYPE', KEYS[1]).ok} end
if got[2] then
  if got[2] == ARGV[1] then return {1, ''} end
  return {-2, got[2]}
end
if got[1] then
  if not ${isToken('got[1]')} then return {-1, 'token field ' .. string.sub(got[1], 1, 40)} end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return {-1, 'hash without a token field'}
end
redis.call('HSET', KEYS[1], 'lock', ARGV[1])
return {1, ''}
`);

// The token field a write leaves: the presented token when advancing
// (ARGV[4] '1'); when only checking ('0'), the mark as it was (none yet: 1,
// which admits every token as none does, and keeps the value readable).
const NEXT_MARK = `local mark = ARGV[1]
if ARGV[4] == '0' then mark = cur or '1' end`;

/**
 * Write the value under the fence: {1, previous token or ''} written,
 * {0, current} stale, {-1, what} corrupt, {-2, lock} another binding.
 * KEYS key; ARGV token, value, presented binding ('' for a bare token),
 * '1' advance or '0' check only.
 */
const SET = script(`${READ_FENCE}
${NEXT_MARK}
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', mark)
return {1, cur or ''}
`);

/**
 * Delete the value, keep (or raise) the fence: {1, 1 if a value was there
 * else 0} deleted, {0, current} stale, {-1, what} corrupt, {-2, lock}
 * another binding. KEYS key; ARGV token, '' (no value), presented binding,
 * '1' advance or '0' check only.
 */
const DELETE = script(`${READ_FENCE}
${NEXT_MARK}
local had = redis.call('HDEL', KEYS[1], 'value')
redis.call('HSET', KEYS[1], 'token', mark)
return {1, had}
`);

/** Options of fencedSet and fencedDelete: how long to wait for Redis's reply. */
export interface FencedWriteOptions {
  /**
   * How long to wait for Redis's reply, in ms (default 10 000); then the call
   * rejects with ConnectionLossError. The script is not withdrawn: it may
   * still run, so the outcome is unknown (write again with the same token:
   * equal passes).
   */
  readonly timeoutMs?: number;
}

/** What fencedGet reads from a fenced key: the stored value and the token of the write that stored it. */
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
 * token, a Sequencer, the Lock or Leadership itself (LockLostError before
 * anything is sent once it is not held), or CURRENT_LOCK inside withLock. A fence bound to a
 * lock (bindFence) takes only that lock's sequencers: another lock's, or a
 * bare token, rejects with SequencerMismatchError and writes nothing.
 *
 * `{ advance: false }` checks the fence without moving it (a reader of a
 * read-write lock): admitted on the same compare, the token field keeps
 * the mark (a key without one gets 1, which admits every token as none does).
 *
 * No TTL: an expiring key would take its fence with it and a stale holder's
 * write would then pass, so TTL options are refused (InvalidArgumentError),
 * and a fenced key must not be given one with EXPIRE either.
 *
 * Rejects with CorruptFenceError (nothing written) when the key holds
 * another type, or a hash whose token field is missing or malformed;
 * InvalidArgumentError / InvalidTokenError for bad input (nothing sent).
 */
export async function fencedSet(redis: RedisCommands, key: string, value: string | Buffer, fencing: Fencing, options?: FencedWriteOptions & FenceMode): Promise<void> {
  checkClient(redis, 'fencedSet');
  checkName(key, 'key');
  checkValue(value);
  const resolved = resolveFencing(fencing);
  const o = checkOptions(options, 'fencedSet', ['timeoutMs', 'advance']);
  const timeoutMs = checkTimeout(o['timeoutMs']);
  const advance = fenceAdvances(o, 'fencedSet');
  const reply = await run(redis, where(redis), SET, [key], [formatToken(resolved.token), value, bindingOf(resolved), advance ? '1' : '0'], timeoutMs);
  settle(key, resolved, reply);
}

/**
 * Delete the value of the fenced key `key`, keeping its fence: the hash
 * stays with its token field only (a tombstone), so a stale holder cannot
 * write the key again after the delete. Afterwards fencedGet returns null
 * and readFence the token. The same compare as fencedSet (equal passes,
 * smaller is StaleTokenError, larger advances), also on a key that does
 * not exist (the tombstone then records the token). Resolves true when a
 * value was there. `{ advance: false }`: as fencedSet's, the mark stays.
 */
export async function fencedDelete(redis: RedisCommands, key: string, fencing: Fencing, options?: FencedWriteOptions & FenceMode): Promise<boolean> {
  checkClient(redis, 'fencedDelete');
  checkName(key, 'key');
  const resolved = resolveFencing(fencing);
  const o = checkOptions(options, 'fencedDelete', ['timeoutMs', 'advance']);
  const timeoutMs = checkTimeout(o['timeoutMs']);
  const advance = fenceAdvances(o, 'fencedDelete');
  const reply = await run(redis, where(redis), DELETE, [key], [formatToken(resolved.token), '', bindingOf(resolved), advance ? '1' : '0'], timeoutMs);
  return settle(key, resolved, reply) === 1;
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
function settle(key: string, fencing: ResolvedFencing, reply: unknown): unknown {
  const [status, detail] = reply as [number, string | number];
  if (status === 1) return detail;
  if (status === 0) {
    const error = new StaleTokenError(key, fencing.token, parseToken(String(detail)));
    publishRefused('redis', error);
    throw error;
  }
  if (status === -2) {
    const s = fencing.sequencer;
    const error = new SequencerMismatchError(key, boundLock(key, String(detail)), s === null ? null : { kind: s.kind, lock: s.name, source: s.source, token: s.token });
    publishRefused('redis', error, fencing.token);
    throw error;
  }
  throw new CorruptFenceError(key, `the Redis key ${key} is not a fenced hash (${String(detail)}): nothing written`);
}

/**
 * Bind the fence of the Redis key `key` to one lock: `{ kind: 'lock' |
 * 'election', lock: name, source: { kind, id } }` (a Sequencer's fields
 * without its token), recorded in the key's hash (field `lock`). Once: the
 * same binding again is a no-op; another rejects with FenceAlreadyBoundError.
 * From then on fencedSet / fencedDelete take only sequencers of that lock
 * (CURRENT_LOCK inside withLock of it, or its Sequencer): another lock's
 * tokens are not comparable with this fence's, and a bare token says no lock
 * at all; both reject with SequencerMismatchError and write nothing. A key
 * bound before any write reads as null (fencedGet, readFence) until one.
 */
export async function bindFence(redis: RedisCommands, key: string, binding: FenceBinding, options?: FencedWriteOptions): Promise<FenceBinding> {
  checkClient(redis, 'bindFence');
  checkName(key, 'key');
  const wanted = fenceBinding(binding);
  const timeoutMs = checkTimeout(checkOptions(options, 'bindFence', ['timeoutMs'])['timeoutMs']);
  const [status, detail] = (await run(redis, where(redis), BIND, [key], [formatBinding(wanted)], timeoutMs)) as [number, string];
  if (status === 1) return wanted;
  if (status === -2) throw new FenceAlreadyBoundError(key, boundLock(key, detail));
  throw new CorruptFenceError(key, `the Redis key ${key} is not a fenced hash (${detail}): nothing bound`);
}

function formatBinding(b: FenceBinding): string {
  return ['fk1', b.kind, b.source.kind, b.source.id, encodeURIComponent(b.lock)].join(':');
}

/** The binding a presented fencing stands for ('' for a bare token: never a bound fence's). */
function bindingOf(fencing: ResolvedFencing): string {
  const s = fencing.sequencer;
  return s === null ? '' : formatBinding({ kind: s.kind, lock: s.name, source: s.source });
}

function boundLock(key: string, text: string): FenceBinding {
  const parts = text.split(':');
  try {
    if (parts.length !== 5 || parts[0] !== 'fk1') throw new Error('not fk1:<kind>:<source kind>:<source id>:<name>');
    return fenceBinding({ kind: parts[1] as FenceBinding['kind'], source: { kind: parts[2] as string, id: parts[3] as string }, lock: decodeURIComponent(parts[4] as string) });
  } catch (error) {
    throw new CorruptFenceError(key, `the Redis key ${key} has a malformed lock field: ${JSON.stringify(text.slice(0, 80))}`, { cause: error });
  }
}
