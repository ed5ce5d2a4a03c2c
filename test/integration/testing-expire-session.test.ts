// fencekeeper/testing's expireSession(): the server ends a live session at
// once (its ephemeral nodes go, the lock passes to the next waiter), long
// before the session could time out, and the client itself sees 'expired'.
// Against the shared standalone server and the 3-node ensemble (a session
// held by a follower is closed through another server).
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockLostError, ZooKeeperClient, acquireLock, lockStatus } from '../../src/index.js';
import { expireSession, sessionRecorder } from '../../src/testing/index.js';
import { testServers } from '../helpers/servers.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { uniqueLockName } from '../helpers/unique.js';

/** Long enough that an expiry by timeout cannot be what the test saw. */
const SESSION_MS = 30_000;

const clients: ZooKeeperClient[] = [];
async function connect(connectString: string, recorded = true): Promise<ZooKeeperClient> {
  const zk = await ZooKeeperClient.connect({ connectString, sessionTimeoutMs: SESSION_MS, ...(recorded && { connector: sessionRecorder() }) });
  clients.push(zk);
  return zk;
}

let standalone: string;
let ensemble: string;
beforeAll(() => {
  standalone = testServers().zkStandalone;
  ensemble = testServers().zkEnsemble;
});
afterAll(async () => {
  await Promise.all(clients.map((zk) => zk.close()));
});

describe('expireSession()', () => {
  it.each([
    ['the standalone server', () => standalone],
    ['the ensemble', () => ensemble],
  ])('on %s: the holder loses its lock at once, the waiter gets it, the client is expired', async (_where, server) => {
    const lock = uniqueLockName('expire');
    const holderZk = await connect(server());
    const waiterZk = await connect(server(), false);
    expect(holderZk.sessionTimeoutMs).toBe(SESSION_MS);
    const held = await acquireLock(holderZk, lock);
    const waiting = acquireLock(waiterZk, lock);
    await expect.poll(async () => (await lockStatus(waiterZk, lock)).waiters.length).toBe(1);

    const started = performance.now();
    await expireSession(holderZk);
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
  });

  it('refuses a client connected without sessionRecorder(), naming the fix, and leaves its session alone', async () => {
    const zk = await connect(standalone, false);
    await expect(expireSession(zk)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('connector: sessionRecorder()') });
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
