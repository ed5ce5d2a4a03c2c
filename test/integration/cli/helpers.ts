// The `fencekeeper` bin as an operator runs it: the built file in a real
// process. Shared by the CLI's test files.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const BIN = fileURLToPath(new URL('../../../dist/src/cli/main.js', import.meta.url));

export interface Run {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface Running {
  readonly child: ChildProcess;
  /** Resolves when the process exited and its stdout and stderr closed (a leftover child holding them delays it). */
  readonly done: Promise<Run>;
  /** Resolves when the process exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stdout(): string;
  stderr(): string;
}

export function assertBuilt(): void {
  if (!existsSync(BIN)) throw new Error(`${BIN} is missing: run 'npm run build' first (npm test does)`);
}

/** Start `fencekeeper <args>` with the test's environment plus `env`. */
export function cli(args: readonly string[], env: NodeJS.ProcessEnv = {}): Running {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr?.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const done = new Promise<Run>((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, done, exited, stdout: () => stdout, stderr: () => stderr };
}

/** The run's result, or a failed test (and the child SIGKILLed) if it is still running after `livenessMs`. */
export async function finishedWithin(run: Running, livenessMs: number): Promise<Run> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      run.child.kill('SIGKILL');
      reject(new Error(`still running after ${livenessMs} ms; stderr so far: ${run.stderr()}`));
    }, livenessMs);
  });
  try {
    return await Promise.race([run.done, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A process as the test first saw it: its pid and its start time (field 22
 * of /proc/<pid>/stat), so a recycled pid is not mistaken for it.
 */
export interface Witness {
  readonly pid: number;
  readonly startTime: string;
}

function stat(pid: number): { state: string; parent: number; startTime: string } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0] as string, parent: Number(fields[1]), startTime: fields[19] as string };
}

export function witness(pid: number): Witness {
  const s = stat(pid);
  if (s === null) throw new Error(`process ${pid} is not running`);
  return { pid, startTime: s.startTime };
}

/**
 * True while the process still runs. A zombie does not run: it has exited
 * and waits to be reaped (on this machine PID 1 never reaps orphans, so an
 * orphan's zombie stays).
 */
export function running(w: Witness): boolean {
  const s = stat(w.pid);
  return s !== null && s.startTime === w.startTime && s.state !== 'Z';
}

/** SIGKILL whatever of `witnesses` still runs (test cleanup). */
export function killSurvivors(witnesses: readonly Witness[]): void {
  for (const w of witnesses) {
    if (!running(w)) continue;
    try {
      process.kill(w.pid, 'SIGCONT');
      process.kill(w.pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

/**
 * What to pass in a CLI run's environment so that stuckReport() can ask it
 * for a Node diagnostic report (SIGUSR2 writes one into `dir`).
 */
export function reportOnSignal(dir: string): NodeJS.ProcessEnv {
  return { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --report-on-signal --report-signal=SIGUSR2 --report-directory=${dir}`.trim() };
}

/**
 * For a run that did not end when it should: its process tree (the CLI, the
 * supervisor it started, the command: pid, state, command line), and, from
 * a Node diagnostic report of the CLI (started with reportOnSignal(dir)),
 * the handles its event loop still waits on (sockets with their ends, pipes,
 * child processes, timers). What a hang seen once in a long run needs to
 * say where it is.
 */
export async function stuckReport(pid: number, dir: string): Promise<string> {
  const lines: string[] = [];
  const parentOf = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const s = stat(Number(entry)); // null: gone meanwhile
    if (s !== null) parentOf.set(Number(entry), s.parent);
  }
  const under = (p: number): boolean => {
    for (let at: number | undefined = p; at !== undefined && at > 1; at = parentOf.get(at)) if (at === pid) return true;
    return false;
  };
  for (const p of [...parentOf.keys()].filter(under).sort((a, b) => a - b)) {
    const s = stat(p);
    let cmd = '';
    try {
      cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').join(' ').trim();
    } catch {
      // gone meanwhile
    }
    lines.push(`process ${p} (parent ${parentOf.get(p)}) ${s?.state ?? '?'}: ${cmd.slice(0, 200)}`);
  }
  try {
    process.kill(pid, 'SIGUSR2');
    let file: string | undefined;
    for (let i = 0; i < 30 && file === undefined; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      file = readdirSync(dir).find((f) => f.startsWith('report.') && f.endsWith('.json'));
    }
    if (file === undefined) {
      lines.push('no diagnostic report was written');
    } else {
      const report = JSON.parse(readFileSync(`${dir}/${file}`, 'utf8')) as { libuv?: { type: string; is_active?: boolean; is_referenced?: boolean; details?: string; localEndpoint?: unknown; remoteEndpoint?: unknown }[] };
      for (const h of report.libuv ?? []) {
        if (h.is_active !== true) continue;
        lines.push(`handle ${h.type}${h.is_referenced === false ? ' (unref)' : ''} ${JSON.stringify({ local: h.localEndpoint, remote: h.remoteEndpoint, details: h.details })}`);
      }
    }
  } catch (error) {
    lines.push(`no report: ${(error as Error).message}`);
  }
  return lines.join('\n');
}
