/**
 * The command's parent while `fencekeeper run` (or `elect`) holds the lock:
 * a small process of its own, so that the command is stopped even when
 * fencekeeper cannot stop it itself, because it was killed (SIGKILL, the
 * OOM killer) or is frozen (SIGSTOP, a debugger, a stalled machine).
 *
 * fencekeeper lends it a lease, "the lock is held until T", and renews it
 * each time a ZooKeeper reply moves the lock's step-down deadline. T is an
 * instant on CLOCK_MONOTONIC as process.hrtime.bigint() reads it (libuv's
 * uv_hrtime: clock_gettime(CLOCK_MONOTONIC) on Linux), a clock that every
 * process on the machine shares, so T means the same instant here as in
 * fencekeeper. (performance.now() would not do: it counts from each
 * process's own start.)
 *
 * The command is stopped, SIGTERM to its process group and SIGKILL --grace
 * later, at the first of: T passes with no newer lease (fencekeeper stalled,
 * or the lock's own deadline passed); fencekeeper says the holding ended;
 * the pipe from fencekeeper closes (fencekeeper died: a pipe closes with its
 * last holder, whatever killed it). The command leads a process group (and
 * session) of its own, so the stop reaches every process it started that
 * stayed in it; and processes the command leaves behind when it exits are
 * stopped the same way before we report, since fencekeeper releases the
 * lock on that report.
 *
 * Messages, one line each, from fencekeeper on fd 3 and to it on fd 4 (one
 * pipe per direction: a write that fails because the reader is gone must not
 * discard what it left unread on the other one):
 *   from fencekeeper  lease <ns>        held until <ns> (CLOCK_MONOTONIC, nanoseconds)
 *                     stop              the holding ended: stop the command
 *                     signal <NAME>     an operator's signal, passed on to the command's group
 *   to fencekeeper    started <pid>     the command runs, leading process group <pid>
 *                     failed <message>  the command could not be started
 *                     stopping <why>    lease | lifeline | holding: we stop it for the lock's sake
 *                     exited <code>     its exit code (128 + n for signal n), once its group is gone
 *                     skipped           the holding ended before the command could start
 * argv: <grace ms> <file> [args...]. The command's environment is ours.
 *
 * Built-in modules only: this process starts while the lease runs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Socket } from 'node:net';
import { constants } from 'node:os';
import { groupRuns as groupRunsOf } from './process-group.js';

type StopReason = 'lease' | 'lifeline' | 'holding' | 'leftovers';

const [graceText, file, ...args] = process.argv.slice(2);
const graceMs = Number(graceText);
if (file === undefined || !Number.isInteger(graceMs) || graceMs < 0) {
  process.stderr.write('fencekeeper supervisor: usage: supervisor.js <grace ms> <file> [args...] (started by fencekeeper run)\n');
  process.exit(64);
}

// Opened before the command is spawned: libuv marks the descriptors
// close-on-exec when it adopts them, so the command does not inherit our
// ends of the pipes (it would keep each side from seeing the other go).
const orders = new Socket({ fd: 3, readable: true, writable: false });
const reports = new Socket({ fd: 4, readable: false, writable: true });
let leaseEnd: bigint | null = null;
let child: ChildProcess | null = null;
let group = 0;
let leaderCode: number | null = null;
let stopping: StopReason | null = null;
let leaseTimer: NodeJS.Timeout | undefined;
let killTimer: NodeJS.Timeout | undefined;
let reapTimer: NodeJS.Timeout | undefined;
let finished = false;

function send(line: string): void {
  if (!reports.destroyed && reports.writable) reports.write(`${line}\n`);
}

function signalGroup(signal: NodeJS.Signals): void {
  if (group === 0) return;
  try {
    process.kill(-group, signal);
  } catch {
    // ESRCH: nobody is left in the group.
  }
}

function groupRuns(): boolean {
  return groupRunsOf(group);
}

function finish(report: string | null): void {
  if (finished) return;
  finished = true;
  clearTimeout(leaseTimer);
  clearTimeout(killTimer);
  clearTimeout(reapTimer);
  if (report !== null) send(report);
  // Exit once the report is with the kernel (a frozen fencekeeper reads it when it resumes).
  if (!reports.destroyed && reports.writable) reports.end(() => process.exit(0));
  else process.exit(0);
}

function stop(why: StopReason): void {
  if (stopping !== null) return;
  stopping = why;
  clearTimeout(leaseTimer);
  if (child === null) {
    // Not started yet: then never, nothing may run without the lock.
    finish(why === 'lifeline' ? null : 'skipped');
    return;
  }
  if (why !== 'leftovers') send(`stopping ${why}`);
  if (graceMs === 0) {
    signalGroup('SIGKILL');
  } else {
    signalGroup('SIGTERM');
    killTimer = setTimeout(() => signalGroup('SIGKILL'), graceMs);
  }
  if (leaderCode !== null) awaitGroup();
}

/** After the command itself exited: report once nobody of its group runs. */
function awaitGroup(): void {
  clearTimeout(reapTimer);
  if (!groupRuns()) {
    finish(`exited ${leaderCode ?? 0}`);
    return;
  }
  // Something the command started is still in its group. Stop it (unless a
  // stop is under way) and look again shortly; only SIGKILL is sure, and a
  // process in uninterruptible sleep dies when it leaves it: until then the
  // lock stays held (or, lost, stays unreported), which is the safe side.
  stop('leftovers');
  reapTimer = setTimeout(awaitGroup, 20);
}

function armLease(): void {
  clearTimeout(leaseTimer);
  if (stopping !== null || leaseEnd === null) return;
  const leftNs = leaseEnd - process.hrtime.bigint();
  if (leftNs <= 0n) {
    stop('lease');
    return;
  }
  // Timers may fire a little early by the nanosecond clock: this re-checks.
  leaseTimer = setTimeout(armLease, Number(leftNs / 1_000_000n) + 1);
}

function start(): void {
  let spawned: ChildProcess;
  try {
    // detached: setsid(), so the command leads a new session and process group.
    spawned = spawn(file as string, args, { stdio: 'inherit', detached: true });
  } catch (error) {
    finish(`failed ${oneLine(error)}`);
    return;
  }
  if (spawned.pid === undefined) {
    // Not started (ENOENT, EACCES): the reason follows as an 'error' event.
    spawned.once('error', (error) => finish(`failed ${oneLine(error)}`));
    return;
  }
  child = spawned;
  group = spawned.pid;
  spawned.on('error', () => undefined); // later errors are about signals we send; the group is signalled directly
  send(`started ${group}`);
  spawned.once('exit', (code, signal) => {
    const signo = signal === null ? 0 : (constants.signals[signal] ?? 0);
    leaderCode = code ?? 128 + signo;
    awaitGroup();
  });
}

function oneLine(error: unknown): string {
  return ((error as Error)?.message ?? String(error)).replace(/\s+/g, ' ');
}

function onMessage(line: string): void {
  const [verb, value] = line.split(' ', 2);
  if (verb === 'lease' && value !== undefined && /^[0-9]+$/.test(value)) {
    const until = BigInt(value);
    if (leaseEnd === null || until > leaseEnd) leaseEnd = until;
    if (child === null && stopping === null) {
      // The first lease may arrive after the lock's deadline (a slow start):
      // then the command must not start at all.
      if (leaseEnd <= process.hrtime.bigint()) stop('lease');
      else start();
    }
    armLease();
  } else if (verb === 'stop') {
    stop('holding');
  } else if (verb === 'signal' && value !== undefined && Object.hasOwn(constants.signals, value)) {
    signalGroup(value as NodeJS.Signals);
  }
}

let buffered = '';
orders.setEncoding('utf8');
orders.on('data', (chunk: string) => {
  buffered += chunk;
  for (let nl = buffered.indexOf('\n'); nl !== -1; nl = buffered.indexOf('\n')) {
    const line = buffered.slice(0, nl);
    buffered = buffered.slice(nl + 1);
    onMessage(line);
  }
});
// The lifeline: fencekeeper's end closes when fencekeeper exits, however it dies.
const lifeline = (): void => {
  if (!finished) stop('lifeline');
};
orders.on('end', lifeline);
orders.on('close', lifeline);
orders.on('error', lifeline);
reports.on('error', () => undefined); // fencekeeper is gone: the lifeline says so

// We run in a session of our own, so a terminal's signals do not reach us;
// a signal sent to us directly is passed on, as fencekeeper passes on its own.
for (const name of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(name, () => signalGroup(name));
