// An operator's SIGTERM while the CLI is still connecting to a ZooKeeper or
// an etcd that takes the connection but answers nothing: played by a proxy
// we own in front of the shared server, keeping back every byte the server
// sends (the shared servers are never paused). The CLI must end at once
// with 143 and one line on stderr, not die by the signal and not try on for
// its connect bound (the session timeout, set to ten minutes here, so only
// the signal can end it within the liveness guard). The same edge on a
// really paused Redis node is in redis-cli-interrupt.test.ts.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { TcpProxy } from '../../../src/testing/tcp-proxy.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { singleHosts } from '../etcd/helpers.js';
import { assertBuilt, cli, finishedWithin, type Run, type Running } from './helpers.js';

/** Liveness bound for one CLI run; not a timing assertion. */
const LIVENESS_MS = 40_000;
const SESSION_MS = '600000';

beforeAll(() => assertBuilt());

let proxy: TcpProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
});

/** The run's result, or a failed test (and the child killed) if it is still running after LIVENESS_MS. */
const finished = (run: Running): Promise<Run> => finishedWithin(run, LIVENESS_MS);

/** A proxy to `hostPort` that passes the client's bytes on and keeps every reply back; counts the client's bytes. */
async function silentServer(hostPort: string): Promise<{ proxy: TcpProxy; sent: () => number }> {
  let sent = 0;
  const [host, port] = [hostPort.slice(0, hostPort.lastIndexOf(':')), Number(hostPort.slice(hostPort.lastIndexOf(':') + 1))];
  const p = await TcpProxy.start({ host, port }, { observe: (chunk, from) => void (from === 'client' && (sent += chunk.length)) });
  p.holdReplies();
  return { proxy: p, sent: () => sent };
}

/** Start the CLI, send SIGTERM once it has sent bytes to the silent server, and return how it ended. */
async function interruptedWhileConnecting(args: readonly string[], sent: () => number): Promise<Run> {
  const run = cli(args);
  await until(() => sent() > 0 || run.child.exitCode !== null, () => `the CLI's first bytes; stderr: ${run.stderr()}`, LIVENESS_MS).catch((error: unknown) => {
    run.child.kill('SIGKILL');
    throw error;
  });
  expect(run.child.exitCode, run.stderr()).toBe(null);
  run.child.kill('SIGTERM');
  return finished(run);
}

describe('SIGTERM while the CLI connects to a server that does not answer', () => {
  it('ZooKeeper: run ends with 143 and one line on stderr; no lock node is made', async () => {
    const silent = await silentServer(testServers().zkStandalone);
    proxy = silent.proxy;
    const lock = uniqueLockName('interrupt-zk');
    const ended = await interruptedWhileConnecting(
      ['run', '--session-timeout', SESSION_MS, '--zookeeper', `127.0.0.1:${proxy.port}`, lock, '--', process.execPath, '-e', 'console.log("the command ran")'],
      silent.sent,
    );
    expect(proxy.heldBytes, 'the server answered; its reply was kept back').toBeGreaterThan(0);
    expect(ended.signal, ended.stderr).toBe(null);
    expect(ended.code, ended.stderr).toBe(ExitCode.signalBase + 15);
    expect(ended.stderr).toBe(`fencekeeper: interrupted by SIGTERM while connecting to ZooKeeper at 127.0.0.1:${proxy.port}; nothing was acquired\n`);
    expect(ended.stdout).toBe('');
    const zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone });
    try {
      expect(await zk.exists(`/fencekeeper/locks/${lock}`)).toBe(null);
    } finally {
      await zk.close();
    }
  }, 2 * LIVENESS_MS);

  it('etcd: status ends with 143 and one line on stderr', async () => {
    const silent = await silentServer(singleHosts()[0]!);
    proxy = silent.proxy;
    const ended = await interruptedWhileConnecting(['status', '--session-timeout', SESSION_MS, '--lock-service', `etcd://127.0.0.1:${proxy.port}`, uniqueLockName('interrupt-etcd')], silent.sent);
    expect(ended.signal, ended.stderr).toBe(null);
    expect(ended.code, ended.stderr).toBe(ExitCode.signalBase + 15);
    expect(ended.stderr).toBe(`fencekeeper: interrupted by SIGTERM while connecting to etcd at 127.0.0.1:${proxy.port}; nothing was acquired\n`);
    expect(ended.stdout).toBe('');
  }, 2 * LIVENESS_MS);
});
