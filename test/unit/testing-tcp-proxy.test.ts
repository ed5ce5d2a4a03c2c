// fencekeeper/testing's TcpProxy, the parts the suite's own proxy tests
// (test/integration/harness/tcp-proxy.test.ts, the same class) do not cover: the
// observe hook and argument checks. Against an echo server of its own.
import { once } from 'node:events';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../../src/testing/index.js';

let echo: net.Server;
let port: number;
beforeAll(async () => {
  echo = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.pipe(socket);
  });
  echo.listen(0, '127.0.0.1');
  await once(echo, 'listening');
  port = (echo.address() as net.AddressInfo).port;
});
afterAll(() => {
  echo.close();
});

/** Send `text` and resolve with what comes back once it all has. */
function roundTrip(socket: net.Socket, text: string): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const onData = (chunk: Buffer): void => {
      got += chunk.toString('utf8');
      if (got.length < text.length) return;
      socket.off('data', onData);
      resolve(got);
    };
    socket.on('data', onData);
    socket.write(text);
  });
}

describe('TcpProxy observe', () => {
  it('sees every byte each way, per connection numbered in accept order, and held replies only when delivered', async () => {
    const seen: { from: string; connection: number; text: string }[] = [];
    const proxy = await TcpProxy.start({ port }, { observe: (chunk, from, connection) => seen.push({ from, connection, text: chunk.toString('utf8') }) });
    try {
      const first = net.connect(proxy.port, '127.0.0.1');
      await once(first, 'connect');
      expect(await roundTrip(first, 'hello')).toBe('hello');
      const second = net.connect(proxy.port, '127.0.0.1');
      await once(second, 'connect');
      expect(await roundTrip(second, 'world')).toBe('world');
      const text = (from: string, connection: number): string => seen.filter((s) => s.from === from && s.connection === connection).map((s) => s.text).join('');
      expect([text('client', 1), text('server', 1), text('client', 2), text('server', 2)]).toEqual(['hello', 'hello', 'world', 'world']);

      proxy.holdReplies();
      first.write('later');
      await proxy.whenHeld(5);
      expect(text('client', 1)).toBe('hellolater');
      expect(text('server', 1), 'a held reply is not observed before it is delivered').toBe('hello');
      const delivered = once(first, 'data');
      proxy.deliverHeld();
      expect(String((await delivered)[0])).toBe('later');
      expect(text('server', 1)).toBe('hellolater');
      first.destroy();
      second.destroy();
    } finally {
      await proxy.close();
    }
  });

  it('refuses a target or options it cannot use', async () => {
    await expect(TcpProxy.start({ port: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(TcpProxy.start({ port }, { observe: 'yes' as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(TcpProxy.to('no-port-here')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});
