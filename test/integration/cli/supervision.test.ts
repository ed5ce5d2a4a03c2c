// `fencekeeper run` must not leave its command running once it can no longer
// vouch for the lock, however it dies or stalls. These tests kill and freeze
// the real fencekeeper process (SIGKILL, SIGSTOP) while its command runs,
// queue a real next holder on the real ZooKeeper behind it, and watch the
// command's processes (the shell and the child it started, both ignoring
// SIGTERM so that only the kill deadline can end them) through /proc.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseToken, type Lock } from '../../../src/index.js';
import { ZooKeeperClient, acquireLock, lockStatus } from '../../../src/sources/zookeeper/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli, killSurvivors, running, witness, type Running, type Witness } from './helpers.js';
import { until } from '../../helpers/wait.js';

const SESSION_MS = 4000;
const MARGIN_MS = 1000;
const GRACE_MS = 500;
// How late a loaded two-core machine may be to notice and kill (timers,
// process start-up); the ordering checks below need no slack at all.
const SLACK_MS = 1500;

// The shell ignores SIGTERM, and so does the sleep it starts (an ignored
// signal stays ignored across fork and exec): only SIGKILL ends them.
const STUBBORN = 'trap "" TERM; sleep 1000 & echo "started $FENCING_TOKEN $$ $PPID $!"; wait';

describe('fencekeeper run: the command never outlives the lock', () => {
  let zk: ZooKeeperClient;
  let connect: string;
  const cleanups: (() => void | Promise<void>)[] = [];

  beforeAll(async () => {
    assertBuilt();
    connect = testServers().zkStandalone;
    zk = await ZooKeeperClient.connect({ connectString: connect, sessionTimeoutMs: SESSION_MS });
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  afterAll(async () => {
    await zk?.close();
  });

  interface Grant {
    readonly lock: Lock;
    /** The pids of the command's processes that still ran when the grant arrived. */
    readonly runningAtGrant: readonly number[];
  }

  interface Started {
    readonly run: Running;
    readonly token: bigint;
    /** The command's shell and the sleep it started. */
    readonly command: readonly Witness[];
    /** The command's parent process. */
    readonly parent: Witness;
  }

  async function start(lock: string): Promise<Started> {
    const run = cli([
      'run', lock, '--zookeeper', connect,
      '--session-timeout', String(SESSION_MS), '--safety-margin', String(MARGIN_MS), '--grace', String(GRACE_MS),
      '--', 'sh', '-c', STUBBORN,
    ]);
    cleanups.push(() => {
      run.child.kill('SIGCONT');
      run.child.kill('SIGKILL');
    });
    await until(() => /started \d+ \d+ \d+ \d+/.test(run.stdout()), 'the command to start');
    const [, token, shell, parent, child] = /started (\d+) (\d+) (\d+) (\d+)/.exec(run.stdout()) as unknown as string[];
    const command = [witness(Number(shell)), witness(Number(child))];
    const parentWitness = witness(Number(parent));
    cleanups.push(() => killSurvivors([...command, parentWitness]));
    expect(zk.sessionTimeoutMs).toBe(SESSION_MS);
    return { run, token: parseToken(token as string), command, parent: parentWitness };
  }

  /**
   * Queue the next holder behind the command's lock. At the instant its
   * grant arrives, note which of the command's processes still run.
   */
  async function nextHolder(lock: string, command: readonly Witness[]): Promise<{ granted: Promise<Grant> }> {
    const granted = acquireLock(zk, lock).then((next) => ({ lock: next, runningAtGrant: command.filter(running).map((w) => w.pid) }));
    granted.catch(() => undefined); // awaited by the test
    await until(async () => (await lockStatus(zk, lock)).waiters.length === 1, 'the next holder to queue');
    return { granted };
  }

  /**
   * Start `run`, queue the next holder behind it, then hit fencekeeper with
   * `signal`. Resolves at the next holder's grant, with how long after the
   * signal the command's processes were all gone (polled, a few ms late).
   */
  async function strike(prefix: string, signal: 'SIGKILL' | 'SIGSTOP'): Promise<Started & { next: Grant; goneAfterMs: Promise<number> }> {
    const lock = uniqueLockName(prefix);
    const started = await start(lock);
    const { granted } = await nextHolder(lock, started.command);
    const struckAt = performance.now();
    started.run.child.kill(signal);
    const goneAfterMs = until(() => !started.command.some(running), "the command's processes to end", 30_000).then(() => performance.now() - struckAt);
    goneAfterMs.catch(() => undefined); // awaited by the test, after the grant's check
    const next = await granted;
    cleanups.push(() => next.lock.release());
    return { ...started, next, goneAfterMs };
  }

  it('SIGKILL of fencekeeper: the command and its child are gone within --grace, before the next holder is granted', async () => {
    const { run, token, parent, next, goneAfterMs } = await strike('cli-kill', 'SIGKILL');
    expect(next.runningAtGrant).toEqual([]);
    expect(next.lock.token).toBeGreaterThan(token);
    // The lifeline closed with fencekeeper: SIGTERM at once, SIGKILL after the grace.
    expect(await goneAfterMs).toBeLessThan(GRACE_MS + SLACK_MS);
    // The command's parent (the supervisor) does not linger either.
    await until(() => !running(parent), "the command's parent to exit");
    expect((await run.done).signal).toBe('SIGKILL');
  });

  it('SIGSTOP of fencekeeper: the command and its child are gone by the step-down deadline plus --grace, before the next holder is granted', async () => {
    // Frozen, fencekeeper renews nothing and its pipe to the supervisor
    // stays open. Its last renewal was acknowledged before the SIGSTOP, so
    // its step-down deadline is at most SESSION_MS - MARGIN_MS after it.
    const { run, token, parent, next, goneAfterMs } = await strike('cli-stop', 'SIGSTOP');
    expect(next.runningAtGrant).toEqual([]);
    expect(next.lock.token).toBeGreaterThan(token);
    expect(await goneAfterMs).toBeLessThan(SESSION_MS - MARGIN_MS + GRACE_MS + SLACK_MS);
    // The supervisor's report waits in the pipe; fencekeeper reads it when it resumes.
    run.child.kill('SIGCONT');
    const result = await run.done;
    expect(result.code).toBe(137); // the shell, killed by SIGKILL: 128 + 9
    expect(result.stderr).toMatch(/lock .* lost/);
    await until(() => !running(parent), "the command's parent to exit");
  });

  it("SIGKILL of the command's supervisor: fencekeeper kills the command's process group, releases the lock and exits 70", async () => {
    const lock = uniqueLockName('cli-supervisor');
    const { run, command, parent } = await start(lock);
    process.kill(parent.pid, 'SIGKILL');
    const result = await run.exited;
    // Killed before fencekeeper released the lock and exited.
    expect(command.filter(running)).toEqual([]);
    expect(result.code).toBe(70);
    expect(run.stderr()).toContain("the command's supervisor ended unexpectedly (SIGKILL)");
    expect(await lockStatus(zk, lock)).toEqual({ name: lock, holder: null, waiters: [] });
  });

  it('processes the command leaves behind in its process group are stopped before the lock is released', async () => {
    const lock = uniqueLockName('cli-leftover');
    // The shell exits on its own (after a pause that lets the test see its
    // child); the sleep it started would run on without the lock.
    const run = cli(['run', lock, '--zookeeper', connect, '--', 'sh', '-c', 'sleep 1000 & echo "started $!"; sleep 2']);
    cleanups.push(() => {
      run.child.kill('SIGKILL');
    });
    await until(() => /started \d+/.test(run.stdout()), 'the command to start');
    const [, pid] = /started (\d+)/.exec(run.stdout()) as unknown as string[];
    const left = witness(Number(pid));
    cleanups.push(() => killSurvivors([left]));
    const { granted } = await nextHolder(lock, [left]);
    const result = await run.exited;
    const next = await granted;
    cleanups.push(() => next.lock.release());
    expect(result.code).toBe(0);
    expect(next.runningAtGrant).toEqual([]);
  });

  it("a supervisor that starts only after its first lease ran out never starts the command: exit 76, nothing ran", async () => {
    const lock = uniqueLockName('cli-late');
    const dir = mkdtempSync(join(tmpdir(), 'fk-late-supervisor-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    // The supervisor's own start-up stalls (a stalled machine, a slow disk)
    // for a whole session timeout: longer than the first lease, which ends
    // at most SESSION_MS - MARGIN_MS after fencekeeper spawns it. The lease
    // waits in the pipe and is read only once it has run out, however
    // loaded the machine. Preloaded through NODE_OPTIONS, which fencekeeper
    // passes on to the supervisor with the rest of its environment; only
    // the supervisor stalls.
    const preload = join(dir, 'stall-supervisor.cjs');
    writeFileSync(preload, `if (/supervisor\\.js$/.test(process.argv[1] || '')) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${SESSION_MS});\n`);
    const marker = join(dir, 'ran');
    const run = cli(
      [
        'run', lock, '--zookeeper', connect, '--session-timeout', String(SESSION_MS), '--safety-margin', String(MARGIN_MS),
        '--', 'sh', '-c', `touch '${marker}'`,
      ],
      { NODE_OPTIONS: `--require ${preload}` },
    );
    cleanups.push(() => {
      run.child.kill('SIGKILL');
    });
    const result = await run.done;
    expect(result.stderr).toContain('lost before sh could start');
    expect(result.code, result.stderr).toBe(ExitCode.lockLost);
    expect(existsSync(marker)).toBe(false);
    expect(await lockStatus(zk, lock)).toEqual({ name: lock, holder: null, waiters: [] });
  });
});
