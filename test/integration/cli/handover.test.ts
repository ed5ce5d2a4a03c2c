// An operator's signal that arrives just as the CLI hands its signals from
// one listener to the next must reach the second one, never be lost. Node
// keeps a signal's watcher (libuv's handle) only while a listener for it is
// registered: stopping the last one and starting another, even in one tick,
// drops a signal the process has already caught but whose listener call is
// still queued for the event loop. The CLI then went on as if nothing had
// come: `run` started its command and waited for it, `status --watch`
// watched on, both until killed.
//
// The signal is placed exactly at the hand-over by a module loaded into the
// CLI (test/fixtures/signal-at-handover.mjs): the first time a listener for
// SIGTERM is removed, the process sends itself SIGTERM first. The lock
// service is the real ZooKeeper.
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient, lockStatus } from '../../../src/sources/zookeeper/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli, finishedWithin } from './helpers.js';

const PRELOAD = pathToFileURL(fileURLToPath(new URL('../../fixtures/signal-at-handover.mjs', import.meta.url))).href;
const AT_HANDOVER = { NODE_OPTIONS: `--import=${PRELOAD}`, FK_SIGNAL_AT_HANDOVER: 'SIGTERM', ZOOKEEPER: '', FENCEKEEPER_LOCK_SERVICE: '' };
/** Liveness bound for one CLI run; not a timing assertion. The commands below would run ten minutes. */
const LIVENESS_MS = 40_000;

beforeAll(() => assertBuilt());

describe('a signal caught as the CLI hands its signals over', () => {
  it('run: the SIGTERM caught as the lock is granted reaches the command; the run ends with its 143 and releases the lock', async () => {
    const server = testServers().zkStandalone;
    const name = uniqueLockName('handover');
    const run = cli(['run', name, '--zookeeper', server, '--', process.execPath, '-e', 'setTimeout(() => {}, 600_000)'], AT_HANDOVER);
    const ended = await finishedWithin(run, LIVENESS_MS);
    // The command got the signal (Node's default for SIGTERM: it dies by it, 128 + 15).
    expect(ended, ended.stderr).toMatchObject({ code: 128 + 15, signal: null });
    // Not the acquiring step's answer to an interruption: the grant was already ours, so the signal was the command's.
    expect(ended.stderr).not.toContain('interrupted');
    const observer = await ZooKeeperClient.connect({ connectString: server });
    try {
      expect((await lockStatus(observer, name)).holder).toBe(null);
    } finally {
      await observer.close();
    }
  });

  it('status --watch: the SIGTERM caught as the first connect completes stops the watch (exit 0)', async () => {
    const run = cli(['status', uniqueLockName('handover_watch'), '--watch', '--json', '--zookeeper', testServers().zkStandalone], AT_HANDOVER);
    const ended = await finishedWithin(run, LIVENESS_MS);
    expect(ended, ended.stderr).toMatchObject({ code: ExitCode.ok, signal: null });
  });
});
