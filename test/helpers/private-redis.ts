// A Redis node of a test's own (not the shared FK_REDLOCK set), on a port
// of the test's range, that the test can fault for real: SIGSTOP/SIGCONT,
// SIGKILL, and a restart from its append-only file (appendfsync always, as
// test/servers/redis.sh runs its nodes). Unlike src/testing's startRedis, it
// keeps its directory across a kill, so a restart comes back with its data.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ask, killOnExit } from '../../src/testing/server-process.js';

export class PrivateRedis {
  readonly port: number;
  readonly #directory: string;
  readonly #args: readonly string[];
  #child: ChildProcess | null = null;
  #paused = false;

  private constructor(port: number, directory: string, args: readonly string[]) {
    this.port = port;
    this.#directory = directory;
    this.#args = args;
  }

  static async start(port: number, args: readonly string[] = []): Promise<PrivateRedis> {
    const node = new PrivateRedis(port, await mkdtemp(join(tmpdir(), 'fk-private-redis-')), args);
    await node.restart();
    return node;
  }

  get pid(): number {
    if (this.#child?.pid === undefined) throw new Error(`redis on ${this.port} is not running`);
    return this.#child.pid;
  }

  get running(): boolean {
    return this.#child !== null;
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** Start it (again) from the data in its directory, and wait until it answers PING. */
  async restart(): Promise<void> {
    if (this.#child !== null) return;
    const child = spawn(
      'redis-server',
      [
        '--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.#directory, '--daemonize', 'no',
        '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction',
        ...this.#args,
      ],
      { stdio: 'ignore' },
    );
    child.unref();
    killOnExit(child);
    this.#child = child;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    for (let i = 0; ; i++) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`redis on ${this.port} exited at start (port taken?)`);
      // A node still loading its AOF answers -LOADING: not ready yet.
      if ((await ask(this.port, 'PING\r\n', 1000)).startsWith('+PONG')) break;
      if (i > 400) {
        child.kill('SIGKILL');
        await exited;
        this.#child = null;
        throw new Error(`redis on ${this.port} did not answer PING within 20 s`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** SIGSTOP, synchronously: callable from inside a proxy's observe callback. */
  pause(): void {
    if (this.#child === null || this.#paused) return;
    process.kill(this.pid, 'SIGSTOP');
    this.#paused = true;
  }

  resume(): void {
    if (this.#child === null || !this.#paused) return;
    process.kill(this.pid, 'SIGCONT');
    this.#paused = false;
  }

  /** SIGKILL, and wait until it is gone (its port closed). */
  async kill(): Promise<void> {
    const child = this.#child;
    if (child === null) return;
    const exited = new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve())));
    // Referenced while we wait: an unref'd child's exit alone would not keep this process alive for it.
    child.ref();
    child.kill('SIGKILL');
    await exited;
    this.#child = null;
    this.#paused = false;
  }

  /** Kill it and remove its data. */
  async stop(): Promise<void> {
    await this.kill();
    await rm(this.#directory, { recursive: true, force: true });
  }
}
