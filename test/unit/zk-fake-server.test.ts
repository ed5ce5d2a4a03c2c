// A fake ZooKeeper (node:net on port 0) that misbehaves on purpose: the
// client must fail clearly (ConnectionLossError), never crash or hang.
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ClientClosedError, ConnectionLossError } from '../../src/errors.js';
import { ZooKeeperClient } from '../../src/zookeeper/client.js';
import { FrameParser } from '../../src/zookeeper/frame-parser.js';
import { JuteReader } from '../../src/zookeeper/jute-reader.js';
import { JuteWriter } from '../../src/zookeeper/jute-writer.js';

interface FakeRequest { readonly xid: number; readonly opcode: number; readonly connection: number }
type Behaviour = {
  /** Called with the raw ConnectRequest; return false to stay silent, or do something nasty with the socket. */
  onConnect?: (socket: net.Socket, connection: number) => boolean;
  onRequest?: (socket: net.Socket, request: FakeRequest) => void;
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

function emptyStat(w: JuteWriter): void {
  for (let i = 0; i < 4; i++) w.long(1n);
  w.int(0).int(0).int(0).long(0n).int(0).int(0).long(1n);
}

/** A well-behaved answer to exists (a Stat), ping or closeSession. */
function answer(socket: net.Socket, { xid, opcode }: FakeRequest): void {
  socket.write(frameOf((w) => {
    w.int(xid).long(1n).int(0);
    if (opcode === 3) emptyStat(w);
  }));
}

class FakeServer {
  readonly sockets = new Set<net.Socket>();
  connections = 0;
  private constructor(readonly server: net.Server) {}

  static async start(behaviour: Behaviour): Promise<FakeServer> {
    const server = net.createServer();
    const fake = new FakeServer(server);
    server.on('connection', (socket) => {
      const connection = ++fake.connections;
      fake.sockets.add(socket);
      socket.on('close', () => fake.sockets.delete(socket));
      socket.on('error', () => undefined);
      const parser = new FrameParser(1 << 20);
      let handshaken = false;
      socket.on('data', (chunk) => {
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

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function fake(behaviour: Behaviour): Promise<FakeServer> {
  const server = await FakeServer.start(behaviour);
  cleanups.push(() => server.close());
  return server;
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
    const error = await ZooKeeperClient.connect({ connectString: server.address, connectTimeoutMs: 800 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect(String((error as Error).message)).toMatch(/frame length/);
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

  it('a huge frame length after the handshake: pending requests fail with ConnectionLossError', async () => {
    const server = await fake({
      onRequest: (socket, request) => {
        if (request.connection === 1) socket.write(Buffer.from([0x7f, 0xff, 0xff, 0xf0]));
        else answer(socket, request);
      },
    });
    const zk = await client(server);
    const error = await zk.exists('/a').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
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
            emptyStat(w);
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
