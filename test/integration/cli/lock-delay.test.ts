// `fencekeeper run --lock-delay <ms>` against the real standalone ZooKeeper
// (FK_ZK_STANDALONE): the flag reaches the lock's lockDelayMs. After a holder
// whose node was deleted by an admin (an unclean end), a run with a
// ten-minute lock-delay cannot be granted within its --timeout (exit 75)
// while a run without the flag gets the lock; after a clean release by a
// participant with lock-delay, the run with the flag is not delayed at all
// (the ten minutes would outlast the liveness guard). Mistakes with the flag
// exit 64 before anything connects. No assertion on time: only outcomes.
//
// The lock's container is pinned with a foreign child ('keeper', which the
// queue ignores), so the server's container reaper cannot remove it, and the
// release record in its data, between the two participants: a reaped parent
// counts as unclean.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient, acquireLock, lockStatus } from '../../../src/sources/zookeeper/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { within } from '../../helpers/wait.js';
import { assertBuilt, cli, type Run } from './helpers.js';

const LOCKS = '/fencekeeper/locks';
/** Far beyond any liveness bound here: a run that waits it out fails the test. */
const LONG_DELAY = '600000';
/** Liveness bound for one CLI run; not a timing assertion. */
const LIVENESS_MS = 40_000;

let admin: ZooKeeperClient | undefined;
beforeAll(async () => {
  assertBuilt();
  admin = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone });
});
afterAll(() => admin?.close());

const zookeeper = (): string => testServers().zkStandalone;
const run = (args: readonly string[]): Promise<Run> => within(cli(args).done, LIVENESS_MS, `fencekeeper ${args.join(' ')}`);

async function createIfMissing(path: string, mode: 'persistent' | 'container'): Promise<void> {
  try {
    await admin!.create(path, null, { mode });
  } catch (error) {
    if ((error as { code?: string }).code !== 'ZK_NODEEXISTS') throw error;
  }
}

/** The lock's parent, kept from the reaper by a child the queue ignores; returns the unpin. */
async function pinParent(name: string): Promise<() => Promise<void>> {
  const parent = `${LOCKS}/${name}`;
  for (let at = parent.indexOf('/', 1); at !== -1; at = parent.indexOf('/', at + 1)) await createIfMissing(parent.slice(0, at), 'persistent');
  await createIfMissing(parent, 'container');
  await admin!.create(`${parent}/keeper`, null);
  return () => admin!.delete(`${parent}/keeper`);
}

describe('fencekeeper run --lock-delay (ZooKeeper)', () => {
  it('after an unclean end, a run with --lock-delay is not granted within --timeout (75); one without it is (0)', async () => {
    const lock = uniqueLockName('cli-lock-delay-unclean');
    const unpin = await pinParent(lock);
    const zk = await ZooKeeperClient.connect({ connectString: zookeeper() });
    try {
      const held = await acquireLock(zk, lock, { lockDelayMs: 1 });
      // The holder's node deleted by an admin: the lock ends without the clean-release record.
      const { holder } = await lockStatus(admin!, lock);
      expect(holder?.token).toBe(held.token);
      await admin!.delete(holder!.path);

      const delayed = await run(['run', lock, '--zookeeper', zookeeper(), '--lock-delay', LONG_DELAY, '--timeout', '3000', '--', process.execPath, '-e', 'console.log("ran")']);
      expect(delayed.code, delayed.stderr).toBe(ExitCode.lockTimeout);
      expect(delayed.stdout).toBe('');
      expect((await lockStatus(admin!, lock)).holder, 'the timed-out run left nothing behind').toBe(null);

      const plain = await run(['run', lock, '--zookeeper', zookeeper(), '--timeout', '20000', '--', process.execPath, '-e', 'process.exit(3)']);
      expect(plain.code, plain.stderr).toBe(3);
    } finally {
      await zk.close();
      await unpin();
    }
  }, 3 * LIVENESS_MS);

  it('after a clean release by a lock-delay participant, a run with --lock-delay gets the lock at once', async () => {
    const lock = uniqueLockName('cli-lock-delay-clean');
    const unpin = await pinParent(lock);
    const zk = await ZooKeeperClient.connect({ connectString: zookeeper() });
    try {
      const held = await acquireLock(zk, lock, { lockDelayMs: 1 });
      await held.release();
      const next = await run(['run', lock, '--zookeeper', zookeeper(), '--lock-delay', LONG_DELAY, '--timeout', '20000', '--', 'sh', '-c', 'echo "token $FENCING_TOKEN"']);
      expect(next.code, next.stderr).toBe(0);
      expect(next.stdout).toMatch(/^token [0-9]+\n$/);
      expect(BigInt(next.stdout.slice('token '.length).trim())).toBeGreaterThan(held.token);
    } finally {
      await zk.close();
      await unpin();
    }
  }, 2 * LIVENESS_MS);

  it('refuses a bad value, another lock service and elect with exit 64 before connecting', async () => {
    const lock = uniqueLockName('cli-lock-delay-usage');
    // Nothing listens on port 1: a usage error is found before any connect.
    const down = '127.0.0.1:1';
    for (const value of ['-1', '1.5', 'abc', '', '2147483648', '99999999999999999999']) {
      const r = await run(['run', lock, '--zookeeper', down, `--lock-delay=${value}`, '--', 'true']);
      expect({ value, code: r.code }).toEqual({ value, code: ExitCode.usage });
      expect(r.stderr).toContain(`--lock-delay must be a non-negative integer (milliseconds), got ${JSON.stringify(value)}`);
    }
    for (const service of ['redis://127.0.0.1:1', 'redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3', 'etcd://127.0.0.1:1']) {
      const r = await run(['run', lock, '--lock-service', service, '--lock-delay', '1000', '--', 'true']);
      expect({ service, code: r.code }).toEqual({ service, code: ExitCode.usage });
      expect(r.stderr).toContain('--lock-delay needs ZooKeeper (zookeeper:// or --zookeeper)');
    }
    const elect = await run(['elect', lock, '--zookeeper', down, '--lock-delay', '1000', '--', 'true']);
    expect(elect.code, elect.stderr).toBe(ExitCode.usage);
    expect(elect.stderr).toContain('--lock-delay is a run option');
    // zookeeper:// takes it as --zookeeper does (refused here only for its value).
    const url = await run(['run', lock, '--lock-service', `zookeeper://${down}`, '--lock-delay=-5', '--', 'true']);
    expect(url.code, url.stderr).toBe(ExitCode.usage);
    expect(url.stderr).toContain('--lock-delay must be');
  }, 4 * LIVENESS_MS);
});
