/**
 * Run a command while a lock (or leadership) is held, through a supervisor
 * process (supervisor.ts) that is the command's parent and outlives us: we
 * lend it the lock's step-down deadline as a lease and renew it as replies
 * move the deadline; it stops the command when the lease runs out, when we
 * say the holding ended, or when our end of the pipe closes because we
 * died. So the command never runs on after we can no longer vouch for the
 * lock, whether we were killed, frozen, or simply saw the lock go.
 *
 * The command sees the token in FENCING_TOKEN and must pass it to every
 * write it makes: the resource does the refusing; stopping the command
 * narrows the window in which a stale holder keeps trying.
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { groupRuns } from './process-group.js';

const SUPERVISOR = fileURLToPath(new URL('./supervisor.js', import.meta.url));

/** How often we look whether the deadline moved: often enough to renew in time, however short the lease. */
const RENEW_CHECK_MAX_MS = 200;
const RENEW_CHECK_MIN_MS = 5;

/** What the supervisor needs to know of a holding. */
export interface Vouched {
  /** Aborts when the holding ends: lost, or released. */
  readonly signal: AbortSignal;
  /** The step-down instant on the performance.now() clock; a reply may move it later. */
  deadline(): number;
}

export interface SuperviseOptions {
  /** SIGTERM -> SIGKILL delay when the command is stopped for the lock's sake. */
  readonly graceMs: number;
  /** Called once, when the command is being stopped because the holding ended. */
  readonly onLoss: (reason: unknown) => void;
}

export interface SupervisedResult {
  /** The command's exit code, or 128 + signal number when a signal ended it. */
  readonly code: number;
  /** True when it was stopped (or never started) because the holding ended. */
  readonly stoppedForLoss: boolean;
  /** False when the holding ended before the command could start. */
  readonly started: boolean;
}

/** The command could not be started (ENOENT, EACCES): the message says why. */
export class CannotRunError extends Error {
  override readonly name = 'CannotRunError';
}

/** The supervisor died without reporting (someone killed it); the command's group was killed. */
export class SupervisorLostError extends Error {
  override readonly name = 'SupervisorLostError';
}

/** A performance.now() instant as CLOCK_MONOTONIC nanoseconds, the clock the supervisor shares with us. */
function monotonicNs(at: number): bigint {
  return process.hrtime.bigint() + BigInt(Math.floor((at - performance.now()) * 1e6));
}

export function supervise(command: readonly string[], env: NodeJS.ProcessEnv, holding: Vouched, options: SuperviseOptions): Promise<SupervisedResult> {
  const { graceMs, onLoss } = options;
  return new Promise((resolve, reject) => {
    // detached: the supervisor gets a session of its own, so whatever kills
    // our process group (a terminal's Ctrl-C, kill -9 -PGID) leaves it
    // standing to stop the command; a terminal's signals reach us and we
    // pass them on.
    const supervisor = spawn(process.execPath, [SUPERVISOR, String(graceMs), ...command], {
      env,
      // fd 3 carries our orders, fd 4 its reports (see supervisor.ts).
      stdio: ['inherit', 'inherit', 'inherit', 'pipe', 'pipe'],
      detached: true,
    });
    const orders = supervisor.stdio[3] as Writable;
    const reports = supervisor.stdio[4] as Readable;
    let group = 0;
    let code: number | null = null;
    let skipped = false;
    let failure: Error | null = null;
    let lossReported = false;
    let leasedUntil = -Infinity;
    let renewTimer: NodeJS.Timeout | undefined;

    const send = (line: string): void => {
      if (!orders.destroyed && orders.writable) orders.write(`${line}\n`);
    };
    const loss = (reason: unknown): void => {
      if (lossReported) return;
      lossReported = true;
      onLoss(reason);
    };

    const renew = (): void => {
      renewTimer = undefined;
      if (holding.signal.aborted) return;
      const deadline = holding.deadline();
      if (deadline > leasedUntil) {
        leasedUntil = deadline;
        send(`lease ${monotonicNs(deadline)}`);
      }
      const left = leasedUntil - performance.now();
      renewTimer = setTimeout(renew, Math.min(RENEW_CHECK_MAX_MS, Math.max(RENEW_CHECK_MIN_MS, left / 4)));
      renewTimer.unref();
    };
    const onAbort = (): void => {
      clearTimeout(renewTimer);
      loss(holding.signal.reason);
      send('stop');
    };

    // An operator's signal to us is meant for the command; we release after it exits.
    const forward = (signal: NodeJS.Signals) => (): void => send(`signal ${signal}`);
    const onInt = forward('SIGINT');
    const onTerm = forward('SIGTERM');
    const onHup = forward('SIGHUP');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
    process.on('SIGHUP', onHup);

    let buffered = '';
    reports.setEncoding('utf8');
    reports.on('data', (chunk: string) => {
      buffered += chunk;
      for (let nl = buffered.indexOf('\n'); nl !== -1; nl = buffered.indexOf('\n')) {
        const [verb, ...rest] = buffered.slice(0, nl).split(' ');
        buffered = buffered.slice(nl + 1);
        const value = rest.join(' ');
        if (verb === 'started') group = Number(value);
        else if (verb === 'failed') failure = new CannotRunError(value);
        else if (verb === 'stopping' && value === 'lease') loss(new Error('the step-down deadline passed with no renewal reaching the supervisor'));
        else if (verb === 'exited') code = Number(value);
        else if (verb === 'skipped') skipped = true;
      }
    });
    // Orders after the supervisor is gone fail with EPIPE; 'close' below tells what happened.
    orders.on('error', () => undefined);

    const cleanup = (): void => {
      clearTimeout(renewTimer);
      holding.signal.removeEventListener('abort', onAbort);
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
      process.off('SIGHUP', onHup);
    };
    supervisor.once('error', (error) => {
      cleanup();
      reject(error);
    });
    // 'close': the supervisor exited and its pipes are drained, so every report has been read.
    supervisor.once('close', (exitCode, signal) => {
      cleanup();
      if (failure !== null) return reject(failure);
      if (skipped) return resolve({ code: 0, stoppedForLoss: true, started: false });
      if (code !== null) return resolve({ code, stoppedForLoss: lossReported, started: true });
      // The supervisor died without a report (someone killed it): nothing
      // watches the command any more, so it must not run on. SIGKILL is
      // sent at once, but a process is gone only when the kernel has taken
      // it down (one in uninterruptible sleep dies when it leaves it): the
      // rejection, after which the lock is released, waits until no member
      // of the group runs, so the command never outlives the lock.
      const lost = new SupervisorLostError(`the command's supervisor ended unexpectedly (${signal ?? `exit ${String(exitCode)}`})${group !== 0 ? `; process group ${group} was killed` : ''}`);
      if (group === 0) return reject(lost);
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // already gone
      }
      const settle = (): void => {
        if (!groupRuns(group)) return reject(lost);
        setTimeout(settle, 10);
      };
      settle();
    });

    renew();
    if (holding.signal.aborted) onAbort();
    else holding.signal.addEventListener('abort', onAbort, { once: true });
  });
}
