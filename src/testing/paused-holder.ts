/**
 * The paused holder, for real: a lock holder in a process of its own, frozen
 * with SIGSTOP for longer than its session (as a long garbage-collection
 * pause or a stalled VM freezes a process), so that the lock service expires
 * it and grants the lock to someone else, then thawed with SIGCONT. What the
 * holder does when it wakes, still believing it holds the lock, is what a
 * test of fencing must see refused.
 *
 * The holder is a Node module of the test's own (for TypeScript, pass your
 * loader in `execArgv`). It reports to the test over the IPC channel:
 *
 *   // holder.mjs
 *   import { ZooKeeperClient, acquireLock } from 'fencekeeper';
 *   import { reportHolding, reportToTest } from 'fencekeeper/testing';
 *   const zk = await ZooKeeperClient.connect({ connectString: process.env.ZOOKEEPER, sessionTimeoutMs: 2000 });
 *   const lock = await acquireLock(zk, 'jobs/reindex');
 *   reportHolding(lock);
 *   ...                                        // work; write with lock.token
 *
 *   // the test
 *   const holder = await spawnHolder('holder.mjs', { env: { ZOOKEEPER } });
 *   const { token } = await holder.holding;
 *   await holder.pausePastSession(zk);         // SIGSTOP until ZooKeeper removed its node
 *   const next = await acquireLock(zk, 'jobs/reindex');   // a newer holder, a larger token
 *   holder.resume();                           // SIGCONT: the old holder writes with `token`
 *
 * Messages travel with the 'advanced' serialization (structured clone), so
 * bigint tokens arrive as bigints.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { ClientClosedError, FencekeeperError, InvalidArgumentError } from '../errors.js';
import type { FencingToken, Lock } from '../index.js';
import type { ZooKeeperClient } from '../sources/zookeeper/index.js';
import { killOnExit } from './server-process.js';

/** What reportHolding() tells the test. */
export interface HolderReport {
  readonly name: string;
  readonly token: FencingToken;
  /** A ZooKeeper lock's queue node (what pausePastSession() watches). */
  readonly path?: string;
}

/** How a spawned holder process ended: its exit code, or the signal that ended it. */
export interface HolderExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** How spawnHolder starts the holder module: its arguments, working directory and environment. */
export interface SpawnHolderOptions {
  readonly args?: readonly string[];
  /** The holder's environment. Default: this process's. */
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** Node flags for the holder, e.g. a TypeScript loader. Default: none. */
  readonly execArgv?: readonly string[];
}

/** How long pausePastSession waits for the server to remove the frozen holder's node. */
export interface PausePastSessionOptions {
  /** Give up (resuming the holder) if its node is still there after this long. Default 60000 ms. */
  readonly timeoutMs?: number;
}

/**
 * A lock holder in a process of its own (spawnHolder): its token once it
 * reports holding, pausePastSession() to freeze it with SIGSTOP until its
 * session is gone, resume(), and its exit.
 */
export interface HolderProcess {
  readonly pid: number;
  /** The first reportHolding() of the holder; rejects if it exits before. */
  readonly holding: Promise<HolderReport>;
  /** What the holder sent with reportToTest(), in order. */
  readonly messages: readonly unknown[];
  /** The first message (received already, or later) that `match` accepts; rejects if the holder exits first. */
  next(match?: (message: unknown) => boolean): Promise<unknown>;
  /** Send the holder a message (its `process.on('message')` gets it; a stopped holder reads it once resumed). */
  send(message: unknown): void;
  /** SIGSTOP; resolves once the kernel reports the process stopped (on Linux; elsewhere once sent). */
  pause(): Promise<void>;
  /** SIGCONT. */
  resume(): void;
  /**
   * Pause the holder and resolve once ZooKeeper has deleted the node it
   * reported holding: its session has expired (nothing else removes the
   * node of a stopped holder, unless someone deletes it by hand). The
   * holder stays stopped; resume() it when the test is ready.
   */
  pausePastSession(zk: ZooKeeperClient, options?: PausePastSessionOptions): Promise<void>;
  /** Resume it if paused, SIGTERM, SIGKILL after 5 s; resolves with how it ended. */
  stop(): Promise<HolderExit>;
  /** `await using holder = spawnHolder(...)`: stops it (as stop()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void>;
  readonly exited: Promise<HolderExit>;
  /** What it printed so far. */
  stdout(): string;
  /** What the holder process wrote to stderr so far. */
  stderr(): string;
}

/** The envelope that tells the kit's messages from anything else on the channel. */
const KIT = 'fencekeeper/testing';
type Envelope = { readonly [KIT]: 'holding'; readonly report: HolderReport } | { readonly [KIT]: 'message'; readonly message: unknown };

/** In the holder: tell the test it holds `lock` (name, token, and a ZooKeeper lock's node). */
export function reportHolding(lock: Pick<Lock, 'name' | 'token'> & { readonly path?: string }): void {
  const report: HolderReport = { name: lock.name, token: lock.token, ...(typeof lock.path === 'string' && { path: lock.path }) };
  send({ [KIT]: 'holding', report });
}

/** In the holder: send the test anything structured clone can carry (a write's outcome, a token). */
export function reportToTest(message: unknown): void {
  send({ [KIT]: 'message', message });
}

/** Set in the holder's environment by spawnHolder(): its IPC channel leads to a test that listens. */
const HOLDER_ENV = 'FENCEKEEPER_TESTING_HOLDER';

function send(envelope: Envelope): void {
  // process.send alone is not enough: a test runner's own worker has a
  // channel too, to the runner, which must not get these messages.
  if (typeof process.send !== 'function' || process.env[HOLDER_ENV] !== '1') {
    throw new InvalidArgumentError("fencekeeper/testing: this process was not started by spawnHolder(), so there is no test to report to");
  }
  process.send(envelope);
}

/** Start `modulePath` as a holder process (node's fork, with an IPC channel). */
export async function spawnHolder(modulePath: string, options: SpawnHolderOptions = {}): Promise<HolderProcess> {
  if (typeof modulePath !== 'string' || modulePath === '') throw new InvalidArgumentError('spawnHolder(): modulePath must be the path of a Node module');
  const child = fork(modulePath, [...(options.args ?? [])], {
    execArgv: [...(options.execArgv ?? [])],
    env: { ...(options.env ?? process.env), [HOLDER_ENV]: '1' },
    ...(options.cwd !== undefined && { cwd: options.cwd }),
    serialization: 'advanced',
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  killOnExit(child);
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', () => resolve());
    child.once('error', reject);
  });
  return new Holder(child);
}

class Holder implements HolderProcess {
  readonly pid: number;
  readonly holding: Promise<HolderReport>;
  readonly messages: unknown[] = [];
  readonly exited: Promise<HolderExit>;
  readonly #child: ChildProcess;
  #stdout = '';
  #stderr = '';
  #exit: HolderExit | null = null;
  #waiters = new Set<() => void>();
  #report: HolderReport | null = null;

  constructor(child: ChildProcess) {
    this.#child = child;
    this.pid = child.pid as number;
    child.stdout?.setEncoding('utf8').on('data', (text: string) => (this.#stdout += text));
    child.stderr?.setEncoding('utf8').on('data', (text: string) => (this.#stderr += text));
    this.exited = new Promise((resolve) => {
      // 'close', not 'exit': the child's stdio is read to its end first, so an
      // error that quotes its stderr (a holder that exited before it held)
      // has what it wrote, not an empty string.
      child.once('close', (code, signal) => {
        this.#exit = { code, signal };
        this.#wake();
        resolve(this.#exit);
      });
    });
    child.on('message', (envelope: unknown) => {
      if (typeof envelope !== 'object' || envelope === null || !(KIT in envelope)) return;
      const e = envelope as Envelope;
      if (e[KIT] === 'holding') this.#report ??= e.report;
      else this.messages.push(e.message);
      this.#wake();
    });
    this.holding = this.#until(() => this.#report ?? undefined, 'reported holding a lock');
    this.holding.catch(() => undefined); // a test that never asks must not see an unhandled rejection
  }

  next(match: (message: unknown) => boolean = () => true): Promise<unknown> {
    return this.#until(() => {
      const found = this.messages.find(match);
      return found === undefined ? undefined : { found };
    }, 'sent the message waited for').then((box) => box.found);
  }

  send(message: unknown): void {
    if (this.#exit !== null || !this.#child.connected) throw new ClientClosedError(`the holder (pid ${this.pid}) has exited or closed its channel`);
    this.#child.send(message as Parameters<ChildProcess['send']>[0]);
  }

  async pause(): Promise<void> {
    if (this.#exit !== null) throw new ClientClosedError(`the holder (pid ${this.pid}) has exited: ${describe(this.#exit)}`);
    this.#child.kill('SIGSTOP');
    // SIGSTOP is delivered asynchronously: wait until the kernel shows the stop.
    for (let i = 0; i < 200 && processState(this.pid) === 'running'; i++) await new Promise((resolve) => setTimeout(resolve, 5));
  }

  resume(): void {
    if (this.#exit === null) this.#child.kill('SIGCONT');
  }

  async pausePastSession(zk: ZooKeeperClient, options: PausePastSessionOptions = {}): Promise<void> {
    const report = await this.holding;
    const path = report.path;
    if (path === undefined) {
      throw new InvalidArgumentError('pausePastSession(): the holder reported no ZooKeeper node: reportHolding() it a ZooKeeper lock (acquireLock), or pause() and wait for the lock to be granted again');
    }
    const timeoutMs = options.timeoutMs ?? 60_000;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new InvalidArgumentError(`pausePastSession(): timeoutMs must be a positive integer, got ${String(timeoutMs)}`);
    await this.pause();
    let timer: NodeJS.Timeout | undefined;
    let wake: (() => void) | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), timeoutMs);
    });
    try {
      for (;;) {
        const deleted = new Promise<'changed'>((resolve) => (wake = () => resolve('changed')));
        if ((await zk.exists(path, { watch: () => wake?.() })) === null) return;
        if ((await Promise.race([deleted, late])) === 'late') {
          this.resume();
          throw new FencekeeperError('LOCK_TIMEOUT', `pausePastSession(): the holder's node ${path} was still there ${timeoutMs} ms after the pause (resumed it): is its session timeout longer than that?`);
        }
      }
    } finally {
      clearTimeout(timer);
    }
  }

  async stop(): Promise<HolderExit> {
    if (this.#exit !== null) return this.#exit;
    this.#child.kill('SIGCONT');
    this.#child.kill('SIGTERM');
    const kill = setTimeout(() => this.#child.kill('SIGKILL'), 5000);
    try {
      return await this.exited;
    } finally {
      clearTimeout(kill);
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  stdout(): string {
    return this.#stdout;
  }

  stderr(): string {
    return this.#stderr;
  }

  /** Resolves with what `find` returns once it returns something; rejects if the holder exits first. */
  async #until<T>(find: () => T | undefined, what: string): Promise<T> {
    for (;;) {
      const found = find();
      if (found !== undefined) return found;
      if (this.#exit !== null) {
        throw new ClientClosedError(`the holder (pid ${this.pid}) exited (${describe(this.#exit)}) before it ${what}; its stderr:\n${this.#stderr.trimEnd()}`);
      }
      await new Promise<void>((resolve) => this.#waiters.add(resolve));
    }
  }

  #wake(): void {
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const w of waiters) w();
  }
}

function describe(exit: HolderExit): string {
  return exit.signal !== null ? `killed by ${exit.signal}` : `exit code ${String(exit.code)}`;
}

/** 'stopped', 'running' (any other state, including sleeping), or 'unknown' where /proc is not there. */
function processState(pid: number): 'stopped' | 'running' | 'unknown' {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return 'unknown';
  }
  // "pid (comm) state ...": comm may hold spaces and parentheses.
  const state = text.slice(text.lastIndexOf(')') + 2, text.lastIndexOf(')') + 3);
  return state === 'T' || state === 't' ? 'stopped' : 'running';
}
