// A fake ZooKeeper that misbehaves on purpose: the client must fail clearly
// (ConnectionLossError), never crash or hang. Reached over TCP (node:net on
// port 0) or over a socket the test hands the client through its connector,
// where the test decides exactly how the bytes are cut into reads.
import net from 'node:net';
import { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ClientClosedError, ConnectionLossError, ProtocolError, SessionExpiredError } from '../../src/errors.js';
import { ZooKeeperClient, type ClientState, type Connector } from '../../src/sources/zookeeper/client.js';
import { FrameParser } from '../../src/sources/zookeeper/frame-parser.js';
import { JuteReader } from '../../src/sources/zookeeper/jute-reader.js';
import { JuteWriter } from '../../src/sources/zookeeper/jute-writer.js';
import type { WatchEvent } from '../../src/sources/zookeeper/watches.js';

interface FakeRequest { readonly xid: number; readonly opcode: number; readonly connection: number }
type Behaviour = {
  /** Called with the raw ConnectRequest; return false to stay silent, or do something nasty with the socket. */
  onConnect?: (socket: Duplex, connection: number) => boolean;
  onRequest?: (socket: Duplex, request: FakeRequest) => void;
};

const SESSION_ID = 0x1234_5678_9abcn;

function frameOf(write: (w: JuteWriter) => void): Buffer {
  const w = new JuteWriter();
  w.beginFrame();
  write(w);
  w.endFrame();
  return Buffer.from(w.take());
}

function connectResponse(timeoutMs = 3000, sessionId = SESSION_ID): Buffer {
  return frameOf((w) => void w.int(0).int(timeoutMs).long(sessionId).buffer(new Uint8Array(16).fill(7)).bool(false));
}

/** A Stat whose czxid (and every other zxid) is `zxid`. */
function writeStat(w: JuteWriter, zxid = 1n): void {
  w.long(zxid).long(zxid).long(0n).long(0n);
  w.int(0).int(0).int(0).long(0n).int(0).int(0).long(zxid);
}

/** A well-behaved answer to exists (a Stat), ping or closeSession. */
function answer(socket: Duplex, { xid, opcode }: FakeRequest): void {
  socket.write(frameOf((w) => {
    w.int(xid).long(1n).int(0);
    if (opcode === 3) writeStat(w);
  }));
}

/** Speak the server's side of one connection: the handshake, then requests through `behaviour`. */
function serve(socket: Duplex, connection: number, behaviour: Behaviour): void {
  socket.on('error', () => undefined);
  const parser = new FrameParser(1 << 20);
  let handshaken = false;
  socket.on('data', (chunk: Buffer) => {
    parser.parse(chunk, (frame) => {
      if (!handshaken) {
        handshaken = true;
        if (behaviour.onConnect?.(socket, connection) ?? true) socket.write(connectResponse());
        return;
      }
      const r = new JuteReader(frame);
      const request = { xid: r.int(), opcode: r.int(), connection };
      if (request.opcode === 11 || request.opcode === -11) answer(socket, request);
      else (behaviour.onRequest ?? answer)(socket, request);
    });
  });
}

class FakeServer {
  readonly sockets = new Set<net.Socket>();
  connections = 0;
  private constructor(readonly server: net.Server) {}

  static async start(behaviour: Behaviour): Promise<FakeServer> {
    const server = net.createServer();
    const fake = new FakeServer(server);
    server.on('connection', (socket) => {
      fake.sockets.add(socket);
      socket.on('close', () => fake.sockets.delete(socket));
      serve(socket, ++fake.connections, behaviour);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return fake;
  }

  get address(): string {
    const a = this.server.address() as net.AddressInfo;
    return `127.0.0.1:${a.port}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * Two connected in-memory streams, like the two ends of a TCP connection:
 * what one writes the other reads, in the very chunks it was written;
 * ending one ends the other's reads; destroying one destroys the other (a reset).
 */
function socketPair(client: { highWaterMark?: number; written?: (done: () => void) => void } = {}): { client: Duplex; server: Duplex } {
  const ends: Duplex[] = [];
  const end = (peer: () => Duplex, options: typeof client = {}): Duplex =>
    new Duplex({
      ...(options.highWaterMark !== undefined && { writableHighWaterMark: options.highWaterMark }),
      read() {},
      write(chunk: Buffer, _encoding, callback) {
        peer().push(chunk);
        // `written` decides when the write counts as done (for backpressure tests).
        if (options.written) options.written(() => callback());
        else callback();
      },
      final(callback) {
        peer().push(null);
        callback();
      },
      destroy(error, callback) {
        if (!peer().destroyed) peer().destroy();
        callback(error);
      },
    });
  ends.push(end(() => ends[1] as Duplex, client), end(() => ends[0] as Duplex));
  return { client: ends[0] as Duplex, server: ends[1] as Duplex };
}

/** A fake server reached only through the client's connector: each call is a new connection. */
class WireServer {
  /** The server's end of each connection, in connector-call order. */
  readonly sockets: Duplex[] = [];
  constructor(readonly behaviour: Behaviour) {}

  readonly connector: Connector = () => {
    const { client, server } = socketPair();
    this.sockets.push(server);
    serve(server, this.sockets.length, this.behaviour);
    return client;
  };
}

/** Reject if `promise` has not settled within `ms` (a hang guard: the assertions are on the values). */
async function settleWithin<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, hang]);
  } finally {
    clearTimeout(timer);
  }
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function fake(behaviour: Behaviour): Promise<FakeServer> {
  const server = await FakeServer.start(behaviour);
  cleanups.push(() => server.close());
  return server;
}

/**
 * Run `action` while recording the size of every Buffer allocated through
 * Buffer.alloc/allocUnsafe/allocUnsafeSlow (how the frame parser and the
 * jute reader and writer get memory); returns the action's result and the
 * largest size seen.
 */
async function largestAllocation<T>(action: () => Promise<T>): Promise<{ result: T; largest: number }> {
  const originals = { alloc: Buffer.alloc, allocUnsafe: Buffer.allocUnsafe, allocUnsafeSlow: Buffer.allocUnsafeSlow };
  let largest = 0;
  const record = (size: number): void => void (largest = Math.max(largest, size));
  Buffer.alloc = ((size: number, ...rest: unknown[]) => (record(size), (originals.alloc as (...a: unknown[]) => Buffer)(size, ...rest))) as typeof Buffer.alloc;
  Buffer.allocUnsafe = ((size: number) => (record(size), originals.allocUnsafe(size))) as typeof Buffer.allocUnsafe;
  Buffer.allocUnsafeSlow = ((size: number) => (record(size), originals.allocUnsafeSlow(size))) as typeof Buffer.allocUnsafeSlow;
  try {
    return { result: await action(), largest };
  } finally {
    Object.assign(Buffer, originals);
  }
}

async function client(server: FakeServer, connectTimeoutMs = 3000): Promise<ZooKeeperClient> {
  const zk = await ZooKeeperClient.connect({ connectString: server.address, sessionTimeoutMs: 3000, connectTimeoutMs });
  cleanups.push(() => zk.close());
  return zk;
}

describe('the client against a misbehaving server', () => {
  it('a well-behaved fake works (the harness itself)', async () => {
    const server = await fake({});
    const zk = await client(server);
    expect(zk.sessionId).toBe(SESSION_ID);
    expect((await zk.exists('/x'))?.czxid).toBe(1n);
  });

  it('garbage instead of a ConnectResponse: connect() rejects with ConnectionLossError', async () => {
    const server = await fake({
      onConnect: (socket) => {
        socket.write(Buffer.from([0, 0, 0, 3, 1, 2, 3])); // a frame too short to be a ConnectResponse
        return false;
      },
    });
    const error = await ZooKeeperClient.connect({ connectString: server.address, sessionTimeoutMs: 3000, connectTimeoutMs: 800 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect((error as Error).message).toMatch(/accepted a session within 800 ms/);
    expect(server.connections).toBeGreaterThanOrEqual(1);
  });

  it('a huge frame length in the handshake: connect() rejects with ConnectionLossError, nothing huge allocated', async () => {
    const server = await fake({
      onConnect: (socket) => {
        socket.write(Buffer.from([0x7f, 0xff, 0xff, 0xff, 0, 0]));
        return false;
      },
    });
    const { result: error, largest } = await largestAllocation(() =>
      ZooKeeperClient.connect({ connectString: server.address, connectTimeoutMs: 800 }).catch((e: unknown) => e),
    );
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect(String((error as Error).message)).toMatch(/frame length/);
    // The frame claimed 2 GiB; the client must refuse it from its length
    // alone, not reserve room for it. Something was allocated (the writer's
    // buffer, the parser's tail), so the spy did see the client at work.
    expect(largest).toBeGreaterThan(0);
    expect(largest).toBeLessThan(1024 * 1024);
  });

  it('a server that accepts and never answers: connect() rejects with ConnectionLossError', async () => {
    const server = await fake({ onConnect: () => false });
    const error = await ZooKeeperClient.connect({ connectString: server.address, connectTimeoutMs: 600 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
  });

  it('nothing listening: connect() rejects with ConnectionLossError', async () => {
    const server = await fake({});
    const address = server.address;
    await server.close();
    cleanups.pop();
    const error = await ZooKeeperClient.connect({ connectString: address, connectTimeoutMs: 600 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
  });

  it('a reply with the wrong xid: every pending request fails with ConnectionLossError, then the client reconnects', async () => {
    const server = await fake({
      onRequest: (socket, request) => {
        if (request.connection === 1) answer(socket, { ...request, xid: request.xid + 1000 });
        else answer(socket, request);
      },
    });
    const zk = await client(server);
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    const results = await Promise.allSettled([zk.exists('/a'), zk.exists('/b'), zk.exists('/c')]);
    for (const r of results) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(ConnectionLossError);
    }
    // The same session carries on over a new connection.
    expect(await zk.exists('/d')).not.toBeNull();
    expect(zk.sessionId).toBe(SESSION_ID);
    expect(states).toEqual(['suspended', 'connected']);
  });

  it('a huge frame length after the handshake: pending requests fail with ConnectionLossError, nothing huge allocated', async () => {
    const server = await fake({
      onRequest: (socket, request) => {
        if (request.connection === 1) socket.write(Buffer.from([0x7f, 0xff, 0xff, 0xf0]));
        else answer(socket, request);
      },
    });
    const zk = await client(server);
    const { result: error, largest } = await largestAllocation(() => zk.exists('/a').catch((e: unknown) => e));
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect((error as Error).message).toMatch(/frame length/);
    expect(largest).toBeLessThan(1024 * 1024);
    expect(await zk.exists('/b')).not.toBeNull();
  });

  it('a reply too short for its record: ConnectionLossError, not a crash', async () => {
    const server = await fake({
      onRequest: (socket, request) => {
        if (request.connection === 1) socket.write(frameOf((w) => void w.int(request.xid).long(1n).int(0).int(5)));
        else answer(socket, request);
      },
    });
    const zk = await client(server);
    const error = await zk.exists('/a').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect(await zk.exists('/b')).not.toBeNull();
  });

  it('garbage after the handshake: pending requests fail with ConnectionLossError', async () => {
    const server = await fake({
      onRequest: (socket, request) => {
        if (request.connection === 1) socket.write(Buffer.from('HTTP/1.1 400 Bad Request\r\n\r\n'));
        else answer(socket, request);
      },
    });
    const zk = await client(server);
    const error = await zk.exists('/a').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
  });

  it('the server closes in the middle of a reply frame: pending requests fail with ConnectionLossError', async () => {
    const server = await fake({
      onRequest: (socket, request) => {
        if (request.connection === 1) {
          const full = frameOf((w) => {
            w.int(request.xid).long(1n).int(0);
            writeStat(w);
          });
          socket.end(full.subarray(0, 20));
        } else answer(socket, request);
      },
    });
    const zk = await client(server);
    const results = await Promise.allSettled([zk.exists('/a'), zk.exists('/b')]);
    expect(results.map((r) => (r.status === 'rejected' ? (r.reason as Error).constructor.name : 'fulfilled'))).toEqual([
      'ConnectionLossError',
      'ConnectionLossError',
    ]);
    expect(await zk.exists('/c')).not.toBeNull();
  });

  it('frames left in a chunk after the client dropped that connection are not applied to the next connection', async () => {
    // On the second connection the server resumes the wrong session and, in
    // the same chunk, sends another ConnectResponse. The client must drop the
    // connection and ignore the rest of that chunk, not take the second frame
    // as the handshake of the connection it opens next.
    const server = await fake({
      onConnect: (socket, connection) => {
        if (connection !== 2) return true;
        socket.write(Buffer.concat([connectResponse(3000, SESSION_ID + 1n), connectResponse()]));
        return false;
      },
    });
    // The address twice: after dropping the bad connection the client moves
    // on to the "next server" at once, while still inside the old chunk.
    const zk = await ZooKeeperClient.connect({ connectString: `${server.address},${server.address}`, sessionTimeoutMs: 3000 });
    cleanups.push(() => zk.close());
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    server.sockets.forEach((s) => s.destroy());
    await new Promise<void>((resolve) => {
      const check = (): void => {
        if (states.includes('suspended') && zk.state === 'connected') resolve();
        else setTimeout(check, 10);
      };
      check();
    });
    expect(await zk.exists('/a')).not.toBeNull();
    expect(states).toEqual(['suspended', 'connected']);
    expect(server.connections).toBe(3);
    expect(zk.sessionId).toBe(SESSION_ID);
  });

  it('requests after close() fail with ClientClosedError', async () => {
    const server = await fake({});
    const zk = await client(server);
    await zk.close();
    await expect(zk.exists('/a')).rejects.toBeInstanceOf(ClientClosedError);
    expect(zk.state).toBe('closed');
  });
});

describe('the client over a socket injected through its connector', () => {
  /** A client of `wire`; closed after the test. */
  async function wireClient(wire: WireServer, extra: { connectString?: string } = {}): Promise<ZooKeeperClient> {
    const zk = await ZooKeeperClient.connect({ connectString: extra.connectString ?? 'fake:2181', sessionTimeoutMs: 3000, connector: wire.connector });
    cleanups.push(() => zk.close());
    return zk;
  }

  it('replies cut at every offset, a watch notification among them, all arrive intact over one connection', async () => {
    // One round = four requests in one tick; the server answers them with
    // one byte stream (a notification between the first and second reply)
    // and hands it to the client in two reads cut at `cut`, the second one
    // a macrotask later, so every frame boundary and every field boundary
    // falls between two reads once. A TCP proxy cannot place the cut.
    let cut = Number.POSITIVE_INFINITY;
    let round = 0;
    let streamLength = 0;
    const pending: FakeRequest[] = [];
    const czxid = (n: number): bigint => (1n << 60n) + BigInt(n); // past 2^53: a number would lose it
    const wire = new WireServer({
      onRequest: (socket, request) => {
        pending.push(request);
        if (pending.length < 4) return;
        const [exists, getData, missing, children] = pending.splice(0) as [FakeRequest, FakeRequest, FakeRequest, FakeRequest];
        const zxid = czxid(round);
        const bytes = Buffer.concat([
          frameOf((w) => { w.int(exists.xid).long(zxid).int(0); writeStat(w, zxid); }),
          // WatcherEvent: NodeDataChanged (3), SyncConnected (3), path
          frameOf((w) => void w.int(-1).long(-1n).int(0).int(3).int(3).ustring('/n')),
          frameOf((w) => { w.int(getData.xid).long(zxid).int(0).buffer(Buffer.from(`round ${String(round).padStart(4, '0')}`)); writeStat(w, zxid); }),
          frameOf((w) => void w.int(missing.xid).long(zxid).int(-101)), // NONODE
          frameOf((w) => { w.int(children.xid).long(zxid).int(0).vector(['a', 'b'], (x, c) => void x.ustring(c)); writeStat(w, zxid); }),
        ]);
        streamLength = bytes.length;
        const at = Math.min(cut, bytes.length);
        socket.write(bytes.subarray(0, at));
        if (at < bytes.length) setImmediate(() => socket.write(bytes.subarray(at)));
      },
    });
    const zk = await wireClient(wire);

    const oneRound = async (): Promise<void> => {
      const events: WatchEvent[] = [];
      const results = await settleWithin(
        Promise.all([zk.exists('/n', { watch: (e) => events.push(e) }), zk.getData('/d'), zk.exists('/gone'), zk.getChildren('/p')]),
        5000,
        `round ${round} (cut at ${cut})`,
      );
      const [stat, data, missing, children] = results;
      expect(stat?.czxid, `cut at ${cut}`).toBe(czxid(round));
      expect(Buffer.from(data.data).toString(), `cut at ${cut}`).toBe(`round ${String(round).padStart(4, '0')}`);
      expect(data.stat.mzxid).toBe(czxid(round));
      expect(missing).toBeNull();
      expect(children).toEqual(['a', 'b']);
      expect(events, `cut at ${cut}`).toEqual([{ type: 'dataChanged', path: '/n' }]);
      expect(zk.lastZxid).toBe(czxid(round));
      round++;
    };

    await oneRound(); // whole: learns the stream's length
    expect(streamLength).toBeGreaterThan(300);
    for (cut = 1; cut < streamLength; cut++) await oneRound();
    expect(round).toBe(streamLength);
    // Everything over the first connection: no cut made the client give up on it.
    expect(wire.sockets).toHaveLength(1);
    expect(zk.state).toBe('connected');
  });

  it('a reply with a mismatched xid destroys the socket; every request in flight fails, even one whose reply followed in the same read', async () => {
    const pending: FakeRequest[] = [];
    const wire = new WireServer({
      onRequest: (socket, request) => {
        if (request.connection !== 1) return answer(socket, request);
        pending.push(request);
        if (pending.length < 3) return;
        const [first, second, third] = pending as [FakeRequest, FakeRequest, FakeRequest];
        // One read: a good reply, a reply numbered for nobody, then a reply
        // that would match the third request. After the stray xid nothing
        // on this stream can be trusted, the third reply included.
        socket.write(Buffer.concat([
          frameOf((w) => { w.int(first.xid).long(5n).int(0); writeStat(w, 5n); }),
          frameOf((w) => { w.int(second.xid + 1000).long(6n).int(0); writeStat(w, 6n); }),
          frameOf((w) => { w.int(third.xid).long(7n).int(0); writeStat(w, 7n); }),
        ]));
      },
    });
    const zk = await wireClient(wire);
    const states: ClientState[] = [];
    zk.on('state', (s) => states.push(s));
    const results = await settleWithin(Promise.allSettled([zk.exists('/a'), zk.exists('/b'), zk.exists('/c')]), 5000, 'the three requests');
    expect(results[0]).toMatchObject({ status: 'fulfilled', value: { czxid: 5n } });
    for (const r of results.slice(1)) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(ConnectionLossError);
      expect(((r as PromiseRejectedResult).reason as Error).message).toMatch(/does not match/);
    }
    // The client destroyed its end; the server's end saw the close.
    expect(wire.sockets[0]?.destroyed).toBe(true);
    // The same session carries on over a second connection.
    expect(await zk.exists('/d')).not.toBeNull();
    expect(wire.sockets).toHaveLength(2);
    expect(zk.sessionId).toBe(SESSION_ID);
    expect(states).toEqual(['suspended', 'connected']);
  });

  it("respects the socket's backpressure: no write while write() said wait, then one write on 'drain'", async () => {
    // The client's end buffers nothing (highWaterMark 1): while the test
    // holds a write's callback, write() answers false and the client must
    // keep what it has until 'drain'.
    const held: (() => void)[] = [];
    let holding = false;
    const { client: end, server } = socketPair({ highWaterMark: 1, written: (done) => (holding ? held.push(done) : done()) });
    serve(server, 1, {});
    let writes = 0;
    const write = end.write.bind(end) as (...args: unknown[]) => boolean;
    end.write = ((...args: unknown[]) => {
      writes++;
      return write(...args);
    }) as typeof end.write;

    const zk = await ZooKeeperClient.connect({ connectString: 'fake:2181', sessionTimeoutMs: 30_000, connector: () => end });
    cleanups.push(() => zk.close());
    writes = 0;
    holding = true;
    const first = Array.from({ length: 10 }, () => zk.exists('/x'));
    // The server got the first write and answers it: the client is not stuck, only its socket is.
    expect((await Promise.all(first)).every((s) => s?.czxid === 1n)).toBe(true);
    expect(held).toHaveLength(1);
    const later: Promise<unknown>[] = [];
    for (let tick = 0; tick < 3; tick++) {
      for (let i = 0; i < 5; i++) later.push(zk.exists('/y'));
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(writes).toBe(1);
    holding = false;
    for (const release of held.splice(0)) release();
    const answered = await settleWithin(Promise.all(later), 5000, 'the requests issued while blocked');
    expect(answered).toHaveLength(15);
    expect(writes).toBe(2);
  });

  it('a connector that fails with a non-retryable error ends connect() with that error; no other server is tried', async () => {
    // What a TLS connector reports for a certificate that fails verification:
    // trying again cannot help, so the client must not loop until its connect timeout.
    const refusal = new ProtocolError('server certificate failed verification');
    const tried: string[] = [];
    const connector: Connector = async (address) => {
      tried.push(`${address.host}:${address.port}`);
      throw refusal;
    };
    const error = await ZooKeeperClient.connect({ connectString: 'a:2181,b:2181', connector, connectTimeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(error).toBe(refusal);
    expect(tried).toEqual(['a:2181']);
  });

  it('a connector that fails with any other error is a connection loss: the next server is tried', async () => {
    const wire = new WireServer({});
    const tried: string[] = [];
    const connector: Connector = (address, options) => {
      tried.push(address.host);
      if (address.host === 'down') throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
      return wire.connector(address, options);
    };
    const zk = await ZooKeeperClient.connect({ connectString: 'down:2181,up:2181', connector, sessionTimeoutMs: 3000 });
    cleanups.push(() => zk.close());
    expect(tried).toEqual(['down', 'up']);
    expect(zk.sessionId).toBe(SESSION_ID);
  });

  it('a non-retryable connector error while reconnecting does not end a live session: the client keeps trying, and an expiry carries it as its cause', async () => {
    const wire = new WireServer({});
    const refusal = new ProtocolError('server certificate failed verification');
    let refuse = false;
    let refusals = 0;
    const connector: Connector = (address, options) => {
      if (refuse) {
        refusals++;
        throw refusal;
      }
      return wire.connector(address, options);
    };
    const zk = await ZooKeeperClient.connect({ connectString: 'fake:2181', connector, sessionTimeoutMs: 3000 });
    cleanups.push(() => zk.close());
    const states: ClientState[] = [];
    let waiting: Promise<unknown> | undefined;
    zk.on('state', (s) => {
      states.push(s);
      if (s === 'suspended') waiting = zk.exists('/x').catch((e: unknown) => e);
    });
    refuse = true;
    wire.sockets[0]?.destroy(); // the server resets the connection
    await settleWithin(new Promise<void>((resolve) => zk.on('state', (s) => s === 'expired' && resolve())), 15_000, 'the session to expire');
    // Not closed at the first refusal: tried again until the session timeout ran out.
    expect(states).toEqual(['suspended', 'expired']);
    expect(refusals).toBeGreaterThan(1);
    const error = (await waiting) as SessionExpiredError;
    expect(error).toBeInstanceOf(SessionExpiredError);
    expect(error.cause).toBe(refusal);
    expect(error.message).toContain('server certificate failed verification');
    await expect(zk.exists('/x')).rejects.toBeInstanceOf(SessionExpiredError);
  });
});
