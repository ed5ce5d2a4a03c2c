// The CLI with redis:// and redlock://: run holds the lock for the command
// and passes its token, status shows the holder, a password on the command
// line is refused, and an unreachable server is exit 69.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseToken } from '../../../src/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { acquireLock, lockStatus } from '../../../src/sources/redis/index.js';
import { REDIS, REDLOCK } from '../../helpers/sources.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { assertBuilt, cli, type Running } from './helpers.js';
import { RedisPool, holdRedisFaults } from '../redis/helpers.js';

const pool = new RedisPool();
let giveBack: (() => Promise<void>) | undefined;
beforeAll(async () => {
  assertBuilt();
  giveBack = await holdRedisFaults();
}, 11 * 60_000);
afterEach(() => pool.closeAll());
afterAll(async () => giveBack?.(), 120_000);

describe.each([
  ['redis://', () => REDIS.lockService, () => pool.single()],
  ['redlock://', () => REDLOCK.lockService, () => pool.redlock()],
] as const)('%s', (_scheme, url, target) => {
  it('run holds the lock for the command, with its token; status shows the holder; the lock is free after', async () => {
    const lock = uniqueLockName('cli');
    const result = await cli(['run', lock, '--lock-service', url(), '--', 'sh', '-c', 'echo "$FENCING_TOKEN"']).done;
    expect(result.code, result.stderr).toBe(0);
    const token = parseToken(result.stdout.split('\n')[0]!.trim());
    expect(token).toBeGreaterThan(0n);
    expect((await lockStatus(target(), lock)).holder).toBeNull();

    const held = await cli(['run', lock, '--lock-service', url(), '--', 'sh', '-c', 'echo "$FENCING_TOKEN"; sleep 30']);
    try {
      await new Promise<void>((resolve) => {
        const check = (): void => void (held.stdout().includes('\n') ? resolve() : setTimeout(check, 20));
        check();
      });
      const second = parseToken(held.stdout().trim());
      expect(second).toBeGreaterThan(token);
      const status = await cli(['status', lock, '--json'], { FENCEKEEPER_LOCK_SERVICE: url() }).done;
      expect(status.code, status.stderr).toBe(0);
      const shown = JSON.parse(status.stdout) as { queue: Array<{ role: string; token: string }> };
      expect(shown.queue).toEqual([expect.objectContaining({ role: 'holder', token: String(second) })]);
    } finally {
      held.child.kill('SIGTERM');
      await held.done;
    }
  });
});

interface Listing {
  event: 'queue';
  queue: { role: string; token: string; owner: string }[];
}

function listings(run: Running): Listing[] {
  return run.stdout().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Listing | { event: string }).filter((l): l is Listing => l.event === 'queue');
}

describe.each([
  ['redis://', () => REDIS.lockService, () => [pool.single()]],
  ['redlock://', () => REDLOCK.lockService, () => pool.redlock()],
] as const)('status --watch over %s', (_scheme, url, nodes) => {
  it('a new listing for a grant, a release, and a key that expired with nobody releasing it; nothing while nothing changes', async () => {
    const lock = uniqueLockName('watch');
    const watching = cli(['status', lock, '--watch', '--json', '--lock-service', url()]);
    const next = async (count: number, what: string): Promise<Listing> => {
      await until(() => listings(watching).length >= count || watching.child.exitCode !== null, what);
      const shown = listings(watching);
      if (shown.length < count) throw new Error(`status --watch exited (${String(watching.child.exitCode)}) before ${what}:\n${watching.stderr()}`);
      expect(shown.length, `one listing per change (${what})`).toBe(count);
      return shown[count - 1] as Listing;
    };
    try {
      expect((await next(1, 'the first listing')).queue).toEqual([]);
      const target = nodes();
      // A short TTL so that renewals (every 1000 ms) fall within the wait below;
      // the node timeout set apart from it (a twentieth of the TTL would be
      // 150 ms), since a command outlasting that on a loaded machine is not
      // what this test is about.
      const held = await acquireLock(target.length === 1 ? target[0]! : target, lock, { ttlMs: 3000, nodeTimeoutMs: 1000, owner: 'holder-a' });
      expect((await next(2, 'the holder')).queue).toEqual([expect.objectContaining({ role: 'holder', token: String(held.token), owner: 'holder-a' })]);
      // Renewals (every 1000 ms) touch the key: read again, nothing new shown.
      await new Promise((r) => setTimeout(r, 2500));
      expect(listings(watching)).toHaveLength(2);
      await held.release();
      expect((await next(3, 'the release')).queue).toEqual([]);
      // A holder that died: its key (here set by hand, with no renewal) expires.
      // Its TTL must outlast the watcher's read of it after the notification,
      // or the holder is never seen (nothing changed, nothing shown).
      for (const node of target) await node.call('SET', `fencekeeper:lock:{${lock}}`, 'dead-grant holder-dead', 'PX', '2000');
      expect((await next(4, 'the dead holder')).queue).toEqual([expect.objectContaining({ role: 'holder', owner: 'holder-dead' })]);
      expect((await next(5, "the dead holder's key to expire")).queue).toEqual([]);
    } finally {
      watching.child.kill('SIGINT');
      await watching.done;
    }
  });

  it('a server without keyspace notifications is refused with the setting to use, not watched in silence', async () => {
    const target = nodes();
    const before = (await target[0]!.call('CONFIG', 'GET', 'notify-keyspace-events')) as string[];
    await target[0]!.call('CONFIG', 'SET', 'notify-keyspace-events', '');
    try {
      const run = await cli(['status', uniqueLockName('watch'), '--watch', '--lock-service', url()]).done;
      expect(run.code).toBe(ExitCode.usage);
      expect(run.stderr).toContain('notify-keyspace-events');
      expect(run.stderr).toContain('K$gx');
    } finally {
      await target[0]!.call('CONFIG', 'SET', 'notify-keyspace-events', before[1]!);
    }
  });
});

describe('redis:// URLs', () => {
  it('a password on the command line exits 64 before connecting; from the environment it is accepted', async () => {
    const lock = uniqueLockName('cli');
    const withPassword = REDIS.lockService.replace('redis://', 'redis://default:secret@');
    const flag = await cli(['status', lock, '--lock-service', withPassword]).done;
    expect(flag.code).toBe(ExitCode.usage);
    expect(flag.stderr).toContain('FENCEKEEPER_LOCK_SERVICE only');
    // The test server's default user takes any password (nopass).
    const fromEnv = await cli(['status', lock], { FENCEKEEPER_LOCK_SERVICE: withPassword }).done;
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    expect(fromEnv.stdout).toContain(`${lock}: free`);
    expect(fromEnv.stdout + fromEnv.stderr).not.toContain('secret');
  });

  it('a server that does not answer is exit 69', async () => {
    const lock = uniqueLockName('cli');
    // Port 1 on loopback: nothing listens there.
    const single = await cli(['status', lock, '--lock-service', 'redis://127.0.0.1:1']).done;
    expect(single.code, single.stderr).toBe(ExitCode.unavailable);
    expect(single.stderr).toContain('cannot reach Redis at 127.0.0.1:1');
    const quorum = await cli(['status', lock, '--lock-service', 'redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3']).done;
    expect(quorum.code, quorum.stderr).toBe(ExitCode.unavailable);
  });

  it('a redlock:// URL naming one server under two host names exits 64 (usage), as the same host name twice does; the command never runs', async () => {
    const lock = uniqueLockName('cli');
    // 127.0.0.1 and localhost: two names the URL check cannot tell apart
    // without I/O; only the servers' run_ids at the first acquire show that
    // they are one node, counted twice toward every majority.
    const [first, ...rest] = REDLOCK.lockService.replace('redlock://', '').split(',');
    const port = first!.split(':')[1];
    const cmd = ['--', 'sh', '-c', 'echo ran'];
    const twoNames = await cli(['run', lock, '--lock-service', `redlock://127.0.0.1:${port},localhost:${port},${rest.join(',')}`, ...cmd]).done;
    expect(twoNames.stderr).toContain('reach the same Redis server');
    expect(twoNames.code, twoNames.stderr).toBe(ExitCode.usage);
    expect(twoNames.stdout).toBe('');
    const oneName = await cli(['run', lock, '--lock-service', `redlock://127.0.0.1:${port},127.0.0.1:${port},${rest.join(',')}`, ...cmd]).done;
    expect(oneName.code, oneName.stderr).toBe(ExitCode.usage);
    expect(oneName.stdout).toBe('');
    expect((await lockStatus(pool.redlock(), lock)).holder).toBeNull();
    // status reads a majority too: one server counted twice is refused there as well.
    const status = await cli(['status', lock, '--lock-service', `redlock://127.0.0.1:${port},localhost:${port},${rest.join(',')}`]).done;
    expect(status.stderr).toContain('reach the same Redis server');
    expect(status.code, status.stderr).toBe(ExitCode.usage);
  });

  it('elect is refused: Redis has no elections', async () => {
    const result = await cli(['elect', 'leader', '--lock-service', REDIS.lockService, '--', 'true']).done;
    expect(result.code).toBe(ExitCode.usage);
    expect(result.stderr).toContain('has no elections');
  });
});
