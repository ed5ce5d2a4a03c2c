// An operator's SIGTERM or SIGINT while the CLI is still connecting to a Redis
// node that takes connections but does not answer (SIGSTOP: the kernel still
// completes the TCP handshake, and ioredis waits for its ready check). The
// CLI must end at once with its own exit code for an interrupted command
// (128 + n) and one line on stderr, not die by the signal (Node's default
// when no listener is installed yet) and not wait out its connect bound.
// A proxy we own sits between the CLI and the paused node, only to see the
// CLI's ready check (INFO) pass, so the signal is sent while the connect is
// under way. The connect bound is one TTL, set to ten minutes here: the CLI
// can only end within the liveness guard because the signal ended it.
// Its own redis-server on port 16700, so no shared node is paused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { TcpProxy } from '../../../src/testing/tcp-proxy.js';
import { PrivateRedis } from '../../helpers/private-redis.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { assertBuilt, cli, finishedWithin, type Run, type Running } from './helpers.js';

const PORT = 16700;
/** Liveness bound for one CLI run; not a timing assertion. */
const LIVENESS_MS = 40_000;
/** The TTL, and so the CLI's bound on connecting: far beyond LIVENESS_MS. */
const TTL_MS = '600000';

let node: PrivateRedis | undefined;
let proxy: TcpProxy | undefined;
/** Connections on which the proxy saw the client's ready check. */
let readyChecks = 0;

beforeAll(async () => {
  assertBuilt();
  node = await PrivateRedis.start(PORT);
  proxy = await TcpProxy.start({ host: '127.0.0.1', port: PORT }, {
    observe: (chunk, from) => {
      if (from === 'client' && chunk.includes('INFO')) readyChecks++;
    },
  });
}, 60_000);
afterAll(async () => {
  await proxy?.close();
  await node?.stop(); // SIGKILL: a paused node too
}, 60_000);

/** The run's result, or a failed test (and the child killed) if it is still running after LIVENESS_MS. */
const finished = (run: Running): Promise<Run> => finishedWithin(run, LIVENESS_MS);

/** Start the CLI against the paused node, send `signal` once its ready check is on the way, and return how it ended (the node still paused). */
async function interruptedWhileConnecting(args: readonly string[], signal: NodeJS.Signals): Promise<Run> {
  const before = readyChecks;
  const run = cli([...args.slice(0, 1), '--session-timeout', TTL_MS, '--lock-service', `redis://127.0.0.1:${proxy!.port}`, ...args.slice(1)]);
  await until(() => readyChecks > before || run.child.exitCode !== null, () => `the CLI's ready check; stderr: ${run.stderr()}`, LIVENESS_MS).catch((error: unknown) => {
    run.child.kill('SIGKILL');
    throw error;
  });
  expect(run.child.exitCode, run.stderr()).toBe(null);
  run.child.kill(signal);
  const ended = await finished(run);
  expect(node!.paused, 'the CLI ended while the node was still paused').toBe(true);
  return ended;
}

/** How many of the lock's keys (the holder's, the waiters', the token counter) the node has, read once it answers again. */
async function lockKeys(lock: string, which: readonly ('lock' | 'waiters' | 'token')[] = ['lock', 'waiters', 'token']): Promise<number> {
  const client = new Redis({ host: '127.0.0.1', port: PORT });
  client.on('error', () => {});
  try {
    return await client.exists(...which.map((k) => `fencekeeper:${k}:{${lock}}`));
  } finally {
    client.disconnect();
  }
}

describe('a signal while the CLI connects to a paused Redis node', () => {
  it('run: SIGTERM ends it with 143 and one line on stderr; the command never starts and no key is left', async () => {
    const lock = uniqueLockName('interrupt-run');
    node!.pause();
    let ended: Run;
    try {
      ended = await interruptedWhileConnecting(['run', lock, '--', process.execPath, '-e', 'console.log("the command ran")'], 'SIGTERM');
    } finally {
      node!.resume();
    }
    expect(ended.signal, ended.stderr).toBe(null); // not killed by the signal: our handler ran
    expect(ended.code, ended.stderr).toBe(ExitCode.signalBase + 15);
    expect(ended.stderr).toBe(`fencekeeper: interrupted by SIGTERM while connecting to Redis at 127.0.0.1:${proxy!.port}; nothing was acquired\n`);
    expect(ended.stdout).toBe('');
    expect(await lockKeys(lock)).toBe(0);
    // And the lock is free: a run against the node, now answering, gets it and exits with its command's code.
    const next = await finished(cli(['run', '--timeout', '20000', '--lock-service', `redis://127.0.0.1:${PORT}`, lock, '--', process.execPath, '-e', 'process.exit(3)']));
    expect(next.code, next.stderr).toBe(3);
    expect(await lockKeys(lock, ['lock', 'waiters'])).toBe(0); // released; the token counter stays, as it must
    expect(await lockKeys(lock, ['token'])).toBe(1);
  }, 3 * LIVENESS_MS);

  it('status: SIGINT ends it with 130 and one line on stderr', async () => {
    node!.pause();
    let ended: Run;
    try {
      ended = await interruptedWhileConnecting(['status', uniqueLockName('interrupt-status')], 'SIGINT');
    } finally {
      node!.resume();
    }
    expect(ended.signal, ended.stderr).toBe(null);
    expect(ended.code, ended.stderr).toBe(ExitCode.signalBase + 2);
    expect(ended.stderr).toBe(`fencekeeper: interrupted by SIGINT while connecting to Redis at 127.0.0.1:${proxy!.port}; nothing was acquired\n`);
    expect(ended.stdout).toBe('');
  }, 2 * LIVENESS_MS);

  it('status --watch: SIGTERM during the first connect ends it with 143 too (after it, SIGTERM ends the watch with 0)', async () => {
    node!.pause();
    let ended: Run;
    try {
      ended = await interruptedWhileConnecting(['status', '--watch', uniqueLockName('interrupt-watch')], 'SIGTERM');
    } finally {
      node!.resume();
    }
    expect(ended.signal, ended.stderr).toBe(null);
    expect(ended.code, ended.stderr).toBe(ExitCode.signalBase + 15);
    expect(ended.stderr).toBe(`fencekeeper: interrupted by SIGTERM while connecting to Redis at 127.0.0.1:${proxy!.port}; nothing was acquired\n`);
  }, 2 * LIVENESS_MS);
});
