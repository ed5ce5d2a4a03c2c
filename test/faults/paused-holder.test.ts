// The paused holder, with real processes: a child holds the lock (short
// session), is SIGSTOPped for longer than its session timeout (as a long GC
// pause would stop it), the server expires its session, another client
// acquires with a larger token, and the child is SIGCONTed. The first time
// the child's code runs after the resume it must read lock.held === false,
// and lock.signal must abort at once: by the time that first check returns,
// on the child's own clock (reason 'deadline'), without waiting for a word
// from the server.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireLock, lockStatus } from '../../src/sources/zookeeper/recipes/lock.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { testServers } from '../helpers/servers.js';
import { uniqueLockName } from '../helpers/unique.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const VITE_NODE = `${ROOT}node_modules/vite-node/vite-node.mjs`;
const FIXTURE = `${ROOT}test/fixtures/lock-holder.ts`;

interface Line {
  event: string;
  [key: string]: unknown;
}

/** The child's report lines, in order, with a way to wait for one. */
class ChildReports {
  readonly lines: Line[] = [];
  readonly stderr: string[] = [];
  #waiters: (() => void)[] = [];
  #exited = false;

  constructor(readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (text) => {
      try {
        this.lines.push(JSON.parse(text) as Line);
      } catch {
        this.stderr.push(`stdout: ${text}`);
      }
      this.#wake();
    });
    child.stderr!.setEncoding('utf8').on('data', (t: string) => this.stderr.push(t));
    child.on('exit', () => {
      this.#exited = true;
      this.#wake();
    });
  }

  #wake(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  async next(event: string): Promise<Line> {
    for (;;) {
      const found = this.lines.find((l) => l.event === event);
      if (found !== undefined) return found;
      if (this.#exited) throw new Error(`child exited before "${event}":\n${this.stderr.join('')}`);
      await new Promise<void>((r) => this.#waiters.push(r));
    }
  }
}

let server: string;
let zk: ZooKeeperClient;
let child: ChildProcess | null = null;

beforeAll(async () => {
  server = testServers().zkStandalone;
  zk = await ZooKeeperClient.connect({ connectString: server, sessionTimeoutMs: 4000 });
});
afterAll(async () => {
  if (child !== null && child.exitCode === null) {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }
  await zk.close();
});

describe('the paused holder', () => {
  it('after SIGSTOP past its session, the holder reads held === false at its first check and its signal aborts', async () => {
    const name = uniqueLockName('paused');
    child = spawn(process.execPath, [VITE_NODE, FIXTURE], {
      cwd: ROOT,
      env: { ...process.env, FK_CONNECT: server, FK_LOCK: name, FK_SESSION_MS: '2000' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const reports = new ChildReports(child);
    const ready = await reports.next('ready');
    expect(ready.held).toBe(true);
    const childToken = BigInt(ready.token as string);

    // t1: the pause. Another client queues behind the paused holder.
    child.stdin!.write('arm\n');
    await new Promise((r) => setTimeout(r, 50)); // let the child read "arm"
    child.kill('SIGSTOP');
    const successorPromise = acquireLock(zk, name);
    // t2/t3: the server expires the child's session; we acquire, with a larger token.
    const successor = await successorPromise;
    expect(successor.token > childToken).toBe(true);
    const status = await lockStatus(zk, name);
    expect(status.holder?.token).toBe(successor.token);

    // t4: the pause ends.
    const resumedAt = process.hrtime.bigint();
    child.kill('SIGCONT');
    const resumed = await reports.next('resumed');
    const aborted = await reports.next('aborted');
    await reports.next('done');

    expect(resumed.held).toBe(false);
    expect(aborted.reason).toBe('deadline');
    // The pause is what ended the holding: the abort came after the resume
    // (hr is CLOCK_MONOTONIC, shared by both processes), not before the stop.
    expect(BigInt(aborted.hr as string) > resumedAt, 'the signal aborted before the pause (a loaded machine missed pings?)').toBe(true);
    // At once: the abort ran before the loop's first check after the resume
    // returned (from the step-down timer, or from that very read of held),
    // not some turn of the event loop later.
    expect(aborted.checkedSinceResume, 'the signal aborted only after the first check following the resume').toBe(false);
    expect(reports.lines.findIndex((l) => l.event === 'aborted')).toBeLessThan(reports.lines.findIndex((l) => l.event === 'resumed'));
    const ms = (hr: unknown): number => Number(BigInt(hr as string) - resumedAt) / 1e6;
    console.log(
      `paused holder: SIGCONT -> signal aborted ${ms(aborted.hr).toFixed(2)} ms, -> first held check ${ms(resumed.hr).toFixed(2)} ms ` +
        `(held=${String(resumed.held)}, abort ran ${aborted.checkedSinceResume ? 'after' : 'before'} the loop's first check; gap seen ${String(resumed.gapMs)} ms)`,
    );
    await successor.release();
    await new Promise((r) => child!.once('exit', r));
  });
});
