// The Lua scripts: every check-and-change on a lock key is one script, run
// atomically by the server (never a GET then a DEL from the client, where
// another holder's grant could fall between the two).
//
// Keys of lock NAME (the hash tag {NAME} keeps them in one slot of a cluster):
//   fencekeeper:lock:{NAME}     the grant: "<unique grant id> <owner>", with the TTL;
//                               or, briefly, a handoff: RESERVED + a waiter's entry
//   fencekeeper:token:{NAME}    the fencing counter, never expires
//   fencekeeper:waiters:{NAME}  waiters to wake, a sorted set (every score 0, so in the
//                               order of its members' bytes) of "<place> <channel id>
//                               <waiter id> <handoff ms>": at most 64 bytes, which the
//                               server keeps in a listpack (zset-max-listpack-value; a
//                               member one byte longer makes the set a skiplist, five
//                               times the memory); the wake published is the entry and NAME
// A release wakes the first waiter (the smallest place) that still listens, by
// a PUBLISH on the channel of its process (WAKE_CHANNEL + channel id): one
// waiter, not all. The place is the waiter's, the same on every node of a
// Redlock set (./wake.ts queuePlace): the order of arrival differs from node
// to node (a waiter's requests to five nodes travel five connections), and a
// FIFO list per node made each node's release reserve the lock for another
// waiter, none of them with a majority, over and over. With one order over
// all nodes, every node hands the lock to the same waiter once it is listed
// there: the smallest place listed on a majority gets a majority.
// And it hands the lock to that waiter: the key becomes a reservation for
// its entry, for the handoff time the entry names (./wake.ts), so a holder
// that asks again at once (or any newcomer) cannot take the lock between the
// release and the woken waiter's attempt. A reservation is no grant: it has
// no token and no holder; only the attempt of the waiter it names turns it
// into a grant (with the next token, as from a free key), and it ends by
// itself at its TTL if that waiter never comes.
import { script } from '../../shared/redis/script.js';

export { run, type Script } from '../../shared/redis/script.js';

export const WAKE_CHANNEL = 'fencekeeper:wake:';

type LockKeys = readonly [lock: string, counter: string, waiters: string];

/** The keys of the name asked last (one lock taken again and again builds its keys once). */
let last: { readonly name: string; readonly keys: LockKeys } | null = null;

/** The waiter set's key is this, the name, and '}': the release script reads the name back from it. */
const WAITERS_PREFIX = 'fencekeeper:waiters:{';

export function lockKeys(name: string): LockKeys {
  if (last === null || last.name !== name) last = { name, keys: Object.freeze([`fencekeeper:lock:{${name}}`, `fencekeeper:token:{${name}}`, `${WAITERS_PREFIX}${name}}`] as const) };
  return last.keys;
}

/** The start of a lock key's value that reserves the lock for a waiter: never a grant's (those start with a base64url id). */
export const RESERVED = '~handoff ';

// Wake the first waiter still subscribed (PUBLISH counts the receivers; an
// entry whose process is gone reaches nobody and is skipped), and leave the
// lock key reserved for it, for the handoff time its entry names;
// with nobody woken, the key is deleted. Inline, not a Lua function: a
// script's functions are made again on every call. An entry that does not
// parse (none of ours) is dropped.
const handOn = (lock: string, waiters: string, prefix: string): string => `
local woken = false
while true do
  local w = redis.call('ZPOPMIN', ${waiters})[1]
  if not w then break end
  local channel, ms = string.match(w, '^%S+ (%S+) %S+ (%d+)$')
  if channel and redis.call('PUBLISH', ${prefix} .. channel, w .. ' ' .. string.sub(${waiters}, ${WAITERS_PREFIX.length + 1}, -2)) > 0 then
    woken = true
    if tonumber(ms) > 0 then redis.call('SET', ${lock}, '${RESERVED}' .. w, 'PX', ms) else redis.call('DEL', ${lock}) end
    break
  end
end
if not woken then redis.call('DEL', ${lock}) end`;

// A waiter that failed to get the lock is listed at its place (re-checks keep
// it: NX); the set lives a while past its last waiter's last check.
const ENLIST = `
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], 'NX', 0, ARGV[3])
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[2]) * 3)
end`;

// The woken waiter's attempt takes the lock its release reserved for it
// (ARGV[3] its entry; in the same script as the GET, so nothing comes between):
// as if the key were free, and from then on a grant like any other.
const TAKE_RESERVED = `(ARGV[3] ~= '' and redis.call('GET', KEYS[1]) == '${RESERVED}' .. ARGV[3] and redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]))`;

/**
 * Single instance: the grant and its token in one step. One integer, not a
 * table (a table reply costs the server more than the rest of the script):
 * granted, the token (INCR of the counter, >= 1); refused, -3 - the remaining
 * TTL of the holder's key as PTTL gives it (-1: the key went meanwhile, -2:
 * a key without a TTL, <= -3: that many ms + 3). Decoded by ./single.ts.
 * A key reserved for this waiter's entry (a release handed it the lock) is
 * taken as a free one; reserved for another, it refuses with the
 * reservation's PTTL. KEYS lock, counter, waiters; ARGV value, ttl, waiter
 * entry ('' for none).
 */
export const ACQUIRE = script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) or ${TAKE_RESERVED} then
  if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end
  return redis.call('INCR', KEYS[2])
end
${ENLIST}
return -3 - redis.call('PTTL', KEYS[1])
`);

/**
 * ACQUIRE for an acquire's first attempt, which has no place in the waiter
 * list yet (an uncontended acquire never makes one): the same step and reply,
 * without the waiter list's key and entry. A reserved key refuses it like a
 * held one: a release's handoff to the first waiter beats a re-acquire.
 * KEYS lock, counter; ARGV value, ttl.
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
 * {1, counter} set but not raised, {0, remaining TTL} refused. A key
 * reserved for this waiter's entry is taken as a free one (as in ACQUIRE).
 * Unlike ACQUIRE it leaves the entry listed: one node is no grant, and if
 * the attempt falls short of a majority, its release here hands the node
 * back to this waiter while it is still the first listed (the wait's LEAVE
 * takes the entry out once it is granted), so a split between waiters ends
 * with the first of them, not with whoever comes next on each node.
 * KEYS lock, counter, waiters; ARGV value, ttl, waiter entry, proposed token.
 */
export const CLAIM = script(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) or ${TAKE_RESERVED} then
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

/**
 * Compare-and-delete, then wake one waiter and hand it the lock (a
 * reservation), or delete the key when nobody listens. 1 if it was ours, 0
 * if not. KEYS lock, waiters; ARGV value, channel prefix.
 */
export const RELEASE = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
${handOn('KEYS[1]', 'KEYS[2]', 'ARGV[2]')}
return 1
`);

/**
 * A waiter leaves (granted, timed out, aborted, or its process woken after
 * it left): its entry out of the list and, if the lock is reserved for it,
 * the reservation handed on to the next waiter (the key deleted when there
 * is none). With ARGV[3] '1' (a wake that found the waiter gone), a free
 * lock wakes the next waiter too: the wake was meant to start a grant. A
 * lock held, or reserved for another, is left alone: its release wakes.
 * 1 if it handed on, 0 if not. KEYS lock, waiters; ARGV entry, channel
 * prefix, '1' or ''.
 */
export const LEAVE = script(`
redis.call('ZREM', KEYS[2], ARGV[1])
local v = redis.call('GET', KEYS[1])
if v ~= '${RESERVED}' .. ARGV[1] and (v or ARGV[3] ~= '1') then return 0 end
${handOn('KEYS[1]', 'KEYS[2]', 'ARGV[2]')}
return 1
`);
