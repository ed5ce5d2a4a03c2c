// The identity of a Redis server or a Redlock set, for sequencers.
//
// Redis has no id that survives a restart (INFO's run_id is new every time
// the process starts), so we keep one: a UUID in the key fencekeeper:source-id,
// made once with SET NX by the first client that asks and read by every
// other. It lives exactly as long as the server's data: a server that
// restarts with its data keeps it; one that comes back empty makes a new one,
// which is right, since its lock counters (the tokens) start again from zero
// too, and a fence bound to the old identity then refuses the new tokens
// instead of comparing them with the old ones.
//
// Redlock: the same key on every node, and the identity is the value a
// majority of all N nodes carries. The first client that asks reads every
// node; if a majority already agrees, that is the identity, and nodes that
// have no key (a node replaced by an empty one) are given it with SET NX,
// so a replacement never needs anyone to re-bind. Otherwise it proposes a
// value with SET NX on every node (the most common value seen, or a fresh
// UUID on fresh nodes) and reads back. First clients racing on fresh nodes
// can split the nodes between their UUIDs with no majority; a client that
// then has the answer of every node (so it knows no majority exists, and so
// nobody can have adopted any value) moves every node to the smallest value
// it saw, with compare-and-set, and reads again: every racer converges on
// the same value. The identity changes only if a majority of nodes loses its
// data at once (the tokens are broken then anyway: see ./redlock.ts); fences
// bound to the old identity refuse the new one until an operator re-binds
// them, after checking the resource (bindFence refuses to replace a binding:
// remove the old one by hand, e.g. DELETE FROM fencekeeper_fence_bindings).
//
// Asked once per client (Redlock: per set of clients) after its first grant;
// every later grant reads it from memory.
import { createHash, randomUUID } from 'node:crypto';
import { ProtocolError, QuorumError, type SourceIdentity } from '../../index.js';
import { SourceIdentityCache } from '../../extend.js';
import { send, where, type RedisClient } from '../../shared/redis/client.js';
import { run, type Script } from './scripts.js';

export const SOURCE_ID_KEY = 'fencekeeper:source-id';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function script(text: string): Script {
  return { text, sha: createHash('sha1').update(text).digest('hex') };
}

/** SET NX our proposal, then the value the key holds (ours or the earlier one). KEYS id; ARGV proposal. */
const PROPOSE = script(`
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`);

/** Compare-and-set: the key becomes ARGV[2] only if it still holds ARGV[1]. KEYS id; ARGV old, new. */
const CONVERGE = script(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end
return redis.call('GET', KEYS[1])
`);

function checked(value: unknown, at: string): string | null {
  if (value === null) return null;
  if (typeof value !== 'string' || !UUID.test(value)) throw new ProtocolError(`${SOURCE_ID_KEY} at ${at} does not hold a UUID: it is not fencekeeper's`);
  return value;
}

/** One server: SET NX a fresh UUID, read back whichever is there. Per client; the setting is the node timeout. */
export const redisSourceIds = new SourceIdentityCache<RedisClient, number>(async (client, timeoutMs) => {
  const at = where(client);
  const id = checked(await run(client, at, PROPOSE, [SOURCE_ID_KEY], [randomUUID()], timeoutMs), at);
  if (id === null) throw new ProtocolError(`${SOURCE_ID_KEY} at ${at} is absent right after SET NX`);
  return { kind: 'redis', id };
});

/** Per Redlock set (the canonical array of ./redlock.ts canonicalSet). */
export const redlockSourceIds = new SourceIdentityCache<readonly RedisClient[], number>((clients, timeoutMs) => redlockSourceId(clients, timeoutMs));

/** Each node's value (null: no key; undefined: no answer). */
async function everyNode(clients: readonly RedisClient[], ask: (client: RedisClient, at: string, index: number) => Promise<unknown>): Promise<Array<string | null | undefined>> {
  return Promise.all(clients.map(async (c, i) => {
    const at = where(c);
    let reply: unknown;
    try {
      reply = await ask(c, at, i);
    } catch {
      return undefined;
    }
    return checked(reply, at);
  }));
}

/** The value held by a majority of all N nodes, if any. */
export function majorityOf(values: readonly (string | null | undefined)[]): string | null {
  const quorum = Math.floor(values.length / 2) + 1;
  const counts = new Map<string, number>();
  for (const v of values) if (typeof v === 'string') counts.set(v, (counts.get(v) ?? 0) + 1);
  for (const [v, n] of counts) if (n >= quorum) return v;
  return null;
}

/** The most common value (ties: the smallest), or null when no node has one. */
function mostCommon(values: readonly (string | null | undefined)[]): string | null {
  const counts = new Map<string, number>();
  for (const v of values) if (typeof v === 'string') counts.set(v, (counts.get(v) ?? 0) + 1);
  let best: string | null = null;
  for (const [v, n] of counts) {
    const bestN = best === null ? 0 : (counts.get(best) as number);
    if (n > bestN || (n === bestN && best !== null && v < best)) best = v;
  }
  return best;
}

/** The Redlock set's identity: see the top of this file. */
async function redlockSourceId(clients: readonly RedisClient[], timeoutMs: number): Promise<SourceIdentity> {
  const identity = (id: string): SourceIdentity => ({ kind: 'redlock', id });
  const read = await everyNode(clients, (c, at) => send(c, at, 'get', [SOURCE_ID_KEY], timeoutMs));
  let agreed = majorityOf(read);
  if (agreed === null) {
    const proposal = mostCommon(read) ?? randomUUID();
    const proposed = await everyNode(clients, (c, at) => run(c, at, PROPOSE, [SOURCE_ID_KEY], [proposal], timeoutMs));
    agreed = majorityOf(proposed);
    if (agreed === null && proposed.every((v) => typeof v === 'string')) {
      // Every node answered and none has a majority: nobody can have adopted any value. Move all to the smallest.
      const target = [...(proposed as string[])].sort()[0] as string;
      const moved = await everyNode(clients, (c, at, i) => run(c, at, CONVERGE, [SOURCE_ID_KEY], [proposed[i] as string, target], timeoutMs));
      agreed = majorityOf(moved);
    }
    if (agreed === null) {
      throw new QuorumError(`Redlock: no majority of the ${clients.length} nodes agrees on ${SOURCE_ID_KEY} yet (answers: ${proposed.map((v) => v ?? 'none').join(', ')})`);
    }
    return identity(agreed);
  }
  // A node without the key (replaced by an empty one) is given the majority's, so it never splits the vote later.
  await Promise.all(read.map((v, i) => (v === null ? run(clients[i] as RedisClient, where(clients[i] as RedisClient), PROPOSE, [SOURCE_ID_KEY], [agreed], timeoutMs).catch(() => undefined) : undefined)));
  return identity(agreed);
}
