// fencing() with verifyWithZooKeeper against a real ZooKeeper: the header is
// client input, and only the czxid of the node that holds the lock right now
// may move the fence. Forged tokens (the largest token there is, the holder's
// plus one, a waiter's, another node's czxid) are refused with 403 and move
// nothing; a replaced holder is refused; a verifier that cannot reach
// ZooKeeper answers 503. And the check costs no ZooKeeper request while the
// holder does not change: the verifier's client talks to ZooKeeper through a
// proxy that counts the requests it sends (pings aside).
import diagnostics from 'node:diagnostics_channel';
import net from 'node:net';
import { express } from './variants.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fencing, MemoryFenceStore } from '../../../adapters/express/index.js';
import { verifyWithZooKeeper, type ZooKeeperVerifier } from '../../../src/sources/zookeeper/index.js';
import { MAX_TOKEN, type FencingToken, type Lock } from '../../../src/index.js';
import { acquireLock, lockStatus, ZooKeeperClient } from '../../../src/sources/zookeeper/index.js';
import { testServers } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { post, serve, type Answer, type Served } from './helpers.js';
import { mkdirp, rmrf } from '../zookeeper/helpers.js';

const H = 'fencing-token';
/** Reserved xids (ZooKeeper's ClientCnxn): -2 ping, -4 auth, -8 setWatches. */
const PING_XID = -2;

/**
 * A TCP proxy in front of ZooKeeper that reads the client's frames (int32
 * length, then for every frame after the ConnectRequest: int32 xid, int32
 * opcode) and counts the ordinary requests, i.e. everything but pings: a
 * round trip the verifier makes on a request's behalf shows up here, whatever
 * client method it went through.
 */
class CountingZooKeeperProxy {
  requests = 0;
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();

  private constructor(server: net.Server) {
    this.#server = server;
  }

  static async to(hostPort: string): Promise<CountingZooKeeperProxy> {
    const at = hostPort.lastIndexOf(':');
    const host = hostPort.slice(0, at);
    const port = Number(hostPort.slice(at + 1));
    const server = net.createServer();
    const proxy = new CountingZooKeeperProxy(server);
    server.on('connection', (client) => proxy.#accept(client, host, port));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get address(): string {
    return `127.0.0.1:${(this.#server.address() as net.AddressInfo).port}`;
  }

  #accept(client: net.Socket, host: string, port: number): void {
    const upstream = net.connect(port, host);
    for (const socket of [client, upstream]) {
      this.#sockets.add(socket);
      socket.on('close', () => {
        this.#sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
      socket.on('error', () => undefined);
    }
    let pending: Buffer = Buffer.alloc(0);
    let handshaken = false;
    client.on('data', (chunk: Buffer) => {
      upstream.write(chunk);
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      while (pending.length >= 4) {
        const length = pending.readInt32BE(0);
        if (pending.length < 4 + length) break;
        if (!handshaken) handshaken = true; // the ConnectRequest has no request header
        else if (pending.readInt32BE(4) !== PING_XID) this.requests++;
        pending = pending.subarray(4 + length);
      }
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/** Resolves with the next watch notification delivered to `zk`'s session (subscribe before the change). */
function nextWatchEvent(zk: ZooKeeperClient): Promise<{ type: string; path: string }> {
  const channel = diagnostics.channel('fencekeeper:zookeeper:watch');
  return new Promise((resolve) => {
    const onMessage = (message: unknown): void => {
      const event = message as { sessionId: bigint; type: string; path: string };
      if (event.sessionId !== zk.sessionId) return;
      channel.unsubscribe(onMessage);
      resolve({ type: event.type, path: event.path });
    };
    channel.subscribe(onMessage);
  });
}

function appWith(store: MemoryFenceStore, resource: string, verify: ZooKeeperVerifier) {
  const app = express();
  app.post('/doc', fencing({ store, resource, verify }), (req, res) => {
    res.json({ token: req.fencing!.token.toString() });
  });
  return app;
}

function expectRefused(answer: Answer, status: 403 | 503, code: 'TOKEN_REFUSED' | 'VERIFY_UNAVAILABLE'): void {
  expect(answer.status).toBe(status);
  expect(answer.contentType).toBe('application/problem+json');
  expect(answer.body).toMatchObject({ type: 'about:blank', status, code });
}

/**
 * One test's world: its own lock, resource and store, a verifier on its own
 * ZooKeeper client (through the counting proxy) behind its own HTTP server,
 * and a holder of the lock. Each test makes one, so any test runs alone.
 */
interface World {
  lockName: string;
  resource: string;
  store: MemoryFenceStore;
  verifierZk: ZooKeeperClient;
  holder: Lock;
  send(token: FencingToken | string): Promise<Answer>;
}

describe('fencing() with verifyWithZooKeeper (real ZooKeeper)', () => {
  const zkAddress = testServers().zkStandalone;
  const scratch = `/fencekeeper-test/${uniqueId('verify')}`;
  const clients: ZooKeeperClient[] = [];
  const locks: string[] = [];
  let cleanups: (() => Promise<void> | void)[] = [];
  let proxy: CountingZooKeeperProxy;

  const connect = async (connectString = zkAddress, sessionTimeoutMs?: number): Promise<ZooKeeperClient> => {
    const zk = await ZooKeeperClient.connect(sessionTimeoutMs === undefined ? { connectString } : { connectString, sessionTimeoutMs });
    clients.push(zk);
    return zk;
  };

  async function world(): Promise<World> {
    const lockName = uniqueLockName('verify');
    locks.push(lockName);
    const resource = uniqueId('doc');
    const store = new MemoryFenceStore();
    const verifierZk = await connect(proxy.address);
    const verify = verifyWithZooKeeper(verifierZk, lockName);
    const served = await serve(appWith(store, resource, verify));
    cleanups.push(async () => {
      verify.close();
      await served.close();
    });
    const holder = await acquireLock(await connect(), lockName);
    return { lockName, resource, store, verifierZk, holder, send: (token) => post(served.port, '/doc', { [H]: String(token) }) };
  }

  /** A second client queued behind `w.holder`, and its token once its node is in the queue. */
  async function queueBehind(w: World): Promise<{ waiting: Promise<Lock>; token: FencingToken }> {
    const zk = await connect();
    const waiting = acquireLock(zk, w.lockName);
    waiting.catch(() => undefined); // still waiting when the test ends and its client closes
    for (;;) {
      const token = (await lockStatus(zk, w.lockName)).waiters[0]?.token;
      if (token !== undefined) return { waiting, token };
    }
  }

  beforeAll(async () => {
    proxy = await CountingZooKeeperProxy.to(zkAddress);
  });

  afterEach(async () => {
    const done = cleanups;
    cleanups = [];
    for (const cleanup of done.reverse()) await cleanup();
  });

  afterAll(async () => {
    const cleaner = clients.find((zk) => zk.state === 'connected');
    if (cleaner !== undefined) {
      await rmrf(cleaner, scratch);
      for (const lockName of locks) await rmrf(cleaner, `/fencekeeper/locks/${lockName}`);
    }
    await Promise.allSettled(clients.map((zk) => zk.close()));
    await proxy?.close();
  });

  it("admits the holder's token and the fence advances to it", async () => {
    const w = await world();
    const answer = await w.send(w.holder.token);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ token: w.holder.token.toString() });
    expect(await w.store.current(w.resource)).toBe(w.holder.token);
  });

  it("refuses forged tokens with 403 problem+json and the fence does not move: the largest token, holder + 1, a waiter's, another node's czxid", async () => {
    const w = await world();
    expect((await w.send(w.holder.token)).status).toBe(200);
    // A second client queues behind the holder: its token is a real lock node's czxid, larger than the holder's, and not the holder's.
    const waiter = await queueBehind(w);
    const someone = await connect();
    await mkdirp(someone, scratch);
    const other = await someone.create(`${scratch}/${uniqueId('other')}`);
    expect(other.stat.czxid).toBeGreaterThan(w.holder.token);

    const forged: FencingToken[] = [9223372036854775807n, w.holder.token + 1n, waiter.token, other.stat.czxid];
    for (const token of forged) {
      const answer = await w.send(token);
      expectRefused(answer, 403, 'TOKEN_REFUSED');
      expect(await w.store.current(w.resource)).toBe(w.holder.token);
    }
    // The holder still gets in after all that.
    expect((await w.send(w.holder.token)).status).toBe(200);
    expect(await w.store.current(w.resource)).toBe(w.holder.token);
  });

  it('costs no ZooKeeper request per HTTP request while the holder does not change', async () => {
    const w = await world();
    await queueBehind(w);
    // The notification of the waiter joining the queue goes to the verifier's session on its own
    // schedule (no order across sessions). A sync on the verifier's session is answered
    // after every notification already triggered for it, so past this line the cache
    // has been dropped if it was going to be; the next request reloads it if so.
    await w.verifierZk.sync(`/fencekeeper/locks/${w.lockName}`);
    expect((await w.send(w.holder.token)).status).toBe(200);
    const before = proxy.requests;
    for (let i = 0; i < 25; i++) {
      expect((await w.send(i % 2 === 0 ? w.holder.token : w.holder.token + 1n)).status).toBe(i % 2 === 0 ? 200 : 403);
    }
    expect(proxy.requests).toBe(before);
    // The counter does see this client's requests: the verifier's first lookups went through it.
    expect(before).toBeGreaterThan(0);
  });

  it("after release and a new holder: the old holder's token is refused (403), the new one is admitted", async () => {
    const w = await world();
    expect((await w.send(w.holder.token)).status).toBe(200);
    const waiter = await queueBehind(w);
    // The waiter's join fired the children watch the first request set, and
    // that notification may not have reached the verifier yet. A sync on the
    // verifier's session is answered after it; the request then reloads the
    // cache and sets the watch the release must fire (else the release could
    // find no watch set, and no event would ever come).
    await w.verifierZk.sync(`/fencekeeper/locks/${w.lockName}`);
    expect((await w.send(w.holder.token)).status).toBe(200);
    const invalidated = nextWatchEvent(w.verifierZk);
    await w.holder.release();
    const next = await waiter.waiting;
    // The verifier's children watch has fired: its cache no longer names the old holder.
    expect(await invalidated).toMatchObject({ path: `/fencekeeper/locks/${w.lockName}` });

    expectRefused(await w.send(w.holder.token), 403, 'TOKEN_REFUSED');
    expect(await w.store.current(w.resource)).toBe(w.holder.token);
    const answer = await w.send(next.token);
    expect(answer.status).toBe(200);
    expect(await w.store.current(w.resource)).toBe(next.token);
    expectRefused(await w.send(w.holder.token), 403, 'TOKEN_REFUSED');
    expect(await w.store.current(w.resource)).toBe(next.token);
  });

  it("a verifier whose ZooKeeper session expired answers 503 and the fence does not move", async () => {
    const w = await world();
    // Its own client, through a proxy the test can black-hole: no server reachable for the
    // whole session timeout, so the client expires the session by its own clock.
    const hole = await TcpProxy.to(zkAddress);
    cleanups.push(() => hole.close());
    const zk = await connect(hole.address, 4000);
    const lonely = verifyWithZooKeeper(zk, w.lockName);
    const app = await serve(appWith(w.store, w.resource, lonely));
    cleanups.push(async () => {
      lonely.close();
      await app.close();
    });
    expect((await post(app.port, '/doc', { [H]: String(w.holder.token) })).status).toBe(200);
    const expired = new Promise<void>((resolve) => zk.on('state', (state: string) => state === 'expired' && resolve()));
    hole.blackhole();
    await expired;
    expectRefused(await post(app.port, '/doc', { [H]: String(w.holder.token) }), 503, 'VERIFY_UNAVAILABLE');
    expectRefused(await post(app.port, '/doc', { [H]: String(MAX_TOKEN) }), 503, 'VERIFY_UNAVAILABLE');
    expect(await w.store.current(w.resource)).toBe(w.holder.token);
  });

  it('a verifier whose ZooKeeper client was closed answers 503 and the fence does not move', async () => {
    const w = await world();
    expect((await w.send(w.holder.token)).status).toBe(200);
    await w.verifierZk.close();
    expectRefused(await w.send(w.holder.token), 503, 'VERIFY_UNAVAILABLE');
    expectRefused(await w.send(MAX_TOKEN), 503, 'VERIFY_UNAVAILABLE');
    expect(await w.store.current(w.resource)).toBe(w.holder.token);
  });
});
