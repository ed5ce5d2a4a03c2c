// The CLI against a Redis node that takes connections but does not answer
// (SIGSTOP: the kernel still completes the TCP handshake): `status` and
// `status --watch` end with exit 69 and say why, instead of waiting forever,
// whether the silence starts at the connection's ready check (a node paused
// before the CLI came) or at the watch's CONFIG GET (a node that stops
// answering once connected, played by a proxy holding its replies). Its own
// redis-server on port 16521, so no shared node is paused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/cli/exit-codes.js';
import { startRedis, type RedisServer } from '../../src/testing/redis-server.js';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import { uniqueLockName } from '../helpers/unique.js';
import { assertBuilt, cli, type Run, type Running } from './cli-helpers.js';

const PORT = 16521;
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
async function finished(run: Running): Promise<Run> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      run.child.kill('SIGKILL');
      reject(new Error(`still running after ${LIVENESS_MS} ms; stderr so far: ${run.stderr()}`));
    }, LIVENESS_MS);
  });
  try {
    return await Promise.race([run.done, late]);
  } finally {
    clearTimeout(timer);
  }
}

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
      expect(watch.stderr).toContain(`CONNECTION_LOSS: Redis at 127.0.0.1:${proxy.port} did not answer CONFIG within 500 ms`);
    } finally {
      await proxy.close();
    }
  }, 2 * LIVENESS_MS);
});
