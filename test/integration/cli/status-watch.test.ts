// `fencekeeper status <lock> --watch` against the real ZooKeeper: a new
// listing each time a waiter joins or leaves, from the watch on the lock's
// parent, never from polling. The command talks to ZooKeeper through a
// proxy that counts every request it sends (by opcode), so the test can see
// that while nothing changes it sends nothing but pings, and that a dropped
// connection and a lost session are reported and recovered from.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Lock } from '../../../src/index.js';
import { ZooKeeperClient, acquireLock } from '../../../src/sources/zookeeper/index.js';
import { testServers } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli, type Running } from './helpers.js';
import { until } from '../../helpers/wait.js';

/** ZooDefs.OpCode values this test tells apart. */
const OP = { exists: 3, getData: 4, ping: 11, getChildren2: 12, closeSession: -11 } as const;
const READS: readonly number[] = [OP.exists, OP.getData, OP.getChildren2];

/** The requests a client sends, read off its bytes: per connection, frames of int32 length; after the ConnectRequest each starts with xid, type. */
class RequestLog {
  readonly ops: number[] = [];
  readonly #pending = new Map<number, { buffer: Buffer; connected: boolean }>();

  observe(chunk: Buffer, connection: number): void {
    let state = this.#pending.get(connection);
    if (state === undefined) this.#pending.set(connection, (state = { buffer: Buffer.alloc(0), connected: false }));
    state.buffer = Buffer.concat([state.buffer, chunk]);
    while (state.buffer.length >= 4) {
      const length = state.buffer.readInt32BE(0);
      if (state.buffer.length < 4 + length) break;
      const frame = state.buffer.subarray(4, 4 + length);
      state.buffer = state.buffer.subarray(4 + length);
      if (!state.connected) {
        state.connected = true; // the ConnectRequest: no request header
        continue;
      }
      this.ops.push(frame.readInt32BE(4));
    }
  }

  count(op: number, since = 0): number {
    return this.ops.slice(since).filter((o) => o === op).length;
  }

  /** Every request since `since` that is not a ping. */
  notPings(since = 0): number[] {
    return this.ops.slice(since).filter((o) => o !== OP.ping);
  }
}

interface Listing {
  event: 'queue';
  at: string;
  queue: { role: string; token: string; owner: string }[];
}
interface Notice {
  event: 'disconnected' | 'reconnected' | 'lost' | 'connected';
  detail: string;
}

function lines(run: Running): (Listing | Notice)[] {
  return run.stdout().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Listing | Notice);
}
const listings = (run: Running): Listing[] => lines(run).filter((l): l is Listing => l.event === 'queue');

describe('fencekeeper status --watch', () => {
  let server: string;
  let zk: ZooKeeperClient;
  let waiterZk: ZooKeeperClient;
  let proxy: TcpProxy;
  let log: RequestLog;
  let watching: Running | null = null;

  beforeAll(async () => {
    assertBuilt();
    server = testServers().zkStandalone;
    zk = await ZooKeeperClient.connect({ connectString: server, sessionTimeoutMs: 4000 });
    waiterZk = await ZooKeeperClient.connect({ connectString: server, sessionTimeoutMs: 4000 });
  });
  afterAll(async () => {
    await waiterZk?.close();
    await zk?.close();
  });
  afterEach(async () => {
    if (watching !== null && watching.child.exitCode === null) watching.child.kill('SIGKILL');
    watching = null;
    await proxy?.close();
  });

  async function watch(lock: string, extra: string[] = ['--json']): Promise<Running> {
    log = new RequestLog();
    const requests = log;
    proxy = await TcpProxy.to(server, { observe: (chunk, from, connection) => from === 'client' && requests.observe(chunk, connection) });
    watching = cli(['status', lock, '--watch', ...extra, '--zookeeper', proxy.address, '--session-timeout', '2000']);
    return watching;
  }

  async function nextListing(run: Running, count: number, what: string): Promise<Listing> {
    await until(() => listings(run).length >= count || run.child.exitCode !== null, what);
    const shown = listings(run);
    if (shown.length < count) throw new Error(`status --watch exited (${String(run.child.exitCode)}) before ${what}:\n${run.stderr()}`);
    expect(shown.length, `one listing per change (${what})`).toBe(count);
    return shown[count - 1] as Listing;
  }

  it('prints a new listing when a holder and a waiter join and leave, and sends nothing but pings while nothing changes', async () => {
    const lock = uniqueLockName('watch');
    const run = await watch(lock);
    expect((await nextListing(run, 1, 'the first listing')).queue).toEqual([]);
    // No queue yet: it listed the parent (missing) and left an exists watch on it.
    expect(log.notPings()).toEqual([OP.getChildren2, OP.exists]);

    const holder = await acquireLock(zk, lock, { owner: 'holder-a' });
    const held = await nextListing(run, 2, 'the holder');
    expect(held.queue).toEqual([{ role: 'holder', token: holder.token.toString(), owner: 'holder-a', session: `0x${zk.sessionId.toString(16)}`, node: holder.path }]);

    const leave = new AbortController();
    const waiting = acquireLock(waiterZk, lock, { owner: 'waiter-b', signal: leave.signal });
    waiting.catch(() => undefined); // awaited below; not unhandled if the test fails before
    const queued = await nextListing(run, 3, 'the waiter');
    expect(queued.queue.map((e) => [e.role, e.owner])).toEqual([['holder', 'holder-a'], ['waiter', 'waiter-b']]);
    expect(BigInt(queued.queue[1]!.token)).toBeGreaterThan(holder.token);
    // That listing cost one getChildren and a getData per node.
    const afterQueued = log.ops.length;

    // Nothing changes: three pings go by (the client pings a third of the
    // session timeout after its last request) and not one other request.
    // (A poller's first read ends the wait too, and fails the check below.)
    await until(() => log.count(OP.ping, afterQueued) >= 3 || log.notPings(afterQueued).length > 0, 'three pings from the watching client');
    expect(log.notPings(afterQueued), 'requests while the queue did not change').toEqual([]);
    expect(listings(run)).toHaveLength(3);

    leave.abort();
    await expect(waiting).rejects.toThrow();
    expect((await nextListing(run, 4, 'the waiter leaving')).queue.map((e) => e.owner)).toEqual(['holder-a']);
    await holder.release();
    expect((await nextListing(run, 5, 'the holder releasing')).queue).toEqual([]);
    // Every request was a read the watch asked for: no writes, no polling loop.
    expect(log.notPings().filter((o) => !READS.includes(o))).toEqual([]);
    expect(log.count(OP.getChildren2)).toBeLessThanOrEqual(listings(run).length + 3);

    run.child.kill('SIGTERM');
    expect((await run.done).code).toBe(0);
  });

  it('reports a dropped connection and a lost session, recovers from both, and keeps watching', async () => {
    const lock = uniqueLockName('watch_loss');
    const run = await watch(lock);
    await nextListing(run, 1, 'the first listing');
    const first = await acquireLock(zk, lock, { owner: 'first' });
    await nextListing(run, 2, 'the holder');

    // A cut: the client reconnects within its session and setWatches re-arms the watch.
    const connectionsBefore = proxy.connectionCount;
    expect(connectionsBefore).toBe(1);
    proxy.cut();
    await until(() => lines(run).some((l) => l.event === 'reconnected'), 'the reconnect after the cut');
    expect(lines(run).map((l) => l.event).slice(-2)).toEqual(['disconnected', 'reconnected']);
    let second: Lock | null = null;
    const secondWaits = acquireLock(waiterZk, lock, { owner: 'second' }).then((l) => (second = l));
    const afterCut = await nextListing(run, 3, 'a waiter joining after the cut');
    expect(afterCut.queue.map((e) => e.owner)).toEqual(['first', 'second']);

    // A partition longer than the session: the session is gone for good; the
    // command says so, connects again (failing while the partition lasts),
    // and lists the queue from its new session once the partition heals.
    proxy.blackhole();
    await until(() => lines(run).some((l) => l.event === 'lost' && /trying again/.test(l.detail)), 'a failed reconnect during the partition', 30_000);
    const lost = lines(run).filter((l): l is Notice => l.event === 'lost');
    expect(lost[0]?.detail).toMatch(/session 0x[0-9a-f]+ expired; connecting again/);
    proxy.resume();
    await until(() => lines(run).some((l) => l.event === 'connected'), 'the new session', 30_000);
    const again = await nextListing(run, 4, 'the listing from the new session');
    expect(again.queue.map((e) => e.owner)).toEqual(['first', 'second']);
    await first.release();
    await secondWaits;
    expect((await nextListing(run, 5, 'the first holder leaving')).queue.map((e) => e.owner)).toEqual(['second']);
    await (second as Lock | null)?.release();

    run.child.kill('SIGINT');
    expect((await run.done).code).toBe(0);
  });

  it('prints tables in text mode, connection news on stderr, and exits 0 on SIGINT', async () => {
    const lock = uniqueLockName('watch_text');
    const run = await watch(lock, []);
    await until(() => run.stdout().includes(`${lock}: free`), 'the first table');
    const holder = await acquireLock(zk, lock, { owner: 'text-holder' });
    await until(() => run.stdout().includes(`${lock}: held, 0 waiting`), 'the table with the holder');
    expect(run.stdout()).toMatch(/^--- \d{4}-\d\d-\d\dT[\d:.]+Z\n/);
    expect(run.stdout()).toMatch(new RegExp(`0\\s+holder\\s+${holder.token}\\s+text-holder\\s+0x[0-9a-f]+`));
    proxy.cut();
    await until(() => run.stderr().includes('connected to ZooKeeper again'), 'the reconnect news');
    expect(run.stderr()).toContain('fencekeeper: lost the connection to ZooKeeper');
    await holder.release();
    run.child.kill('SIGINT');
    const result = await run.done;
    expect(result.code).toBe(0);
    expect(result.signal).toBeNull();
  });
});
