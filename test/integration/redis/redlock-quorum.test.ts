// Redlock counts a majority of all N nodes, never "some node", at the two
// steps where a minority's answer is easy to take for success: the quorum
// counter's write-back (step 4: a RAISE round accepted by a minority grants
// nothing) and a held lock's renewal (extended on a minority only: the
// holding ends). Against the five real nodes of FK_REDLOCK; the interleavings
// come from this file's own clients (a gate in front of one grant's RAISE,
// renewals that reach some nodes only after the others have answered, keys
// deleted by hand, proxies of its own), not from faults on the shared nodes. The set's fault turn is held so that no other file pauses a node
// meanwhile (these tests count on every node answering).
import { afterEach, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import type { LockLostError } from '../../../src/errors.js';
import { acquireLock, tryAcquireLock, type RedisClient, type RedisLock } from '../../../src/sources/redis/index.js';
import { RAISE, RENEW, lockKeys } from '../../../src/sources/redis/scripts.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { RedisPool, holdRedisFaultsForFile, onPort, redlockPorts } from './helpers.js';

const pool = new RedisPool();
afterEach(() => pool.closeAll());
holdRedisFaultsForFile();

// Node timeouts far above any stall of a loaded machine: a command that times
// out would decide these rounds for a reason the tests are not about.
const SLOW_OK = { ttlMs: 30_000, nodeTimeoutMs: 15_000 } as const;

/**
 * Clients through which the RAISE script (step 3) for one lock key is kept
 * back until the test opens that node's gate: the test changes the nodes
 * between a grant's step 1 and its step 3, and decides in which order the
 * nodes' answers to step 3 reach the grant.
 */
class RaiseGate {
  /** The node indexes the script was sent to, in order. */
  readonly arrived: number[] = [];
  readonly #opens = new Map<number, () => void>();
  readonly #replies = new Map<number, Promise<unknown>>();
  readonly #lockKey: string;

  constructor(lockKey: string) {
    this.#lockKey = lockKey;
  }

  wrap(client: Redis, index: number): RedisClient {
    return {
      call: (command, args) => {
        if (!isScript(RAISE, this.#lockKey, args)) return client.call(command, args);
        this.arrived.push(index);
        const reply = new Promise<void>((resolve) => this.#opens.set(index, resolve)).then(() => client.call(command, args));
        this.#replies.set(index, reply);
        return reply;
      },
      duplicate: (override) => client.duplicate(override),
      options: client.options,
    };
  }

  /** Send node `index`'s RAISE; resolve once the grant has had its answer. */
  async open(index: number): Promise<void> {
    this.#opens.get(index)?.();
    await this.#replies.get(index)?.catch(() => {});
    await afterCallbacks();
  }
}

/** The next turn of the event loop: a reply has gone through the library's promise chain by then. */
const afterCallbacks = (): Promise<void> => new Promise((r) => setImmediate(r));

function isScript(script: { readonly sha: string; readonly text: string }, lockKey: string, args: readonly (string | number)[]): boolean {
  return (args[0] === script.sha || args[0] === script.text) && args[2] === lockKey;
}

/**
 * `clients`, through which every round of `script` for `lockKey` (the
 * commands a round sends to all nodes at once) reaches the nodes `late`
 * names only after the other nodes' answers of that round have reached the
 * lock: the round always hears those first.
 */
function lateOn(clients: readonly Redis[], script: { readonly sha: string; readonly text: string }, lockKey: string, late: (index: number) => boolean): RedisClient[] {
  let early: Array<Promise<unknown>> = [];
  let roundOpen = false;
  return clients.map((client, index) => ({
    call: (command, args) => {
      if (!isScript(script, lockKey, args)) return client.call(command, args);
      // A round's commands are sent in one synchronous pass: the first one opens it.
      if (!roundOpen) {
        roundOpen = true;
        early = [];
        setImmediate(() => (roundOpen = false));
      }
      if (!late(index)) {
        const reply = client.call(command, args);
        early.push(reply);
        return reply;
      }
      const before = early;
      return afterCallbacks()
        .then(() => Promise.allSettled(before))
        .then(afterCallbacks)
        .then(() => client.call(command, args));
    },
    duplicate: (override) => client.duplicate(override),
    options: client.options,
  }));
}

describe('Redlock step 4: the write-back counts only with a majority of all N nodes', () => {
  it('a RAISE round accepted by a minority (the key lost elsewhere between steps 1 and 3) grants nothing: no second holder with the same token', async () => {
    const name = uniqueLockName('raise-minority');
    const [lockKey] = lockKeys(name);
    const ports = redlockPorts();
    const gate = new RaiseGate(lockKey);
    const victimClients = pool.redlock().map((c, i) => gate.wrap(c, i));
    // A fresh lock: no token known to propose, so the grant takes steps 1, 2 and 3.
    const victim = tryAcquireLock(victimClients, name, SLOW_OK);
    // Step 3 is sent to every node of S (those whose SET we heard of) in one go.
    await until(() => gate.arrived.length > 0, 'the victim\'s RAISE round to start');
    const s = [...gate.arrived];
    expect(s.length).toBeGreaterThanOrEqual(3);
    // Between steps 1 and 3 (a long pause, its key expired): the victim's key survives on one node of S only...
    const keep = s[0]!;
    for (const [i, port] of ports.entries()) if (i !== keep) await onPort(port, 'DEL', lockKey);
    // ...and another client takes the lock on the other four: its counters there are the ones
    // the victim read in step 1, so it is granted the very token the victim's step 3 writes.
    const other = await tryAcquireLock(pool.redlock(), name, SLOW_OK);
    expect(other, 'the other client\'s grant on four nodes').not.toBeNull();
    let got: RedisLock | null = null;
    try {
      // RAISE: accepted on `keep` (our key, counter below t) first, then refused on the rest of S (another's key).
      for (const i of s) await gate.open(i);
      got = await victim;
      expect(got, `the victim was granted token ${got?.token} with a minority of RAISEs (the other holder has ${other?.token})`).toBeNull();
      expect(other!.held).toBe(true);
    } finally {
      await got?.release();
      await other?.release();
    }
  }, 120_000);
});

describe('Redlock renewal: extended on a minority is not held', () => {
  it('refused by a majority (the key lost there, another client holds it): the holding ends at that renewal (renewal_failed)', async () => {
    const name = uniqueLockName('renew-refused');
    const [lockKey] = lockKeys(name);
    const ports = redlockPorts();
    // Every renewal of A reaches nodes 0-2 only after nodes 3 and 4 have answered it.
    const clients = lateOn(pool.redlock(), RENEW, lockKey, (i) => i < 3);
    // Renewed every 2 s; each node may take 2 s to answer.
    const a = await acquireLock(clients, name, { ttlMs: 6000, nodeTimeoutMs: 2000 });
    let b: RedisLock | null = null;
    try {
      // A's key lost on three of five nodes; B takes the lock there (a majority).
      for (const port of ports.slice(0, 3)) await onPort(port, 'DEL', lockKey);
      b = await tryAcquireLock(pool.redlock(), name, SLOW_OK);
      expect(b, 'B\'s grant on three nodes').not.toBeNull();
      // A's next renewal: extended on nodes 3 and 4 first (its key is there), then B's key found on 0-2.
      const aborted = new Promise<void>((r) => a.signal.addEventListener('abort', () => r()));
      await within(aborted, 30_000, 'A\'s holding to end after a renewal extended on 2 of 5 nodes');
      expect((a.signal.reason as LockLostError).reason).toBe('renewal_failed');
      expect(a.held).toBe(false);
      expect(b!.held).toBe(true);
    } finally {
      await a.release();
      await b?.release();
    }
  }, 120_000);

  it('answered by a minority only (three nodes silent): the holding ends at its step-down deadline, not extended by the two', async () => {
    const name = uniqueLockName('renew-silent');
    const ports = redlockPorts();
    const proxies = await Promise.all(ports.slice(0, 3).map((port) => TcpProxy.to(`127.0.0.1:${port}`)));
    try {
      const clients = [...proxies.map((p) => pool.open(`redis://127.0.0.1:${p.port}`)), ...ports.slice(3).map((port) => pool.open(`redis://127.0.0.1:${port}`))];
      // Each renewal gets its answers (two nodes) when the silent three time out, 1.5 s after it
      // is sent. Counted on two nodes, each would keep the holding until the next one's answers
      // (2 x 1.5 s + 4 s, a third of the TTL, is well below 12 s - 1% - the 1 s margin): held for
      // ever. Counted as they must be, they extend nothing: it ends at the grant's deadline (~11 s).
      const a = await acquireLock(clients, name, { ttlMs: 12_000, nodeTimeoutMs: 1500, safetyMarginMs: 1000 });
      for (const p of proxies) p.blackhole();
      const aborted = new Promise<void>((r) => a.signal.addEventListener('abort', () => r()));
      await within(aborted, 30_000, 'A\'s holding to end with its renewals answered by 2 of 5 nodes');
      expect((a.signal.reason as LockLostError).reason).toBe('deadline');
      expect(a.held).toBe(false);
      for (const p of proxies) p.resume();
      await a.release();
    } finally {
      await Promise.all(proxies.map((p) => p.close()));
    }
  }, 120_000);
});
