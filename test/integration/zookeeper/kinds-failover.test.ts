// Read-write locks and permits across a ZooKeeper leader failover, in the
// 3-node ensemble: clients take turns (mixed readers and writers; permits of
// 3) while the leader is SIGKILLed, and every rule holds before, during and
// after: never a writer beside another grant, never more than 3 permits nor
// two on one slot, a writer's token above every grant it saw before, per-slot
// tokens strictly increasing, the grants after the kill of a larger epoch
// (czxid >> 32). Holders and waiters ride the failover (the sessions, 20 s,
// outlast the election): a holding that ends without its release must end
// with LockLostError and a reason of LossReason; an acquire that fails must
// fail with a stable error code; every loop finishes and leaves the queue
// empty. The killed node is started again after each test.
import { afterEach, describe, expect, it } from 'vitest';
import { FencekeeperError, LockLostError } from '../../../src/errors.js';
import type { Lock } from '../../../src/lock.js';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { acquirePermit, SEMAPHORES_ROOT } from '../../../src/sources/zookeeper/recipes/permit.js';
import { acquireReadLock, acquireWriteLock, RW_LOCKS_ROOT } from '../../../src/sources/zookeeper/recipes/rw-lock.js';
import type { FencingToken } from '../../../src/token.js';
import { ensembleLeaderKills, testServers, useEnsembleForFaults, waitEnsembleHealthy } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { retrying, until, within } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { queueChildren as listQueue } from './lock-helpers.js';

const clients = new ClientPool();
// Other files kill leaders too: one file at a time.
useEnsembleForFaults(() => clients.closeAll());
const leader = ensembleLeaderKills();
// Registered after the leader kills' restart, so it runs before it: the clients go first.
afterEach(() => clients.closeAll());

const CLIENTS = 6;
const BEFORE_KILL = 5;
const AFTER_KILL = 8;
// Long enough to ride out the election (tickTime 500 ms, initLimit 20: up to
// 10 s) and the clients' reconnect after it on a loaded machine: with 10 s, a
// clean-clone run saw a waiter's session expire by the client's own clock
// before it found the new leader, and with 20 s another saw a loop's client
// expire (its every acquire after it refused SESSION_EXPIRED, as they must
// be). The servers allow up to 60 s.
const SESSION_MS = 40_000;
const LIMIT_MS = 120_000;
// The test's own limit: above the loops' (a leader election on a loaded machine) and the 60 s default.
const TEST_MS = LIMIT_MS + 60_000;
/**
 * The queue's children, read again when the read itself fails: under a loaded
 * run a follower that falls behind is dropped and closes its clients'
 * connections (ConnectionLoss) even before the kill; the test's own reads ride
 * that out as the recipes do, so only what the recipes do is judged.
 */
const queueChildren = (zk: ZooKeeperClient, path: string): Promise<string[]> => retrying(() => listQueue(zk, path), 30_000, `listing ${path}`);
const epochOf = (token: FencingToken): bigint => token >> 32n;
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Where the loops are: the kill sent, the killed leader gone. */
interface Phase {
  killing(): boolean;
  killed(): boolean;
}

/** A holder and waiters of a name of their own, set up before the kill (`before`) and checked after it (`after`). */
interface AcrossKill {
  before(): Promise<void>;
  after(): Promise<void>;
}

/** What the loops saw, beside the rules they broke. */
interface Tally {
  readonly violations: string[];
  /** Holdings that ended before their release: the LockLostError reasons (or what else aborted them). */
  readonly lost: string[];
  /** Acquires that failed: their error codes (or messages, for an error without a code). */
  readonly failed: string[];
  /** The last failed acquire's message (which server, which clock), for the report. */
  lastFailure: string;
  granted: number;
  grantedAfterKill: number;
  maxEpochBefore: bigint;
  minEpochAfter: bigint | null;
}

const tally = (): Tally => ({ violations: [], lost: [], failed: [], lastFailure: '', granted: 0, grantedAfterKill: 0, maxEpochBefore: 0n, minEpochAfter: null });

/**
 * Run `turn` on every client until the leader was killed after each client had
 * BEFORE_KILL grants and each has had AFTER_KILL more since; the kill happens
 * meanwhile. `turn` returns false when its acquire failed (recorded).
 */
async function withKill(
  zks: readonly ZooKeeperClient[],
  t: Tally,
  turn: (zk: ZooKeeperClient, client: number, i: number, phase: Phase) => Promise<boolean>,
  across: AcrossKill,
): Promise<number> {
  let killing = false;
  let killed = false;
  const phase: Phase = { killing: () => killing, killed: () => killed };
  const counts = zks.map(() => ({ before: 0, after: 0 }));
  const loops = zks.map(async (zk, client) => {
    for (let i = 0; counts[client]!.after < AFTER_KILL; i++) {
      const wasKilled = killed;
      const ok = await turn(zk, client, i, phase);
      if (!ok) {
        // An acquire refused at once must not spin this loop on microtasks alone (timers would starve).
        if (t.failed.length > 200) throw new Error(`over 200 failed acquires: ${[...new Set(t.failed)].join(', ')}; the last: ${t.lastFailure}`);
        await pause(50);
        continue;
      }
      if (wasKilled) counts[client]!.after++;
      else counts[client]!.before++;
    }
  });
  await until(() => counts.every((c) => c.before >= BEFORE_KILL), 'every client granted before the kill', 60_000);
  await across.before();
  killing = true;
  const id = await leader.kill();
  killed = true;
  await within(Promise.all([...loops, across.after()]), LIMIT_MS, 'every client granted again after the leader kill');
  expect(t.granted).toBeGreaterThanOrEqual(CLIENTS * (BEFORE_KILL + AFTER_KILL));
  return id;
}

/** Record how a grant's holding ended, if it ended before our release. */
function watchLoss(t: Tally, lock: Lock): void {
  lock.signal.addEventListener(
    'abort',
    () => {
      const reason = lock.signal.reason as unknown;
      // Our own release aborts with reason 'released': not a loss.
      if (reason instanceof LockLostError && reason.reason === 'released') return;
      t.lost.push(reason instanceof LockLostError ? reason.reason : String(reason));
    },
    { once: true },
  );
}

function failure(t: Tally, error: unknown): false {
  t.lastFailure = error instanceof Error ? error.message : String(error);
  if (error instanceof FencekeeperError) t.failed.push(error.code);
  else t.failed.push(`not a FencekeeperError: ${String(error)}`);
  return false;
}

/**
 * Count a grant and its epoch: of a grant before the kill was sent, or of an
 * acquire begun once the killed leader was gone (one begun before the kill
 * and granted after it may carry either epoch: its node or slot written by
 * either leader).
 */
function epochs(t: Tally, token: FencingToken, startedAfterKill: boolean, phase: Phase): void {
  t.granted++;
  if (startedAfterKill) {
    t.grantedAfterKill++;
    if (t.minEpochAfter === null || epochOf(token) < t.minEpochAfter) t.minEpochAfter = epochOf(token);
  } else if (!phase.killing() && epochOf(token) > t.maxEpochBefore) t.maxEpochBefore = epochOf(token);
}

/** The stable outcomes: every loss a LossReason, every failed acquire a FencekeeperError's code. */
function expectStable(t: Tally): void {
  for (const reason of t.lost) expect(['deadline', 'session_expired', 'node_deleted', 'renewal_failed', 'closed']).toContain(reason);
  for (const code of t.failed) expect(code).toMatch(/^[A-Z][A-Z_]+$/);
}

/**
 * Nothing under `parent` once every grant was released: read after a few
 * seconds (a follower's view may lag the leader's), naming each node left
 * with the client whose session owns it.
 */
async function leftBehind(zks: readonly ZooKeeperClient[], parent: string): Promise<void> {
  const empty = async (): Promise<boolean> => (await queueChildren(zks[0]!, parent)).length === 0;
  await until(empty, 'the queue to empty', 10_000).catch(() => undefined);
  const left = await queueChildren(zks[0]!, parent);
  const owners = await Promise.all(
    left.map(async (child) => {
      const stat = await zks[0]!.exists(`${parent}/${child}`);
      const owner = stat === null ? -1 : zks.findIndex((zk) => zk.sessionId === stat.ephemeralOwner);
      return `${child} (client ${owner}, czxid 0x${stat?.czxid.toString(16)})`;
    }),
  );
  expect(owners, 'nodes left behind once every grant was released').toEqual([]);
}

describe('read-write lock across a leader kill', () => {
  it('readers share, writers alone, writer tokens above every earlier grant, before and after the kill; the queue empty after', async () => {
    await waitEnsembleHealthy();
    const name = uniqueLockName('kinds_failover_rw');
    const zks = await clients.many(CLIENTS, testServers().zkEnsemble, SESSION_MS);
    const t = tally();
    /** Live grants (not released, not lost): who may be beside whom. */
    let readers = 0;
    let writers = 0;
    let maxReaders = 0;
    const granted: { write: boolean; token: FencingToken }[] = [];
    let maxReleasedWrite = 0n;
    // Across the kill: a writer holding, a reader and a writer waiting behind it, in that order.
    const still = uniqueLockName('kinds_failover_rw_across');
    let holder: Lock | undefined;
    let reader: Promise<Lock> | undefined;
    let writer: Promise<Lock> | undefined;
    const across: AcrossKill = {
      async before() {
        holder = await retrying(() => acquireWriteLock(zks[0]!, still), 30_000, 'the holder across the kill');
        reader = acquireReadLock(zks[1]!, still, { timeoutMs: LIMIT_MS });
        // Awaited in after(); a test that fails before then must not leave it unhandled when its client closes.
        reader.catch(() => undefined);
        await until(async () => (await queueChildren(zks[0]!, `${RW_LOCKS_ROOT}/${still}`)).length === 2, 'the reader queued');
        writer = acquireWriteLock(zks[2]!, still, { timeoutMs: LIMIT_MS });
        writer.catch(() => undefined);
        await until(async () => (await queueChildren(zks[0]!, `${RW_LOCKS_ROOT}/${still}`)).length === 3, 'the writer queued');
      },
      async after() {
        // Once the clients are back on a new leader: the holder still holds, the waiters still wait.
        await until(async () => (await queueChildren(zks[0]!, `${RW_LOCKS_ROOT}/${still}`)).length === 3, 'the queue read from the new leader', 60_000);
        await pause(200);
        expect(holder!.held, 'the writer held across the kill').toBe(true);
        expect(holder!.signal.aborted).toBe(false);
        expect(await Promise.race([reader!.then(() => 'granted'), pause(100).then(() => 'waiting')])).toBe('waiting');
        await holder!.release();
        const r = await reader!;
        expect(r.token > holder!.token).toBe(true);
        expect(await Promise.race([writer!.then(() => 'granted'), pause(100).then(() => 'waiting')])).toBe('waiting');
        await r.release();
        const w = await writer!;
        expect(w.token > r.token).toBe(true);
        expect(w.held).toBe(true);
        await w.release();
        expect(await queueChildren(zks[0]!, `${RW_LOCKS_ROOT}/${still}`)).toEqual([]);
      },
    };
    const id = await withKill(zks, t, async (zk, client, i, phase) => {
      const write = (client + i) % 3 === 0;
      const afterKill = phase.killed();
      let lock: Lock;
      try {
        lock = write ? await acquireWriteLock(zk, name, { timeoutMs: 60_000 }) : await acquireReadLock(zk, name, { timeoutMs: 60_000 });
      } catch (error) {
        return failure(t, error);
      }
      watchLoss(t, lock);
      epochs(t, lock.token, afterKill, phase);
      if (lock.sequencer.kind !== (write ? 'write' : 'read')) t.violations.push(`kind ${lock.sequencer.kind}`);
      if (write) {
        if (writers > 0 || readers > 0) t.violations.push(`writer ${lock.token} beside ${writers} writers and ${readers} readers`);
        for (const g of granted) if (g.token >= lock.token) t.violations.push(`writer ${lock.token} after ${g.write ? 'writer' : 'reader'} ${g.token}`);
      } else {
        if (writers > 0) t.violations.push(`reader ${lock.token} beside a writer`);
        for (const g of granted) if (g.write && g.token >= lock.token) t.violations.push(`reader ${lock.token} after writer ${g.token}`);
      }
      if (lock.token <= maxReleasedWrite) t.violations.push(`${write ? 'writer' : 'reader'} ${lock.token} after a released writer ${maxReleasedWrite}`);
      granted.push({ write, token: lock.token });
      // A grant lost meanwhile leaves the count at once: the next grant may then be legitimate.
      let counted = true;
      const leave = (): void => {
        if (!counted) return;
        counted = false;
        if (write) writers--;
        else readers--;
      };
      lock.signal.addEventListener('abort', leave, { once: true });
      if (write) writers++;
      else maxReaders = Math.max(maxReaders, ++readers);
      await pause(write ? 2 : 8);
      leave();
      if (write && lock.token > maxReleasedWrite) maxReleasedWrite = lock.token;
      await lock.release();
      return true;
    }, across);
    expect([1, 2, 3]).toContain(id);
    expect(t.violations).toEqual([]);
    expectStable(t);
    expect(maxReaders).toBeGreaterThan(1);
    expect(t.minEpochAfter! > t.maxEpochBefore, `epoch after the kill ${t.minEpochAfter} vs before ${t.maxEpochBefore}`).toBe(true);
    await leftBehind(zks, `${RW_LOCKS_ROOT}/${name}`);
    console.log(`rw failover: leader ${id} killed; ${t.granted} grants (${t.grantedAfterKill} after), ${t.lost.length} lost ${JSON.stringify(t.lost)}, ${t.failed.length} failed acquires ${JSON.stringify(t.failed)}`);
    }, TEST_MS);
});

describe('permits across a leader kill', () => {
  it('never more than 3 held nor two on a slot, per-slot tokens strictly increasing across the kill; nothing left after', async () => {
    await waitEnsembleHealthy();
    const name = uniqueLockName('kinds_failover_permit');
    const zks = await clients.many(CLIENTS, testServers().zkEnsemble, SESSION_MS);
    const t = tally();
    const holding = new Set<number>();
    let most = 0;
    const lastBySlot = new Map<number, FencingToken>();
    // Across the kill: one permit of 1 held, a waiter behind it.
    const still = uniqueLockName('kinds_failover_permit_across');
    let holder: Awaited<ReturnType<typeof acquirePermit>> | undefined;
    let waiter: ReturnType<typeof acquirePermit> | undefined;
    const across: AcrossKill = {
      async before() {
        holder = await retrying(() => acquirePermit(zks[0]!, still, { permits: 1 }), 30_000, 'the permit across the kill');
        waiter = acquirePermit(zks[1]!, still, { permits: 1, timeoutMs: LIMIT_MS });
        waiter.catch(() => undefined);
        await until(async () => (await queueChildren(zks[0]!, `${SEMAPHORES_ROOT}/${still}`)).length === 2, 'the waiter queued');
      },
      async after() {
        await until(async () => (await queueChildren(zks[0]!, `${SEMAPHORES_ROOT}/${still}`)).length === 2, 'the semaphore read from the new leader', 60_000);
        await pause(200);
        expect(holder!.held, 'the permit held across the kill').toBe(true);
        expect(holder!.signal.aborted).toBe(false);
        expect(await Promise.race([waiter!.then(() => 'granted'), pause(100).then(() => 'waiting')])).toBe('waiting');
        await holder!.release();
        const next = await waiter!;
        expect(next.slot).toBe(0);
        // Its slot claimed after the kill: a token of the new epoch.
        expect(epochOf(next.token) > epochOf(holder!.token), `0x${next.token.toString(16)} after 0x${holder!.token.toString(16)}`).toBe(true);
        await next.release();
        expect(await queueChildren(zks[0]!, `${SEMAPHORES_ROOT}/${still}`)).toEqual([]);
      },
    };
    const id = await withKill(zks, t, async (zk, _client, _i, phase) => {
      const afterKill = phase.killed();
      let permit: Awaited<ReturnType<typeof acquirePermit>>;
      try {
        permit = await acquirePermit(zk, name, { permits: 3, timeoutMs: 60_000 });
      } catch (error) {
        return failure(t, error);
      }
      watchLoss(t, permit);
      epochs(t, permit.token, afterKill, phase);
      if (permit.slot < 0 || permit.slot >= 3 || permit.permits !== 3) t.violations.push(`slot ${permit.slot} of ${permit.permits}`);
      if (holding.has(permit.slot)) t.violations.push(`slot ${permit.slot} held twice (token ${permit.token})`);
      if (holding.size >= 3) t.violations.push(`a 4th permit (token ${permit.token})`);
      const last = lastBySlot.get(permit.slot);
      if (last !== undefined && permit.token <= last) t.violations.push(`slot ${permit.slot}: ${permit.token} after ${last}`);
      lastBySlot.set(permit.slot, permit.token);
      if (permit.sequencer.name !== `${name}#${permit.slot}`) t.violations.push(`sequencer ${permit.sequencer.name}`);
      let counted = true;
      const leave = (): void => {
        if (counted) holding.delete(permit.slot);
        counted = false;
      };
      permit.signal.addEventListener('abort', leave, { once: true });
      holding.add(permit.slot);
      most = Math.max(most, holding.size);
      await pause(10);
      leave();
      await permit.release();
      return true;
    }, across);
    expect([1, 2, 3]).toContain(id);
    expect(t.violations).toEqual([]);
    expectStable(t);
    expect(most).toBeGreaterThan(1);
    expect([...lastBySlot.keys()].sort()).toEqual([0, 1, 2]);
    expect(t.minEpochAfter! > t.maxEpochBefore, `epoch after the kill ${t.minEpochAfter} vs before ${t.maxEpochBefore}`).toBe(true);
    await leftBehind(zks, `${SEMAPHORES_ROOT}/${name}`);
    console.log(`permit failover: leader ${id} killed; ${t.granted} grants (${t.grantedAfterKill} after), ${t.lost.length} lost ${JSON.stringify(t.lost)}, ${t.failed.length} failed acquires ${JSON.stringify(t.failed)}`);
    }, TEST_MS);
});
