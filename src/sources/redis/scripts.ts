// The Lua scripts: every check-and-change on a lock key is one script, run
// atomically by the server (never a GET then a DEL from the client, where
// another holder's grant could fall between the two).
//
// Keys of lock NAME (the hash tag {NAME} keeps them in one slot of a cluster):
//   fencekeeper:lock:{NAME}     the grant: "<unique grant id> <owner>", with the TTL
//   fencekeeper:token:{NAME}    the fencing counter, never expires
//   fencekeeper:waiters:{NAME}  waiters to wake, "<channel id> <waiter id>", oldest first
// A release wakes the oldest waiter that still listens, by a PUBLISH on the
// channel of its process (WAKE_CHANNEL + channel id): one waiter, not all.
import { script } from '../../shared/redis/script.js';

export { run, type Script } from '../../shared/redis/script.js';

export const WAKE_CHANNEL = 'fencekeeper:wake:';

type LockKeys = readonly [lock: string, counter: string, waiters: string];

/** The keys of the name asked last (one lock taken again and again builds its keys once). */
let last: { readonly name: string; readonly keys: LockKeys } | null = null;

export function lockKeys(name: string): LockKeys {
  if (last === null || last.name !== name) last = { name, keys: Object.freeze([`fencekeeper:lock:{${name}}`, `fencekeeper:token:{${name}}`, `fencekeeper:waiters:{${name}}`] as const) };
  return last.keys;
}

// Wake the oldest waiter still subscribed (PUBLISH counts the receivers; an
// entry whose process is gone reaches nobody and is skipped). Inline, not a
// Lua function: a script's functions are made again on every call.
const wakeOne = (waiters: string, prefix: string): string => `
while true do
  local w = redis.call('LPOP', ${waiters})
  if not w then break end
  local sep = string.find(w, ' ', 1, true)
  if sep and redis.call('PUBLISH', ${prefix} .. string.sub(w, 1, sep - 1), w) > 0 then break end
end`;

// A waiter that failed to get the lock queues up once (re-checks keep its
// place); the list lives a while past its last waiter's last check.
const ENLIST = `
if ARGV[3] ~= '' then
  if not redis.call('LPOS', KEYS[3], ARGV[3]) then redis.call('RPUSH', KEYS[3], ARGV[3]) end
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[2]) * 3)
end`;

/**
 * Single instance: the grant and its token in one step. One integer, not a
 * table (a table reply costs the server more than the rest of the script):
 * granted, the token (INCR of the counter, >= 1); refused, -3 - the remaining
 * TTL of the holder's key as PTTL gives it (-1: the key went meanwhile, -2:
 * a key without a TTL, <= -3: that many ms + 3). Decoded by ./single.ts.
 * KEYS lock, counter, waiters; ARGV value, ttl, waiter entry ('' for none).
 */
export const ACQUIRE = script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '' then redis.call('LREM', KEYS[3], 0, ARGV[3]) end
  return redis.call('INCR', KEYS[2])
end
${ENLIST}
return -3 - redis.call('PTTL', KEYS[1])
`);

/**
 * ACQUIRE for an acquire's first attempt, which has no place in the waiter
 * list yet (an uncontended acquire never makes one): the same step and reply,
 * without the waiter list's key and entry. KEYS lock, counter; ARGV value, ttl.
 */
export const ACQUIRE_FIRST = script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end
return -3 - redis.call('PTTL', KEYS[1])
`);

/**
 * Redlock step 1 on one node: the SET NX and, only if it took, the node's
 * counter (a string, '0' when absent). With a proposed token (ARGV[4], ''
 * for none), the same script also does step 3 at once where it can: the
 * counter is below the proposal, so it becomes the proposal (the lock
 * carries our value: we have just set it). {2, proposal} raised,
 * {1, counter} set but not raised, {0, remaining TTL} refused.
 * KEYS lock, counter, waiters; ARGV value, ttl, waiter entry, proposed token.
 */
export const CLAIM = script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '' then redis.call('LREM', KEYS[3], 0, ARGV[3]) end
  local current = redis.call('GET', KEYS[2]) or '0'
  local proposal = tonumber(ARGV[4] or '')
  if proposal and tonumber(current) < proposal then
    redis.call('SET', KEYS[2], ARGV[4])
    return {2, ARGV[4]}
  end
  return {1, current}
end
${ENLIST}
return {0, redis.call('PTTL', KEYS[1])}
`);

/**
 * Redlock step 3 on one node: the counter becomes t only if the lock there
 * still carries our value and the counter is below t. 1 accepted, 0 not.
 * KEYS lock, counter; ARGV value, t (decimal).
 */
export const RAISE = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local current = redis.call('GET', KEYS[2])
if current and tonumber(current) >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
`);

/** Compare-and-pexpire: 1 if the key still carries our value (its TTL reset), 0 if not. KEYS lock; ARGV value, ttl. */
export const RENEW = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`);

/** Compare-and-delete, then wake one waiter. 1 if it was ours, 0 if not. KEYS lock, waiters; ARGV value, channel prefix. */
export const RELEASE = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
${wakeOne('KEYS[2]', 'ARGV[2]')}
return 1
`);

/** Pass a wake on: a woken waiter that had already left hands it to the next. KEYS waiters; ARGV channel prefix. */
export const WAKE_NEXT = script(`
${wakeOne('KEYS[1]', 'ARGV[1]')}
return 1
`);
