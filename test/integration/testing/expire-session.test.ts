// fencekeeper/testing's expireSession(): the server ends a live session at
// once (its ephemeral nodes go, the lock passes to the next waiter), long
// before the session could time out, and the client itself sees 'expired'.
// Against the shared standalone server and the 3-node ensemble (a session
// held by a follower is closed through another server), for clients
// connected through sessionRecorder() and for plain ones (whose password
// expireSession derives from the session id, as the server does), over TCP
// and over TLS.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockLostError } from '../../../src/index.js';
import { ZooKeeperClient, acquireLock, lockStatus, tlsConnector, type ConnectOptions } from '../../../src/sources/zookeeper/index.js';
import { expireSession, sessionRecorder, type ExpireSessionOptions } from '../../../src/testing/index.js';
import { sessionPassword } from '../../../src/testing/expire-session.js';
import { connectTcp, type Connector } from '../../../src/sources/zookeeper/connection.js';
import { testServers } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';

/** Long enough that an expiry by timeout cannot be what the test saw. */
const SESSION_MS = 30_000;

const clients: ZooKeeperClient[] = [];
async function connect(connectString: string, recorded = true, extra: Partial<ConnectOptions> = {}): Promise<ZooKeeperClient> {
  const zk = await ZooKeeperClient.connect({ connectString, sessionTimeoutMs: SESSION_MS, ...(recorded && { connector: sessionRecorder() }), ...extra });
  clients.push(zk);
  return zk;
}

/** Passwords as the server sent them in its ConnectResponse, by session id (for the derivation's check). */
const sniffed = new Map<bigint, Uint8Array>();
const sniffPassword: Connector = async (address, options) => {
  const stream = await connectTcp(address, options);
  stream.once('data', (chunk: Buffer) => {
    // The response's frame: length, protocolVersion, timeOut, sessionId (8), passwd length, passwd.
    sniffed.set(chunk.readBigInt64BE(12), Uint8Array.from(chunk.subarray(24, 24 + chunk.readInt32BE(20))));
  });
  return stream;
};

let standalone: string;
let ensemble: string;
beforeAll(() => {
  standalone = testServers().zkStandalone;
  ensemble = testServers().zkEnsemble;
});
afterAll(async () => {
  await Promise.all(clients.map((zk) => zk.close()));
});

/** The holder loses its lock at once, the waiter gets it, the holder's client is expired. */
async function expireHolder(holderZk: ZooKeeperClient, waiterZk: ZooKeeperClient, options: ExpireSessionOptions = {}): Promise<void> {
  const lock = uniqueLockName('expire');
  expect(holderZk.sessionTimeoutMs).toBe(SESSION_MS);
  const held = await acquireLock(holderZk, lock);
  const waiting = acquireLock(waiterZk, lock);
  await expect.poll(async () => (await lockStatus(waiterZk, lock)).waiters.length).toBe(1);

  const started = performance.now();
  await expireSession(holderZk, options);
  const tookMs = performance.now() - started;

  expect(holderZk.state).toBe('expired');
  expect(held.held).toBe(false);
  expect(held.signal.aborted).toBe(true);
  expect(held.signal.reason).toBeInstanceOf(LockLostError);
  // Which the client hears first depends on the race with its own
  // reconnect: the expiry (it was still disconnected) or its node's
  // deletion (it got back onto the session just before the close, and the
  // server told it about the node before dropping it). Both end the lock.
  expect(['session_expired', 'node_deleted']).toContain((held.signal.reason as LockLostError).reason);
  const next = await waiting;
  expect(next.token).toBeGreaterThan(held.token);
  expect((await lockStatus(waiterZk, lock)).holder?.token).toBe(next.token);
  // Ended by the server, not by the session timing out (slack, not a measurement).
  expect(tookMs).toBeLessThan(SESSION_MS);
  await expect(holderZk.exists('/')).rejects.toMatchObject({ code: 'SESSION_EXPIRED' });
  await next.release();
}

describe('expireSession()', () => {
  it.each([
    ['the standalone server', () => standalone],
    ['the ensemble', () => ensemble],
  ])('on %s, a client connected through sessionRecorder(): no options needed', async (_where, server) => {
    await expireHolder(await connect(server()), await connect(server(), false));
  });

  it.each([
    ['the standalone server', () => standalone],
    ['the ensemble', () => ensemble],
  ])('on %s, a plain client: its connect string is enough (the password follows from the session id)', async (_where, server) => {
    await expireHolder(await connect(server(), false), await connect(server(), false), { connectString: server() });
  });

  it.each([
    ['the standalone server', () => standalone],
    ['the ensemble', () => ensemble],
  ])('on %s, a plain client with no options: ended through its own servers, dialled its own way', async (_where, server) => {
    await expireHolder(await connect(server(), false), await connect(server(), false));
  });

  it('the password it derives is the one the server handed out', async () => {
    const zk = await connect(standalone, false, { connector: sniffPassword });
    expect(Buffer.from(sessionPassword(zk.sessionId)).toString('hex')).toBe(Buffer.from(sniffed.get(zk.sessionId)!).toString('hex'));
  });

  it('over TLS: through a recording TLS connector, or a plain TLS client with the tls option', async () => {
    const servers = testServers();
    const ca = readFileSync(servers.zkTlsCa);
    const recorded = await connect(servers.zkStandaloneTls, false, { connector: sessionRecorder(tlsConnector({ ca })) });
    await expireHolder(recorded, await connect(servers.zkStandaloneTls, false, { tls: { ca } }));
    const plain = await connect(servers.zkEnsembleTls, false, { tls: { ca } });
    await expireHolder(plain, await connect(servers.zkEnsembleTls, false, { tls: { ca } }), { connectString: servers.zkEnsembleTls, tls: { ca } });
    // With no options: the client's own servers, over its own TLS connector.
    const own = await connect(servers.zkStandaloneTls, false, { tls: { ca } });
    await expireHolder(own, await connect(servers.zkStandaloneTls, false, { tls: { ca } }));
  });

  it('bad options are refused before anything is dialled, and leave the session alone', async () => {
    const zk = await connect(standalone, false);
    await expect(expireSession(zk, { connectString: standalone, tls: {}, connector: sessionRecorder() })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(expireSession(zk, { connectString: '127.0.0.1:99999' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(zk.state).toBe('connected');
    expect(await zk.exists('/')).not.toBeNull();
  });

  it('resolves for a session that has already expired, and refuses a closed client', async () => {
    const expired = await connect(standalone);
    await expireSession(expired);
    await expireSession(expired); // already expired: nothing to do
    expect(expired.state).toBe('expired');

    const closed = await connect(standalone);
    await closed.close();
    await expect(expireSession(closed)).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('ends a session after its client reconnected (recorded again from the new connection)', async () => {
    const proxy = await TcpProxy.to(standalone);
    try {
      const zk = await connect(proxy.address);
      const session = zk.sessionId;
      const lock = await acquireLock(zk, uniqueLockName('expire_moved'));
      const back = new Promise<void>((resolve) => {
        const onState = (state: string): void => {
          if (state !== 'connected') return;
          zk.off('state', onState);
          resolve();
        };
        zk.on('state', onState);
      });
      proxy.cut();
      await back;
      expect(zk.sessionId).toBe(session);
      await expireSession(zk);
      expect(zk.state).toBe('expired');
      expect(lock.held).toBe(false);
    } finally {
      await proxy.close();
    }
  });
});
