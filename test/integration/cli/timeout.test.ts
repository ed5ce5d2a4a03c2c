// `run --timeout` bounds the connect too: against a lock service that does
// not answer (a port nothing listens on, or a proxy that black-holes every
// byte), every lock service the CLI supports exits 69 within about the
// timeout, instead of waiting out the client's own connect timeout (which
// --session-timeout 20000 makes far longer than --timeout here).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testServers } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { assertBuilt, cli, finishedWithin } from './helpers.js';

const TIMEOUT_MS = 2000;
// Node's start, the CLI's imports and giving the connect up, on a loaded
// two-core machine: generous, and still far below the 20 s session timeout.
const SLACK_MS = 5000;

const proxies: TcpProxy[] = [];
const blackholed = async (hostPort: string): Promise<string> => {
  const proxy = await TcpProxy.to(hostPort);
  proxies.push(proxy);
  proxy.blackhole();
  return proxy.address;
};
const hostPort = (url: string): string => new URL(url).host;

let services: { name: string; dead: string; silent: string }[] = [];

beforeAll(async () => {
  assertBuilt();
  const servers = testServers();
  const redlock = servers.redlock.slice(0, 3).map(hostPort);
  services = [
    { name: 'zookeeper', dead: 'zookeeper://127.0.0.1:1', silent: `zookeeper://${await blackholed(servers.zkStandalone)}` },
    { name: 'redis', dead: 'redis://127.0.0.1:1', silent: `redis://${await blackholed(hostPort(servers.redis))}` },
    {
      name: 'redlock',
      dead: 'redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3',
      silent: `redlock://${(await Promise.all(redlock.map(blackholed))).join(',')}`,
    },
    { name: 'etcd', dead: 'etcd://127.0.0.1:1', silent: `etcd://${await blackholed(hostPort(servers.etcd))}` },
  ];
});

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
});

describe('run --timeout bounds the connect', () => {
  for (const name of ['zookeeper', 'redis', 'redlock', 'etcd']) {
    for (const how of ['dead', 'silent'] as const) {
      it(`${name}, ${how === 'dead' ? 'a port nothing listens on' : 'a proxy that black-holes'}: exits 69 within about --timeout, nothing run`, async () => {
        const service = services.find((s) => s.name === name)!;
        const started = performance.now();
        const run = cli(['run', uniqueLockName('cli-timeout'), '--lock-service', service[how], '--timeout', String(TIMEOUT_MS), '--session-timeout', '20000', '--', 'sh', '-c', 'echo ran']);
        const result = await finishedWithin(run, 30_000);
        const elapsed = performance.now() - started;
        expect({ code: result.code, stderr: result.stderr }).toMatchObject({ code: ExitCode.unavailable });
        expect(result.stdout).not.toContain('ran');
        expect(elapsed).toBeLessThan(TIMEOUT_MS + SLACK_MS);
      });
    }
  }
});
