// `--lock-service URL` / FENCEKEEPER_LOCK_SERVICE: the one way every command
// names its lock service, checked before connecting (exit 64), and the
// zookeeper:// form against the real ensemble and standalone server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseToken } from '../../../src/index.js';
import { ZooKeeperClient, lockStatus } from '../../../src/sources/zookeeper/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli } from './helpers.js';

describe('fencekeeper --lock-service', () => {
  let zk: ZooKeeperClient;

  beforeAll(async () => {
    assertBuilt();
    zk = await ZooKeeperClient.connect({ connectString: testServers().zkEnsemble, sessionTimeoutMs: 4000 });
  });
  afterAll(async () => {
    await zk?.close();
  });

  it('zookeeper:// with a host list and a trailing slash runs the command under the lock', async () => {
    const lock = uniqueLockName('cli-url');
    const url = `zookeeper://${testServers().zkEnsemble}/`;
    const result = await cli(['run', lock, '--lock-service', url, '--', 'sh', '-c', 'echo "$FENCING_TOKEN"']).done;
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(parseToken(result.stdout.trim())).toBeGreaterThan(0n);
    expect((await lockStatus(zk, lock)).holder).toBeNull();
  });

  it('FENCEKEEPER_LOCK_SERVICE is used when no flag is given, and the flag wins over it', async () => {
    const lock = uniqueLockName('cli-url');
    const env = { FENCEKEEPER_LOCK_SERVICE: `zookeeper://${testServers().zkEnsemble}`, ZOOKEEPER: '' };
    const fromEnv = await cli(['status', lock, '--json'], env).done;
    expect(fromEnv.code).toBe(0);
    expect(JSON.parse(fromEnv.stdout)).toMatchObject({ lock, queue: [] });
    // A flag naming an unknown scheme wins over a good environment: 64, not the environment's service.
    const flagWins = await cli(['status', lock, '--lock-service', 'nosuch://h:1'], env).done;
    expect(flagWins.code).toBe(ExitCode.usage);
    expect(flagWins.stderr).toContain('unknown lock service "nosuch://"');
  });

  it.each([
    ['not a URL', 'localhost:2181', 'not a lock service URL'],
    ['an unknown scheme', 'memcached://127.0.0.1:11211', 'unknown lock service "memcached://"'],
    ['zookeeper:// without a host', 'zookeeper:///chroot', 'needs at least one host:port'],
    ['zookeeper:// with credentials', 'zookeeper://user:secret@127.0.0.1:2181', 'hosts and an optional chroot only'],
    ['zookeeper:// with a malformed host list', 'zookeeper://[::1', '--lock-service "[::1"'],
  ])('%s exits 64 before connecting', async (_what, url, message) => {
    // A port nothing listens on: a connect attempt would exit 69, not 64.
    const result = await cli(['run', uniqueLockName('cli-url'), '--lock-service', url, '--', 'true'], { ZOOKEEPER: '127.0.0.1:1' }).done;
    expect(result.code).toBe(ExitCode.usage);
    expect(result.stderr).toContain(message);
  });
});
