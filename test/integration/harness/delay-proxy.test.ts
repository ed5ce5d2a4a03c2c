// The latency benches' delay proxy (test/servers/delay-proxy.c): bytes pass
// intact both ways on many connections at once, a half-close passes, and every
// round trip through it takes at least twice the configured one-way delay.
import { randomBytes, createHash } from 'node:crypto';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectTo, echoServer, pingPong, startProxy, type DelayProxy } from '../../bench/latency/proxy.js';

const sha = (buffer: Buffer): string => createHash('sha256').update(buffer).digest('hex');

describe('delay proxy', () => {
  // Each connection: the server sends its own bytes at once and hashes what the client sends until the client's FIN.
  const received = new Map<string, string>();
  const serverBytes = randomBytes(300_000);
  const server = createServer((socket: Socket) => {
    const chunks: Buffer[] = [];
    let id = '';
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => {
      const all = Buffer.concat(chunks);
      id = all.subarray(0, 8).toString('hex');
      received.set(id, sha(all));
      socket.end();
    });
    socket.on('error', () => {});
    socket.write(serverBytes);
  });
  let proxy: DelayProxy;
  let echo: Awaited<ReturnType<typeof echoServer>>;
  const ONE_WAY_US = 2000;

  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    echo = await echoServer();
    proxy = await startProxy(`test-${process.pid}`, ONE_WAY_US, [(server.address() as AddressInfo).port, echo.port]);
  });

  afterAll(async () => {
    await proxy?.stop();
    await echo?.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('passes the bytes of many connections intact and in order, both ways, and a half-close', async () => {
    const port = proxy.port((server.address() as AddressInfo).port);
    const one = async (): Promise<void> => {
      const socket = await connectTo(port);
      const mine = randomBytes(200_000);
      const got: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => got.push(chunk));
      const closed = new Promise<void>((resolve, reject) => {
        socket.on('end', resolve);
        socket.on('error', reject);
      });
      // In pieces, so that the proxy sees many segments that must stay in order.
      for (let off = 0; off < mine.length; off += 7_001) socket.write(mine.subarray(off, off + 7_001));
      socket.end();
      await closed;
      expect(sha(Buffer.concat(got))).toBe(sha(serverBytes));
      expect(received.get(mine.subarray(0, 8).toString('hex'))).toBe(sha(mine));
    };
    await Promise.all(Array.from({ length: 12 }, one));
    const stats = await proxy.stats();
    expect(stats.connections).toBe(12);
    expect(stats.bytesC2s).toBe(12 * 200_000);
    expect(stats.bytesS2c).toBe(12 * serverBytes.length);
  });

  it('adds at least the configured delay each way to every round trip, and counts one flight each way per round trip', async () => {
    const socket = await connectTo(proxy.port(echo.port));
    const before = await proxy.stats();
    const times = await pingPong(socket, 30);
    const after = await proxy.stats();
    socket.destroy();
    // Delays only add: the fastest round trip is the bound (a loaded machine only makes them slower).
    expect(Math.min(...times)).toBeGreaterThanOrEqual((2 * ONE_WAY_US) / 1000);
    expect(after.flightsC2s - before.flightsC2s).toBe(30);
    expect(after.flightsS2c - before.flightsS2c).toBe(30);
  });
});
