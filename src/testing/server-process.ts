/**
 * A throwaway server process for a test: found on this machine, started on
 * a port of its own, polled until it answers (start-up is the one place a
 * test kit may poll: there is nothing to be told by yet), and stopped with
 * everything it wrote. Shared by the ZooKeeper and Redis starters.
 *
 * A server outlives a test that forgets to stop it only until the test
 * process exits: every running server is killed from a process 'exit'
 * handler, and the child is unref'd so that it never keeps a finished test
 * process alive. (A test process killed with SIGKILL cannot clean up; its
 * servers are then left to the machine.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ServerNotInstalledError, ServerStartError } from '../errors.js';

/** The full path of `command` (a bare name is looked up on PATH), or null if it is not an executable file. */
export function findExecutable(command: string, path = process.env.PATH ?? ''): string | null {
  const candidates = command.includes('/') ? [command] : path.split(delimiter).filter((dir) => isAbsolute(dir)).map((dir) => join(dir, command));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

/** `command`'s path, or a ServerNotInstalledError naming what to install. */
export function requireExecutable(command: string, install: string, what: string): string {
  const found = findExecutable(command);
  if (found === null) {
    const where = command.includes('/') ? `at ${command}` : 'on PATH';
    throw new ServerNotInstalledError(command, install, `${what}: ${command} not found ${where}; install ${install}`);
  }
  return found;
}

/** A TCP port nobody listens on right now (the kernel's pick). Another process may take it before the server binds: see launch's retries. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** A fresh private directory under the system's temporary one. */
export function temporaryDirectory(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

/** One request/answer over a fresh connection to 127.0.0.1:port: '' if nothing answers within ms. */
export function ask(port: number, text: string, ms: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    let answer = '';
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(done, ms);
    timer.unref();
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(text));
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('error', done);
    socket.on('close', done);
  });
}

const running = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Kill `child` (SIGKILL) if this process exits while it still runs. */
export function killOnExit(child: ChildProcess): void {
  running.add(child);
  child.once('exit', () => running.delete(child));
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Synchronous by nature: 'exit' runs no more I/O. SIGKILL, since nothing
  // would wait for a graceful stop.
  process.on('exit', () => {
    for (const c of running) c.kill('SIGKILL');
  });
}

/** What every throwaway server of the kit offers. */
export interface ThrowawayServer {
  readonly host: '127.0.0.1';
  readonly port: number;
  /** The server's process id. */
  readonly pid: number;
  /** Its temporary directory (configuration, data, log): removed by stop(). */
  readonly directory: string;
  /** Where its stdout and stderr go, inside `directory`. */
  readonly logFile: string;
  /** Stop the server (SIGTERM; SIGKILL after 10 s) and remove its directory. Idempotent. */
  stop(): Promise<void>;
  /** `await using server = await startZooKeeper()`: stops it (as stop()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void>;
}

export interface LaunchOptions {
  /** For messages: 'ZooKeeper', 'Redis'. */
  readonly what: string;
  readonly command: string;
  /** The arguments, given the port to listen on. */
  readonly args: (port: number) => readonly string[];
  /** Before each start: write what the server reads at start-up for this port (a config file). */
  readonly prepare?: (port: number) => Promise<void>;
  /** Where the server's stdout and stderr go (appended). */
  readonly logFile: string;
  /** The port to use; undefined: a free one, chosen again if another process took it first. */
  readonly port: number | undefined;
  /** Does the server on this port serve yet? Asked every 50 ms. */
  readonly ready: (port: number) => Promise<boolean>;
  readonly startTimeoutMs: number;
  readonly env?: NodeJS.ProcessEnv;
  /** The server's temporary directory (logFile inside it): removed once it has stopped, or failed to start. */
  readonly directory: string;
}

/** How many times a chosen port may be lost to another process before start() gives up. */
const PORT_ATTEMPTS = 3;

export async function launch(options: LaunchOptions): Promise<ThrowawayServer> {
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort());
    try {
      return await launchOn(port, options);
    } catch (error) {
      const lostPort = error instanceof ServerStartError && /address already in use/i.test(error.log);
      if (!lostPort || options.port !== undefined || attempt >= PORT_ATTEMPTS) {
        await rm(options.directory, { recursive: true, force: true });
        throw error;
      }
    }
  }
}

async function launchOn(port: number, options: LaunchOptions): Promise<ThrowawayServer> {
  await options.prepare?.(port);
  const log = openSync(options.logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(options.command, [...options.args(port)], { stdio: ['ignore', log, log], env: options.env ?? process.env });
  } finally {
    closeSync(log);
  }
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  let spawnError: Error | null = null;
  child.once('error', (error) => (spawnError = error));
  child.unref();
  killOnExit(child);

  const deadline = performance.now() + options.startTimeoutMs;
  for (;;) {
    if (spawnError !== null || child.exitCode !== null || child.signalCode !== null) {
      const how = spawnError !== null ? `could not be started (${(spawnError as Error).message})` : `exited (${child.exitCode ?? child.signalCode}) before it served`;
      throw new ServerStartError(`${options.what} on 127.0.0.1:${port} ${how}; its log, ${options.logFile}, ends with:\n${tail(options.logFile)}`, tail(options.logFile));
    }
    if (await options.ready(port)) break;
    if (performance.now() > deadline) {
      child.kill('SIGKILL');
      await exited;
      throw new ServerStartError(`${options.what} on 127.0.0.1:${port} did not serve within ${options.startTimeoutMs} ms; its log, ${options.logFile}, ends with:\n${tail(options.logFile)}`, tail(options.logFile));
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }

  let stopping: Promise<void> | null = null;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const grace = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(grace);
      }
      await rm(options.directory, { recursive: true, force: true });
    })());
  return { host: '127.0.0.1', port, pid: child.pid as number, directory: options.directory, logFile: options.logFile, stop, [Symbol.asyncDispose]: stop };
}

/** The last lines of a log file, for an error message. */
function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}
