// The CLI with redis:// and redlock://: run holds the lock for the command
// and passes its token, status shows the holder, a password on the command
// line is refused, and an unreachable server is exit 69.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseToken } from '../../src/index.js';
import { ExitCode } from '../../src/cli/exit-codes.js';
import { lockStatus } from '../../adapters/redis/index.js';
import { REDIS, REDLOCK } from '../helpers/sources.js';
import { uniqueLockName } from '../helpers/unique.js';
import { assertBuilt, cli } from './cli-helpers.js';
import { RedisPool, holdRedisFaults } from './redis-helpers.js';

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

  it('elect is refused: Redis has no elections', async () => {
    const result = await cli(['elect', 'leader', '--lock-service', REDIS.lockService, '--', 'true']).done;
    expect(result.code).toBe(ExitCode.usage);
    expect(result.stderr).toContain('has no elections');
  });
});
