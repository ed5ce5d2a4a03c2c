/**
 * Run a command while a lock (or leadership) is held, and stop it when the
 * holding ends: SIGTERM at once, SIGKILL after a grace period. The command
 * sees the token in FENCING_TOKEN and must pass it to every write it makes
 * (the resource does the refusing; stopping the command only narrows the
 * window in which a stale holder keeps trying).
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:os';

export interface SupervisedResult {
  /** The command's exit code, or 128 + signal number when a signal ended it. */
  readonly code: number;
  /** True when we stopped it because the holding ended. */
  readonly stoppedForLoss: boolean;
}

export function supervise(
  command: readonly string[],
  env: NodeJS.ProcessEnv,
  holding: AbortSignal,
  graceMs: number,
  onLoss: (reason: unknown) => void,
): Promise<SupervisedResult> {
  const [file, ...args] = command as [string, ...string[]];
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: 'inherit', env });
    let stoppedForLoss = false;
    let killTimer: NodeJS.Timeout | undefined;

    const stop = (): void => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      killTimer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    };
    const onAbort = (): void => {
      stoppedForLoss = true;
      onLoss(holding.reason);
      stop();
    };
    // Forward the signals an operator sends us; we release after the child exits.
    const forward = (signal: NodeJS.Signals) => (): void => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    };
    const onInt = forward('SIGINT');
    const onTerm = forward('SIGTERM');
    const onHup = forward('SIGHUP');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
    process.on('SIGHUP', onHup);
    if (holding.aborted) onAbort();
    else holding.addEventListener('abort', onAbort, { once: true });

    const cleanup = (): void => {
      clearTimeout(killTimer);
      holding.removeEventListener('abort', onAbort);
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
      process.off('SIGHUP', onHup);
    };
    child.once('error', (error) => {
      cleanup();
      reject(error);
    });
    child.once('exit', (code, signal) => {
      cleanup();
      const signo = signal === null ? 0 : (constants.signals[signal] ?? 0);
      resolve({ code: code ?? 128 + signo, stoppedForLoss });
    });
  });
}
