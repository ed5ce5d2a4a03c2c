// The CLI against a Redis node that takes connections but does not answer
// (SIGSTOP: the kernel still completes the TCP handshake): `status` and
// `status --watch` end with exit 69 and say why, instead of waiting forever,
// whether the silence starts at the connection's ready check (a node paused
// before the CLI came) or at the watch's CONFIG GET (a node that stops
// answering once connected, played by a proxy holding its replies). Its own
// redis-server on port 16530, so no shared node is paused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { acquireLock } from '../../../src/sources/redis/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { startRedis, type RedisServer } from '../../../src/testing/redis-server.js';
import { TcpProxy } from '../../../src/testing/tcp-proxy.js';
import { PrivateRedis } from '../../helpers/private-redis.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { assertBuilt, cli, finishedWithin, type Run, type Running } from './helpers.js';

const PORT = 16530;
/** Liveness bound for one CLI run (its own bounds are 10 s at most); not a timing assertion. */
const LIVENESS_MS = 40_000;

let server: RedisServer | undefined;
beforeAll(async () => {
  assertBuilt();
  server = await startRedis({ port: PORT, args: ['--notify-keyspace-events', 'K$gx'] });
}, 60_000);
afterAll(async () => {
  if (server === undefined) return;
  process.kill(server.pid, 'SIGCONT'); // in case a test failed while it was paused
  await server.stop();
}, 60_000);

/** The run's result, or a failed test (and the child killed) if it is still running after LIVENESS_MS. */
const finished = (run: Running): Promise<Run> => finishedWithin(run, LIVENESS_MS);

describe('the CLI and a Redis node that does not answer', () => {
  it('paused before the CLI connects: status --watch and status exit 69, naming the node', async () => {
    const lock = uniqueLockName('paused');
    process.kill(server!.pid, 'SIGSTOP');
    try {
      const watch = await finished(cli(['status', '--watch', '--lock-service', `redis://127.0.0.1:${PORT}`, lock]));
      expect(watch.code, watch.stderr).toBe(ExitCode.unavailable);
      expect(watch.stderr).toContain(`cannot reach Redis at 127.0.0.1:${PORT}`);
      expect(watch.stderr).toContain('did not answer within 10000 ms'); // one TTL, the default --session-timeout
      const once = await finished(cli(['status', '--session-timeout', '2000', '--lock-service', `redis://127.0.0.1:${PORT}`, lock]));
      expect(once.code, once.stderr).toBe(ExitCode.unavailable);
      expect(once.stderr).toContain('did not answer within 2000 ms');
    } finally {
      process.kill(server!.pid, 'SIGCONT');
    }
  }, 2 * LIVENESS_MS);

  it('silent from the watch\'s CONFIG GET on: status --watch exits 69 with CONNECTION_LOSS', async () => {
    let proxy: TcpProxy | undefined;
    let configSeen = false;
    proxy = await TcpProxy.start({ host: '127.0.0.1', port: PORT }, {
      observe: (chunk, from) => {
        // Answers the connection's ready check, then nothing from the CONFIG GET on.
        if (from === 'client' && chunk.includes('CONFIG')) {
          configSeen = true;
          proxy!.holdReplies();
        }
      },
    });
    try {
      const watch = await finished(cli(['status', '--watch', '--lock-service', `redis://127.0.0.1:${proxy.port}`, uniqueLockName('silent')]));
      expect(configSeen, 'the CLI sent CONFIG GET').toBe(true);
      expect(proxy.heldBytes, 'the server answered; its reply was held back').toBeGreaterThan(0);
      expect(watch.code, watch.stderr).toBe(ExitCode.unavailable);
      // The lock commands' node timeout over redis://: a fifth of the default 10 s TTL.
      expect(watch.stderr).toContain(`CONNECTION_LOSS: Redis at 127.0.0.1:${proxy.port} did not answer CONFIG within 2000 ms`);
    } finally {
      await proxy.close();
    }
  }, 2 * LIVENESS_MS);
});

// Redlock tolerates a minority of silent nodes: so do `status` and `status
// --watch` (the listing from the majority, a SIGTERM ends the watch with exit
// 0 whatever it waits on). Three nodes of the test's own, on 16531-16533.
describe('the CLI and one paused node of three (redlock://)', () => {
  const PORTS = [16531, 16532, 16533];
  let nodes: PrivateRedis[] = [];
  beforeAll(async () => {
    nodes = await Promise.all(PORTS.map((p) => PrivateRedis.start(p, ['--notify-keyspace-events', 'K$gx'])));
  }, 60_000);
  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.stop())); // stop() SIGKILLs: a paused node too
  }, 60_000);
  const service = `redlock://${PORTS.map((p) => `127.0.0.1:${p}`).join(',')}`;

  it('status --watch shows the holder from the majority, then exits 0 on SIGTERM; status shows it too', async () => {
    const lock = uniqueLockName('redlock-paused');
    const clients = PORTS.map((port) => {
      const c = new Redis({ host: '127.0.0.1', port });
      c.on('error', () => {});
      return c;
    });
    try {
      const held = await acquireLock(clients, lock, { ttlMs: 120_000, owner: 'holder-p' });
      // acquireLock returns once a majority granted (a key, then the counter at
      // the token); the third node may carry another counter. Pause a node
      // whose two peers both carry the grant: the majority left shows the holder.
      const granted = async (c: Redis): Promise<boolean> =>
        (await c.exists(`fencekeeper:lock:{${lock}}`)) === 1 && (await c.get(`fencekeeper:token:{${lock}}`)) === String(held.token);
      let paused = -1;
      await until(async () => {
        const ok = await Promise.all(clients.map(granted));
        paused = ok.every(Boolean) ? 2 : ok.filter(Boolean).length === 2 ? ok.indexOf(false) : -1;
        return paused >= 0;
      }, 'the grant on a majority of the nodes');
      const node = nodes[paused]!;
      node.pause();
      try {
        const watch = cli(['status', '--watch', '--session-timeout', '2000', '--lock-service', service, lock]);
        await until(() => watch.stdout().includes('holder-p'), () => `a listing with the holder; stdout: ${watch.stdout()} stderr: ${watch.stderr()}`, LIVENESS_MS).catch((error: unknown) => {
          watch.child.kill('SIGKILL');
          throw error;
        });
        expect(watch.stdout()).toContain(`${lock}: held, 0 waiting`);
        expect(watch.stdout()).toContain(String(held.token));
        watch.child.kill('SIGTERM');
        const ended = await finished(watch);
        expect(ended.signal, ended.stderr).toBe(null);
        expect(ended.code, ended.stderr).toBe(ExitCode.ok);

        const once = await finished(cli(['status', '--session-timeout', '2000', '--lock-service', service, lock]));
        expect(once.code, once.stderr).toBe(ExitCode.ok);
        expect(once.stdout).toContain('holder-p');
        expect(once.stdout).toContain(String(held.token));
      } finally {
        node.resume();
      }
      await held.release();
    } finally {
      for (const c of clients) c.disconnect();
    }
  }, 4 * LIVENESS_MS);
});
