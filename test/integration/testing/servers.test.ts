// fencekeeper/testing's throwaway servers: a ZooKeeper and a Redis of their
// own (real processes from the machine's packages), serving on a free port,
// gone with their files after stop(); a clear error naming what to install
// when a program is missing; a taken port is an error with the server's log.
import { existsSync } from 'node:fs';
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient, acquireLock } from '../../../src/sources/zookeeper/index.js';
import { ServerNotInstalledError, ServerStartError, startRedis, startZooKeeper, type RedisServer, type ZooKeeperServer } from '../../../src/testing/index.js';
import { uniqueLockName } from '../../helpers/unique.js';

/** One command to 127.0.0.1:port and its whole answer ('' if the port is closed). */
function ask(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(text));
    socket.on('data', (chunk: string) => {
      answer += chunk;
      if (text.endsWith('\r\n') && answer.endsWith('\r\n')) socket.end();
    });
    socket.on('error', () => resolve(''));
    socket.on('close', () => resolve(answer));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const started: (ZooKeeperServer | RedisServer)[] = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
});

describe('startZooKeeper()', () => {
  it('serves on a port of its own with short sessions, and stop() ends the JVM and removes its files', async () => {
    const server = await startZooKeeper({ heapMb: 64 });
    started.push(server);
    expect(server.connectString).toBe(`127.0.0.1:${server.port}`);
    expect(await ask(server.port, 'srvr')).toMatch(/^Mode: standalone$/m);
    const zk = await ZooKeeperClient.connect({ connectString: server.connectString, sessionTimeoutMs: 1000 });
    try {
      // The bounds are two ticks (200 ms) .. 60 s: a short session is granted as asked.
      expect(zk.sessionTimeoutMs).toBe(1000);
      const lock = await acquireLock(zk, uniqueLockName('kit'));
      expect(lock.token).toBeGreaterThan(0n);
      await lock.release();
    } finally {
      await zk.close();
    }
    expect(existsSync(server.directory)).toBe(true);
    await server.stop();
    expect(alive(server.pid)).toBe(false);
    expect(existsSync(server.directory)).toBe(false);
    expect(await ask(server.port, 'srvr')).toBe('');
    await server.stop(); // idempotent
  });

  it('names what to install when java or the ZooKeeper jar is missing', async () => {
    const noJava = startZooKeeper({ java: 'java-that-is-not-installed' });
    await expect(noJava).rejects.toBeInstanceOf(ServerNotInstalledError);
    await expect(noJava).rejects.toMatchObject({
      code: 'SERVER_NOT_INSTALLED',
      missing: 'java-that-is-not-installed',
      message: expect.stringMatching(/not found on PATH; install a Java runtime \(Debian\/Ubuntu: apt-get install default-jre-headless/),
    });
    await expect(startZooKeeper({ classpath: ['/nonexistent/zookeeper.jar'] })).rejects.toMatchObject({
      code: 'SERVER_NOT_INSTALLED',
      missing: '/nonexistent/zookeeper.jar',
    });
  });

  it('a port already taken fails with the server\'s own log, and leaves nothing running', async () => {
    const squatter = net.createServer();
    await new Promise<void>((resolve) => squatter.listen(0, '127.0.0.1', resolve));
    const port = (squatter.address() as net.AddressInfo).port;
    try {
      const error = (await startZooKeeper({ port, heapMb: 64 }).catch((e: unknown) => e)) as ServerStartError;
      expect(error).toBeInstanceOf(ServerStartError);
      expect(error.code).toBe('SERVER_START_FAILED');
      expect(error.log).toMatch(/Address already in use/i);
      expect(error.message).toMatch(/ exited \(\d+\) before it served/);
      const log = /its log, (\S+), ends with/.exec(error.message)?.[1];
      expect(log).toMatch(/fencekeeper-zookeeper-/);
      expect(existsSync(log!), 'its temporary directory is removed').toBe(false);
    } finally {
      squatter.close();
    }
  });

  it('refuses options it cannot use before starting anything', async () => {
    await expect(startZooKeeper({ tickTimeMs: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(startZooKeeper({ port: 70000 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(startZooKeeper({ minSessionTimeoutMs: 5000, maxSessionTimeoutMs: 1000 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('startRedis()', () => {
  it('serves on a port of its own, and stop() ends it and removes its files', async () => {
    const redis = await startRedis({ appendOnly: true });
    started.push(redis);
    expect(redis.url).toBe(`redis://127.0.0.1:${redis.port}`);
    expect(await ask(redis.port, 'SET k fenced\r\n')).toBe('+OK\r\n');
    expect(await ask(redis.port, 'GET k\r\n')).toBe('$6\r\nfenced\r\n');
    expect(await ask(redis.port, 'CONFIG GET appendfsync\r\n')).toContain('always');
    await redis.stop();
    expect(alive(redis.pid)).toBe(false);
    expect(existsSync(redis.directory)).toBe(false);
    expect(await ask(redis.port, 'PING\r\n')).toBe('');
  });

  it('names what to install when redis-server is missing', async () => {
    await expect(startRedis({ redisServer: '/nonexistent/redis-server' })).rejects.toMatchObject({
      code: 'SERVER_NOT_INSTALLED',
      install: 'Redis (Debian/Ubuntu: apt-get install redis-server)',
    });
  });
});
