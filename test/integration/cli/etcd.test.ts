// The CLI over etcd: `--lock-service etcd://h1,h2` (or FENCEKEEPER_LOCK_SERVICE)
// for run, elect and status, as an operator runs the built bin.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { serverEnvironment } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { assertBuilt, cli } from './helpers.js';
import { clusterHosts, singleHosts } from '../etcd/helpers.js';

beforeAll(assertBuilt);

const url = (): string => `etcd://${singleHosts().join(',')}`;

describe('fencekeeper over etcd', () => {
  it('run holds the lock while the command runs, with the token in its environment; status shows it with its lease', async () => {
    const name = uniqueLockName('etcd_cli_run');
    const holder = cli(['run', name, '--lock-service', url(), '--', 'sh', '-c', 'echo "token=$FENCING_TOKEN lock=$FENCEKEEPER_LOCK"; sleep 30']);
    await until(() => holder.stdout().includes('token='), () => `the command to start: ${holder.stderr()}`);
    const token = /token=(\d+)/.exec(holder.stdout())![1]!;

    const shown = await cli(['status', name, '--json'], { FENCEKEEPER_LOCK_SERVICE: url() }).done;
    expect(shown.code, shown.stderr).toBe(0);
    const status = JSON.parse(shown.stdout) as { lock: string; queue: { role: string; token: string; session: string; node: string }[] };
    expect(status.queue).toHaveLength(1);
    expect(status.queue[0]).toMatchObject({ role: 'holder', token });
    expect(status.queue[0]!.session).toMatch(/^lease 0x[0-9a-f]+$/);
    expect(status.queue[0]!.node).toContain(name);

    // A second run waits behind the first, and gets a larger token once it ends.
    const next = cli(['run', name, '--lock-service', url(), '--', 'sh', '-c', 'echo "token=$FENCING_TOKEN"']);
    await until(async () => {
      const r = await cli(['status', name, '--json', '--lock-service', url()]).done;
      return (JSON.parse(r.stdout) as { queue: unknown[] }).queue.length === 2;
    }, 'the second run to queue');
    holder.child.kill('SIGTERM');
    const second = await within(next.done, 30_000, 'the second run');
    expect(second.code, second.stderr).toBe(0);
    expect(BigInt(/token=(\d+)/.exec(second.stdout)![1]!) > BigInt(token)).toBe(true);
    await holder.done;
  });

  it('elect runs the command as leader with its epoch, over the 3-node cluster\'s host list', async () => {
    const name = uniqueLockName('etcd_cli_elect');
    const r = await within(cli(['elect', name, '--lock-service', `etcd://${clusterHosts().join(',')}`, '--', 'sh', '-c', 'echo "epoch=$FENCEKEEPER_EPOCH token=$FENCING_TOKEN"']).done, 30_000, 'elect');
    expect(r.code, r.stderr).toBe(0);
    const [, epoch, token] = /epoch=(\d+) token=(\d+)/.exec(r.stdout)!;
    expect(epoch).toBe(token);
  });

  it('status --watch prints the queue again when it changes', async () => {
    const name = uniqueLockName('etcd_cli_watch');
    const watcher = cli(['status', name, '--watch', '--json', '--lock-service', url()]);
    await until(() => watcher.stdout().includes('"event":"queue"'), () => `the first listing: ${watcher.stderr()}`);
    // The command holds the lock until the watcher has shown it held.
    const go = join(mkdtempSync(join(tmpdir(), 'fk-etcd-cli-')), 'go');
    const running = cli(['run', name, '--lock-service', url(), '--', 'sh', '-c', `while [ ! -e ${go} ]; do sleep 0.05; done`]);
    await until(() => watcher.stdout().trim().split('\n').length >= 2, () => `the held listing: ${watcher.stdout()}`);
    writeFileSync(go, '');
    const run = await within(running.done, 30_000, 'the run');
    expect(run.code, run.stderr).toBe(0);
    // Free, held, free again.
    await until(() => watcher.stdout().trim().split('\n').length >= 3, () => `three listings: ${watcher.stdout()}`);
    const listings = watcher.stdout().trim().split('\n').map((l) => (JSON.parse(l) as { queue: unknown[] }).queue.length);
    expect(listings.slice(0, 3)).toEqual([0, 1, 0]);
    watcher.child.kill('SIGINT');
    expect((await watcher.done).code).toBe(0);
  });

  it('a bad etcd:// URL or name is a usage error (64) before any connection; an unreachable etcd exits 69', async () => {
    for (const bad of ['etcd://', 'etcd://user:pw@127.0.0.1:2379', 'etcd://127.0.0.1:2379/prefix', 'etcd://127.0.0.1', 'etcd://h:99999']) {
      const r = await cli(['status', 'jobs/a', '--lock-service', bad]).done;
      expect(r.code, `${bad}: ${r.stderr}`).toBe(64);
    }
    const badName = await cli(['status', 'jobs#a', '--lock-service', url()]).done;
    expect(badName.code).toBe(64);
    const unreachable = await cli(['status', 'jobs/a', '--lock-service', 'etcd://127.0.0.1:1']).done;
    expect(unreachable.code, unreachable.stderr).toBe(69);
  });

  it('the demo plays its paused-holder timeline over etcd (FENCEKEEPER_LOCK_SERVICE): every stale write refused', { timeout: 120_000 }, async () => {
    const run = await within(
      cli(['demo'], { ...serverEnvironment(), FENCEKEEPER_LOCK_SERVICE: url(), DEMO_LOCK: uniqueLockName('etcd_demo') }).done,
      110_000,
      'the demo over etcd',
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    // A's step-down came from the etcd lease's clock.
    expect(run.stdout).toMatch(/reads lock\.held .*\| false \(lock .* lost: no reply from etcd in time: the lease may expire/);
    expect(run.stdout.match(/with its old token\s+\| refused/g)).toHaveLength(3);
    expect(run.stdout).toContain('PASS');
  });
});
