// Real network faults between the client and a standalone ZooKeeper, through
// a TCP proxy owned by the test: connection resets and a black hole.
import { afterEach, describe, expect, it } from 'vitest';
import { ConnectionLossError, SessionExpiredError } from '../../../src/errors.js';
import { ZooKeeperClient, type ClientState } from '../../../src/sources/zookeeper/client.js';
import type { WatchEvent } from '../../../src/sources/zookeeper/watches.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { RequestCounter, fileNamespace, watcherSpy } from './helpers.js';
import { until } from '../../helpers/wait.js';

// the admin client's session: the client's default
const file = new StandaloneFile(10_000);
const pool = file.clients;
const root = fileNamespace(file, 'zkproxy');
let proxy: TcpProxy | undefined;
const extraProxies: TcpProxy[] = [];

afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
  for (const p of extraProxies.splice(0)) await p.close();
});

async function throughProxy(sessionTimeoutMs: number, connector?: RequestCounter['connector']): Promise<{ zk: ZooKeeperClient; states: ClientState[] }> {
  proxy = await TcpProxy.to(file.server);
  const zk = await pool.connect({ connectString: proxy.address, sessionTimeoutMs, ...(connector && { connector }) });
  const states: ClientState[] = [];
  zk.on('state', (s) => states.push(s));
  return { zk, states };
}

describe('connection reset (RST) through the proxy', () => {
  it('goes suspended then connected, keeps its session, ephemeral nodes and watches', async () => {
    const { zk, states } = await throughProxy(10_000);
    const session = zk.sessionId;
    const node = `${root}/cut-${session.toString(16)}`;
    await zk.create(node, 'x', { mode: 'ephemeral' });
    const watched = watcherSpy<WatchEvent>();
    await zk.getData(node, { watch: watched.fn });

    // Issued in the same tick as the cut: it cannot reach the server, so it
    // fails with ConnectionLossError (outcome unknown), not a hang.
    const inflight = zk.exists(node);
    proxy!.cut();
    await expect(inflight).rejects.toBeInstanceOf(ConnectionLossError);

    await until(() => zk.state === 'connected' && states.length >= 2, 'the client to reconnect');
    expect(states).toEqual(['suspended', 'connected']);
    expect(zk.sessionId).toBe(session);
    expect((await zk.exists(node))?.ephemeralOwner).toBe(session);
    expect((await file.admin.exists(node))?.ephemeralOwner).toBe(session);

    // The watch was re-armed on the new connection.
    await file.admin.setData(node, 'changed');
    expect(await watched.next).toEqual({ type: 'dataChanged', path: node });
  });

  it('survives repeated cuts, with requests in flight each time', async () => {
    const wire = new RequestCounter();
    const { zk, states } = await throughProxy(10_000, wire.connector);
    const session = zk.sessionId;
    const node = `${root}/many-${session.toString(16)}`;
    const { stat: created } = await zk.create(node, null, { mode: 'ephemeral' });
    const isOurNode = (stat: unknown): boolean =>
      typeof stat === 'object' && stat !== null && (stat as { czxid?: unknown }).czxid === created.czxid && (stat as { ephemeralOwner?: unknown }).ephemeralOwner === session;
    for (let i = 0; i < 5; i++) {
      // Answered before the cut ...
      const before = Array.from({ length: 25 }, () => zk.exists(node));
      await before[before.length - 1]; // replies come in order: all 25 are in
      // ... and written but certainly unanswered at it: the proxy runs in
      // this process, so it cannot forward a reply before cut() returns.
      const burst = Array.from({ length: 50 }, () => zk.exists(node));
      // The client writes what was issued this tick once the tick's promise
      // jobs have run (a process.nextTick queued before this one).
      await new Promise((resolve) => process.nextTick(resolve));
      const inFlight = wire.inFlight;
      proxy!.cut();
      expect(inFlight, `cut ${i}: requests written and unanswered at the cut`).toBeGreaterThanOrEqual(1);

      const settled = await Promise.allSettled([...before, ...burst]);
      const lost = settled.filter((r) => r.status === 'rejected');
      for (const r of settled) {
        // A success is the real Stat of our node, never a stand-in (null) for an answer that never came.
        if (r.status === 'fulfilled') expect(isOurNode(r.value), `cut ${i}: ${String(r.value)}`).toBe(true);
        else expect(r.reason).toBeInstanceOf(ConnectionLossError);
      }
      // Only requests in flight at the cut may fail, and the ones in flight did not come back.
      expect(settled.slice(0, before.length).every((r) => r.status === 'fulfilled')).toBe(true);
      expect(lost.length).toBeGreaterThanOrEqual(1);
      expect(lost.length).toBeLessThanOrEqual(inFlight);
      await until(() => zk.state === 'connected', 'reconnect');
      expect(isOurNode(await zk.exists(node))).toBe(true);
    }
    expect(zk.sessionId).toBe(session);
    expect(states).toEqual(Array.from({ length: 5 }, () => ['suspended', 'connected']).flat());
  });

  it('requests issued while suspended are sent after the reconnect', async () => {
    const { zk } = await throughProxy(10_000);
    const node = `${root}/queued-${zk.sessionId.toString(16)}`;
    // Issue the requests from the 'suspended' listener: the reconnect starts at once.
    const issued = new Promise<[Promise<{ path: string }>, Promise<{ data: Uint8Array }>, ClientState]>((resolve) => {
      zk.once('state', (state) => resolve([zk.create(node, 'q', { mode: 'ephemeral' }), zk.getData(node), state]));
    });
    proxy!.cut();
    const [created, read, state] = await issued;
    expect(state).toBe('suspended');
    expect((await created).path).toBe(node);
    expect(Buffer.from((await read).data).toString()).toBe('q');
  });
});

describe('black hole longer than the session timeout', () => {
  it('ends in state expired; pending and later calls fail with SessionExpiredError', async () => {
    const { zk, states } = await throughProxy(4000);
    const session = zk.sessionId;
    const node = `${root}/bh-${session.toString(16)}`;
    await zk.create(node, null, { mode: 'ephemeral' });
    const gone = watcherSpy<WatchEvent>();
    await file.admin.exists(node, { watch: gone.fn });

    proxy!.blackhole();
    // Sent into the black hole: its outcome is unknown when the client gives up on the connection.
    const inflight = zk.exists(node).catch((e: unknown) => e);
    await until(() => zk.state !== 'connected', 'the client to notice the dead connection', 20_000);
    expect(zk.state).toBe('suspended');
    expect(await inflight).toBeInstanceOf(ConnectionLossError);
    // Issued while suspended: waits for a connection that never comes back with this session.
    const pending = zk.getData(node).catch((e: unknown) => e);

    // The server expires the session (a real event, seen by another client) ...
    expect(await gone.next).toEqual({ type: 'deleted', path: node });
    // ... and the client, still cut off, concludes the same by its own clock.
    await until(() => zk.state === 'expired', 'the client to declare the session expired while partitioned', 3 * zk.sessionTimeoutMs);

    expect(await pending).toBeInstanceOf(SessionExpiredError);
    await expect(zk.exists(node)).rejects.toBeInstanceOf(SessionExpiredError);
    await expect(zk.create(`${node}-2`)).rejects.toBeInstanceOf(SessionExpiredError);
    expect(states).toEqual(['suspended', 'expired']);
    proxy!.resume();
    await zk.close();
    expect(zk.state).toBe('expired');
    expect(states).toEqual(['suspended', 'expired']);
  });

  it('a server that answers the resumed session after the heal says expired', async () => {
    const { zk, states } = await throughProxy(4000);
    const node = `${root}/heal-${zk.sessionId.toString(16)}`;
    await zk.create(node, null, { mode: 'ephemeral' });
    const gone = watcherSpy<WatchEvent>();
    await file.admin.exists(node, { watch: gone.fn });
    proxy!.blackhole();
    await gone.next; // the server has expired the session
    proxy!.resume();
    await until(() => zk.state === 'expired', 'state expired after the heal', 3 * zk.sessionTimeoutMs);
    expect(states).toEqual(['suspended', 'expired']);
    await expect(zk.getChildren(root)).rejects.toBeInstanceOf(SessionExpiredError);
  });

  it('expires by its own clock even when every address accepts TCP but none answers (several servers)', async () => {
    // Three addresses, each a proxy to the same server, all black-holed: the
    // TCP handshake with the proxy succeeds, the ConnectRequest goes nowhere.
    for (let i = 0; i < 3; i++) extraProxies.push(await TcpProxy.to(file.server));
    const zk = await pool.connect({ connectString: extraProxies.map((p) => p.address).join(','), sessionTimeoutMs: 4000 });
    const states: ClientState[] = [];
    zk.on('state', (s) => states.push(s));
    const node = `${root}/multi-${zk.sessionId.toString(16)}`;
    await zk.create(node, null, { mode: 'ephemeral' });
    const gone = watcherSpy<WatchEvent>();
    await file.admin.exists(node, { watch: gone.fn });
    for (const p of extraProxies) p.blackhole();
    const pending = new Promise<unknown>((resolve) => {
      zk.once('state', () => resolve(zk.getData(node).catch((e: unknown) => e)));
    });
    await gone.next; // the server has expired the session
    await until(() => zk.state === 'expired', 'the client to declare the session expired while partitioned', 3 * zk.sessionTimeoutMs);
    expect(states).toEqual(['suspended', 'expired']);
    expect(await pending).toBeInstanceOf(SessionExpiredError);
  });
});

describe('close() during a disconnect', () => {
  // Regression: close() while suspended sent no closeSession, so the
  // session's ephemeral nodes (its locks) stayed until the server expired it.
  it('sends closeSession after the reconnect: the ephemeral node is gone long before the session timeout', async () => {
    const { zk, states } = await throughProxy(30_000);
    const node = `${root}/close-suspended-${zk.sessionId.toString(16)}`;
    await zk.create(node, 'x', { mode: 'ephemeral' });
    // Cut, and hold the reconnect back until close() has been called.
    proxy!.cut();
    proxy!.blackhole();
    await until(() => states.includes('suspended'), 'the client to see the cut');
    const closing = zk.close();
    proxy!.resume();
    await closing;
    expect(zk.state).toBe('closed');
    // Seen by another session at once (the session timeout is 30 s).
    expect(await file.admin.exists(node)).toBeNull();
  });
});
