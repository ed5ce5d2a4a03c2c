// Redlock over N independent Redis nodes, with a fencing token of its own.
//
// The lock (the Redlock algorithm as its authors describe it): SET key value NX
// PX ttl on every node in parallel, each with a short timeout; the time spent
// is measured on the monotonic clock from the moment the requests were sent;
// the lock is granted only if a majority of all N nodes took the SET and some
// validity is left: ttl - elapsed - drift, the drift an allowance for the
// nodes' clocks running faster than ours. Any failure releases on every node
// (compare-and-delete), the nodes that did not answer included. Renewal
// extends on every node and counts only with a majority.
//
// The token: a quorum counter. Each node keeps a counter per lock. A grant is
//   (1) on each node one script: the SET NX and, only if it took, that node's
//       counter (CLAIM);
//   (2) once (1) succeeded on a majority of all N nodes: S = the nodes whose
//       success we have, t = max(their counters) + 1;
//   (3) on each node of S, and only those, one script sets the counter to t
//       only if the lock there still carries our value AND the counter is
//       below t (RAISE);
//   (4) the grant stands only if a majority of all N nodes accepted (3);
//       otherwise release everywhere.
// Step 3 merged into step 1 (one round trip less, uncontended): when we know
// a token t this lock had (our own last grant of it on this set of nodes),
// step 1 proposes t + 1, and the CLAIM script that took the SET also does
// step 3's check-and-set at once (the value there is ours: the same script
// has just set it). If a majority of all N nodes accepted that, the grant
// stands with t + 1 and steps 2-3 are skipped; if not (another client's
// grants have raised the counters past it), steps 2-3 run as above, t
// computed from the counters step 1 returned (a raised node's is the
// proposal), and the proposal's raises count for nothing.
//
// Why tokens only grow, with no assumption about clocks. Call an ACCEPT of
// token t at node n one atomic script run there (a CLAIM that raised, or a
// RAISE that succeeded) that found the lock carrying our value and the
// counter below t, and set the counter to t. A grant stands with t only if
// ACCEPTs of t happened at a majority of all N nodes. Counters never go down
// (only an ACCEPT writes one, and only upwards). Take two grants A and B that
// stood; their majorities share a node n, where their ACCEPTs ran one after
// the other, say A's first. B's ACCEPT at n found the counter >= t_A (set by
// A's, never lowered) and below t_B: t_B > t_A. So any two grants have
// distinct tokens, and a grant that began after another was granted (all of
// its scripts ran after all of the other's ACCEPTs) gets the larger one.
// The lock check keeps a late or stale step 3 (a node where our key has
// expired and a later grant has set its own) from counting for us. A node
// that times out in step 1 is not in S, so nothing it later does can count
// for this grant.
// Assumptions: every node keeps each write it acknowledged (appendonly yes,
// appendfsync always: a counter written back in step 3 survives a crash) and
// never evicts keys (maxmemory-policy noeviction). A node restarted EMPTY
// (its data lost) breaks this: its counter starts again at 0 and its lock
// key is gone, so a majority that includes it can grant the lock while the
// old holder still holds it on the others, with a token that is no longer
// above the last one. Clock jumps on a node can break the lock (a key
// expiring early), not the token.
import { InvalidArgumentError, QuorumError, type FencingToken } from '../../index.js';
import { send, where, type RedisClient } from '../../shared/redis/client.js';
import { now } from '../../shared/redis/deadlines.js';
import { grantsOf, holdGrant, type RedisLock } from './held-lock.js';
import type { CheckedOptions } from './options.js';
import { CLAIM, RAISE, RELEASE, RENEW, WAKE_CHANNEL, lockKeys, run } from './scripts.js';
import { grantValue, toToken } from './single.js';
import { redlockSourceIds } from './source-id.js';
import { acquireLoop, type Attempt } from './waiting.js';

export function quorumOf(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** The drift allowance of the Redlock algorithm: 1% of the TTL, plus 2 ms for timer granularity. */
export function driftOf(ttlMs: number): number {
  return Math.ceil(ttlMs * 0.01) + 2;
}

type NodeReply<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: Error };

function settle<T>(promise: Promise<T>): Promise<NodeReply<T>> {
  return promise.then(
    (value) => ({ ok: true, value }) as const,
    (error: unknown) => ({ ok: false, error: error instanceof Error ? error : new Error(String(error)) }) as const,
  );
}

/**
 * The replies so far, as soon as `enough` says they decide the round (or
 * every node has answered or timed out): a round waits for the majority it
 * needs, not for its slowest node. A copy: replies that arrive later change
 * nothing the caller has decided on.
 */
function gather<T>(pending: readonly Promise<NodeReply<T>>[], enough: (replies: readonly (NodeReply<T> | undefined)[]) => boolean): Promise<Array<NodeReply<T> | undefined>> {
  return new Promise((resolve) => {
    const replies: Array<NodeReply<T> | undefined> = pending.map(() => undefined);
    let settled = 0;
    let done = false;
    pending.forEach((p, i) =>
      void p.then((reply) => {
        if (done) return;
        replies[i] = reply;
        settled++;
        if (settled === pending.length || enough(replies)) {
          done = true;
          resolve([...replies]);
        }
      }),
    );
  });
}

const isOne = <T>(r: NodeReply<T> | undefined): boolean => r !== undefined && r.ok && r.value === 1;
const count = <T>(replies: readonly (NodeReply<T> | undefined)[], test: (r: NodeReply<T> | undefined) => boolean): number => replies.filter(test).length;
const granted = (r: NodeReply<unknown> | undefined): boolean => r !== undefined && r.ok && Array.isArray(r.value) && (r.value[0] === 1 || r.value[0] === 2);
const raisedClaim = (r: NodeReply<unknown> | undefined): boolean => r !== undefined && r.ok && Array.isArray(r.value) && r.value[0] === 2;
const refusedClaim = (r: NodeReply<unknown> | undefined): boolean => r !== undefined && r.ok && !granted(r);

// Two client objects may still point at one server, which would then count
// twice toward every majority. Asked once per set, at its first acquire or
// status read (a read counting one server twice could report a holder that
// no majority holds).
const distinct = new WeakMap<readonly RedisClient[], Promise<void>>();

/** Refuse (INVALID_ARGUMENT) a set in which two clients reach one server, by their run_ids; once per canonical set. */
export function checkDistinctServers(clients: readonly RedisClient[], timeoutMs: number): Promise<void> {
  let checked = distinct.get(clients);
  if (checked === undefined) {
    checked = (async () => {
      const ids = await Promise.all(
        clients.map(async (c) => {
          const info = String(await send(c, where(c), 'info', ['server'], timeoutMs).catch(() => ''));
          return /run_id:([0-9a-f]+)/.exec(info)?.[1];
        }),
      );
      const seen = new Map<string, number>();
      ids.forEach((id, i) => {
        if (id === undefined) return; // a node down now: checked again by the next acquire
        const first = seen.get(id);
        if (first !== undefined) {
          throw new InvalidArgumentError(
            `Redlock clients ${first} (${where(clients[first] as RedisClient)}) and ${i} (${where(clients[i] as RedisClient)}) reach the same Redis server (run_id ${id}): each node must be an independent server`,
          );
        }
        seen.set(id, i);
      });
      if (ids.includes(undefined)) distinct.delete(clients);
    })();
    distinct.set(clients, checked);
    checked.catch(() => {});
  }
  return checked;
}

/**
 * The last token each lock was granted with on each set of clients, from
 * our own grants: what step 1 proposes (+1) next time. Only a proposal:
 * a stale one costs the round trip of steps 2-3, never a wrong token.
 * Bounded: the least recently granted locks are forgotten past MAX_KNOWN.
 */
const lastTokens = new WeakMap<readonly RedisClient[], Map<string, bigint>>();
const MAX_KNOWN = 1024;

function remember(clients: readonly RedisClient[], name: string, token: bigint): void {
  let known = lastTokens.get(clients);
  if (known === undefined) lastTokens.set(clients, (known = new Map()));
  known.delete(name);
  known.set(name, token);
  if (known.size > MAX_KNOWN) known.delete(known.keys().next().value as string);
}

/** The sets of clients callers pass are copied per call: one frozen copy per distinct list of client objects. */
const sets = new WeakMap<RedisClient, Array<readonly RedisClient[]>>();
export function canonicalSet(clients: readonly RedisClient[]): readonly RedisClient[] {
  const first = clients[0] as RedisClient;
  let known = sets.get(first);
  if (known === undefined) sets.set(first, (known = []));
  const found = known.find((s) => s.length === clients.length && s.every((c, i) => c === clients[i]));
  if (found !== undefined) return found;
  known.push(clients);
  return clients;
}

export async function acquireRedlock(target: readonly RedisClient[], name: string, options: CheckedOptions, mode: 'wait' | 'try'): Promise<RedisLock | null> {
  const clients = canonicalSet(target);
  const { ttlMs, nodeTimeoutMs, marginMs } = options;
  const n = clients.length;
  const quorum = quorumOf(n);
  const drift = driftOf(ttlMs);
  const [lockKey, counterKey, waitersKey] = lockKeys(name);
  await checkDistinctServers(clients, nodeTimeoutMs);

  const releaseEach = (value: string): Array<Promise<NodeReply<unknown>>> =>
    clients.map((c) => settle(run(c, where(c), RELEASE, [lockKey, waitersKey], [value, WAKE_CHANNEL], nodeTimeoutMs)));
  // After a failed round: every node answered or timed out, so no key of ours is left where a node answers.
  const releaseAll = async (value: string): Promise<void> => {
    await Promise.all(releaseEach(value));
  };

  const attempt = async (entries: readonly string[]): Promise<Attempt<RedisLock>> => {
    const value = grantValue(options.owner);
    const known = lastTokens.get(clients)?.get(name);
    const proposal = known === undefined ? '' : (known + 1n).toString();
    const start = now();
    // Step 1 (and 3, where the proposal holds): until a majority raised to
    // the proposal, or that can no longer happen and a majority took the SET
    // (steps 2-3 then), or a majority refused it (the lock is held), or every
    // node answered.
    const claims = await gather(
      clients.map((c, i) => settle(run(c, where(c), CLAIM, [lockKey, counterKey, waitersKey], [value, ttlMs, entries[i] ?? '', proposal], nodeTimeoutMs))),
      (replies) => {
        const raisedNow = count(replies, raisedClaim);
        if (raisedNow >= quorum) return true;
        const open = count(replies, (r) => r === undefined);
        if (raisedNow + open < quorum && count(replies, granted) >= quorum) return true;
        return count(replies, refusedClaim) > n - quorum;
      },
    );
    const taken: Array<{ index: number; counter: bigint }> = [];
    let raised = 0;
    let refused = 0;
    let retryInMs = ttlMs;
    const failures: string[] = [];
    claims.forEach((reply, index) => {
      if (reply === undefined) return;
      if (!reply.ok) {
        failures.push(`${where(clients[index] as RedisClient)}: ${reply.error.message}`);
        return;
      }
      const [ok, x] = Array.isArray(reply.value) ? (reply.value as unknown[]) : [];
      if (ok === 1 || ok === 2) {
        taken.push({ index, counter: x === '0' ? 0n : toToken(x) });
        if (ok === 2) raised++;
      } else {
        refused++;
        if (typeof x === 'number') retryInMs = Math.min(retryInMs, x === -2 ? 0 : x === -1 ? ttlMs : x + 1);
      }
    });
    const validUntil = start + ttlMs - drift;
    if (raised >= quorum) {
      // Step 4 for the proposal: a majority accepted it in step 1.
      const t = known! + 1n;
      if (validUntil - now() > marginMs) return { granted: grant(value, t, validUntil) };
    } else if (taken.length >= quorum) {
      // Steps 2 and 3: S = the nodes whose SET we know took; t = their largest counter + 1, written back to S only.
      const t = taken.reduce((max, c) => (c.counter > max ? c.counter : max), 0n) + 1n;
      const raises = await gather(
        taken.map(({ index }) => {
          const c = clients[index] as RedisClient;
          return settle(run(c, where(c), RAISE, [lockKey, counterKey], [value, t.toString()], nodeTimeoutMs));
        }),
        (replies) => count(replies, isOne) >= quorum || count(replies, (r) => r !== undefined && !isOne(r)) > taken.length - quorum,
      );
      // Step 4.
      if (count(raises, isOne) >= quorum && validUntil - now() > marginMs) return { granted: grant(value, t, validUntil) };
    }
    await releaseAll(value);
    // Fewer than a majority answered at all: no waiting can change that by itself.
    if (taken.length + refused < quorum) {
      throw new QuorumError(
        `Redlock ${name}: only ${taken.length + refused} of ${n} nodes answered, ${quorum} needed (${failures.join('; ')})`,
      );
    }
    // A split vote (every contender short of a majority) or a grant too slow to
    // leave validity: try again after a random pause, so contenders fall out of step.
    if (taken.length > 0) return { retryInMs: Math.floor(Math.random() * nodeTimeoutMs) + 1 };
    return { retryInMs };
  };

  const grant = (value: string, token: FencingToken, validUntil: number): RedisLock => {
    remember(clients, name, token);
    return holdGrant({ name, token, grants: grantsOf(clients[0] as RedisClient, 'Redlock'), marginMs, ttlMs, validUntil }, {
      async renew() {
        const sentAt = now();
        const notOursReply = (r: NodeReply<unknown> | undefined): boolean => r !== undefined && r.ok && r.value !== 1;
        const replies = await gather(
          clients.map((c) => settle(run(c, where(c), RENEW, [lockKey], [value, ttlMs], nodeTimeoutMs))),
          (rs) => count(rs, isOne) >= quorum || count(rs, notOursReply) > n - quorum,
        );
        const extended = count(replies, isOne);
        const notOurs = count(replies, notOursReply);
        if (extended >= quorum) return { validUntil: sentAt + ttlMs - drift };
        // A majority can no longer be ours: some other grant may have one.
        if (notOurs > n - quorum) return 'refused';
        return 'unknown';
      },
      // Done once a majority answered: the lock can no longer be granted to us, and the
      // remaining deletes go on (each after our earlier commands on its connection).
      release: async () => {
        await gather(releaseEach(value), (rs) => count(rs, (r) => r !== undefined && r.ok) >= quorum);
      },
      identity: () => redlockSourceIds.known(clients),
    });
  };

  return redlockSourceIds.afterGrant(clients, acquireLoop(clients, name, options, mode, attempt, (lock) => lock.release()), (lock) => lock.release(), options, nodeTimeoutMs);
}
