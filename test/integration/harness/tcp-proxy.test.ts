import net from 'node:net';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../../helpers/tcp-proxy.js';

let echo: net.Server;
let echoPort: number;
let proxy: TcpProxy;
const clients = new Set<net.Socket>();

beforeAll(async () => {
  echo = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.pipe(socket);
  });
  echo.listen(0, '127.0.0.1');
  await once(echo, 'listening');
  echoPort = (echo.address() as net.AddressInfo).port;
});

afterAll(async () => {
  echo.close();
});

afterEach(async () => {
  for (const c of clients) c.destroy();
  clients.clear();
  await proxy?.close();
});

async function connect(): Promise<net.Socket> {
  const socket = net.connect(proxy.port, '127.0.0.1');
  clients.add(socket);
  socket.setEncoding('utf8');
  await once(socket, 'connect');
  return socket;
}

/** Resolve with what arrives until `text` has arrived, or reject after ms. */
function receive(socket: net.Socket, text: string, ms = 2000): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    const timer = setTimeout(() => {
      socket.off('data', onData);
      reject(new Error(`timed out with ${JSON.stringify(got)}`));
    }, ms);
    const onData = (chunk: string): void => {
      got += chunk;
      if (got.length >= text.length) {
        clearTimeout(timer);
        socket.off('data', onData);
        resolve(got);
      }
    };
    socket.on('data', onData);
  });
}

/** Write `text` and resolve with what comes back (the echo server's answer) once it has all arrived. */
function roundTrip(socket: net.Socket, text: string): Promise<string> {
  socket.write(text);
  return receive(socket, text);
}

/** A fresh proxy to the echo server, and a connection through it that has carried `text` there and back. */
async function warmConnection(text: string): Promise<net.Socket> {
  proxy = await TcpProxy.start({ port: echoPort });
  const socket = await connect();
  await roundTrip(socket, text);
  return socket;
}

/** True when nothing arrives on socket within ms. */
async function silentFor(socket: net.Socket, ms: number): Promise<boolean> {
  let got = false;
  const onData = (): void => { got = true; };
  socket.on('data', onData);
  await new Promise((r) => setTimeout(r, ms));
  socket.off('data', onData);
  return !got;
}

describe('TcpProxy', () => {
  it('listens on 127.0.0.1 on a port of its own and forwards both ways', async () => {
    proxy = await TcpProxy.start({ port: echoPort });
    expect(proxy.port).toBeGreaterThan(0);
    expect(proxy.port).not.toBe(echoPort);
    expect(proxy.address).toBe(`127.0.0.1:${proxy.port}`);
    const c = await connect();
    expect(await roundTrip(c, 'hello')).toBe('hello');
    const big = 'x'.repeat(1 << 20);
    c.write(big);
    expect((await receive(c, big, 5000)).length).toBe(big.length);
  });

  it('cut() resets current connections with ECONNRESET and lets new ones through', async () => {
    proxy = await TcpProxy.start({ port: echoPort });
    const a = await connect();
    const b = await connect();
    a.write('a');
    b.write('b');
    await receive(a, 'a');
    await receive(b, 'b');
    expect(proxy.connectionCount).toBe(2);

    const errors = [once(a, 'error'), once(b, 'error')];
    proxy.cut();
    for (const [err] of await Promise.all(errors)) expect((err as NodeJS.ErrnoException).code).toBe('ECONNRESET');
    expect(proxy.connectionCount).toBe(0);

    const c = await connect();
    expect(await roundTrip(c, 'again')).toBe('again');
  });

  it('blackhole() holds traffic without closing anything; resume() delivers it', async () => {
    const a = await warmConnection('before');

    proxy.blackhole();
    let closed = false;
    a.on('close', () => { closed = true; });
    a.write('during');
    // a new connection during the partition: TCP-connected, then silence
    const b = await connect();
    b.write('late');
    expect(await silentFor(a, 300)).toBe(true);
    expect(await silentFor(b, 50)).toBe(true);
    expect(closed).toBe(false);
    expect(a.destroyed).toBe(false);

    const gotA = receive(a, 'during');
    const gotB = receive(b, 'late');
    proxy.resume();
    expect(await gotA).toBe('during');
    expect(await gotB).toBe('late');

    expect(await roundTrip(a, 'after')).toBe('after');
  });

  it('holdReplies() keeps what the server sent until deliverHeld(); lastForwardedAt is when the request went through', async () => {
    const a = await warmConnection('warm');

    proxy.holdReplies();
    const before = performance.now();
    a.write('question');
    // The echo server has answered once the proxy holds its bytes.
    await proxy.whenHeld('question'.length);
    expect(proxy.heldBytes).toBe('question'.length);
    expect(proxy.lastForwardedAt).toBeGreaterThanOrEqual(before);
    expect(proxy.lastForwardedAt).toBeLessThanOrEqual(performance.now());
    expect(await silentFor(a, 200)).toBe(true);

    const got = receive(a, 'question');
    proxy.deliverHeld();
    expect(await got).toBe('question');
    expect(proxy.heldBytes).toBe(0);
    // Holding ended with the delivery: traffic flows as before.
    expect(await roundTrip(a, 'after')).toBe('after');
  });

  it('deliverHeld() during a black hole delivers the held reply and nothing after it', async () => {
    proxy = await TcpProxy.start({ port: echoPort });
    const a = await connect();
    proxy.holdReplies();
    a.write('held');
    await proxy.whenHeld('held'.length);
    proxy.blackhole();
    const forwarded = proxy.lastForwardedAt;
    a.write('later'); // stays in the partition: never reaches the server

    const got = receive(a, 'held');
    proxy.deliverHeld();
    expect(await got).toBe('held');
    expect(await silentFor(a, 300)).toBe(true);
    expect(proxy.lastForwardedAt).toBe(forwarded);

    const rest = receive(a, 'later');
    proxy.resume();
    expect(await rest).toBe('later');
  });

  it('loseReplyTo(): the request with the marker reaches the server, its reply resets the connection; once only', async () => {
    let reached = '';
    const server = net.createServer((socket) => {
      socket.on('error', () => {});
      socket.on('data', (chunk) => {
        reached += chunk.toString('utf8');
        socket.write(chunk);
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      proxy = await TcpProxy.start({ port: (server.address() as net.AddressInfo).port });
      const a = await connect();
      expect(await roundTrip(a, 'plain')).toBe('plain');
      proxy.loseReplyTo('MARK');
      let got = '';
      a.on('data', (chunk: string) => (got += chunk));
      const error = once(a, 'error');
      a.write('with MARK');
      const [err] = await error;
      expect((err as NodeJS.ErrnoException).code).toBe('ECONNRESET');
      expect(reached).toBe('plainwith MARK');
      expect(got).toBe('');
      expect(proxy.repliesLost).toBe(1);

      const b = await connect();
      expect(await roundTrip(b, 'MARK again')).toBe('MARK again');
      expect(proxy.repliesLost).toBe(1);
    } finally {
      server.close();
    }
  });

  it('a refused upstream connection reaches the client as a reset', async () => {
    const dead = net.createServer();
    dead.listen(0, '127.0.0.1');
    await once(dead, 'listening');
    const deadPort = (dead.address() as net.AddressInfo).port;
    await new Promise<void>((r) => dead.close(() => r()));

    proxy = await TcpProxy.start({ port: deadPort });
    const c = await connect();
    const [err] = await once(c, 'error');
    expect((err as NodeJS.ErrnoException).code).toBe('ECONNRESET');
  });

  it('close() resets connections and stops listening', async () => {
    proxy = await TcpProxy.start({ port: echoPort });
    const port = proxy.port;
    const c = await connect();
    const error = once(c, 'error');
    await proxy.close();
    await error;
    const refused = net.connect(port, '127.0.0.1');
    const [err] = await once(refused, 'error');
    expect((err as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
  });
});
