/**
 * `fencekeeper run <lock> -- cmd` and `fencekeeper elect <name> -- cmd`:
 * hold the lock (or leadership) while cmd runs under a supervisor
 * (../supervise.ts), release it when cmd exits, exit with cmd's code.
 *
 * Every mistake an operator can make on the command line is found before
 * connecting (so it exits 64 whether or not ZooKeeper is up), except the
 * ones that depend on the session timeout the server negotiates: those are
 * checked right after connecting, before anything is acquired.
 */
import { formatSequencer, formatToken, LockTimeoutError } from '../../index.js';
import { UsageError, nonNegativeInt, parse, positiveInt, splitCommand } from '../args.js';
import { ExitCode } from '../exit-codes.js';
import { HELP } from '../help.js';
import { connectUnlessInterrupted, listenForInterrupt } from '../interrupt.js';
import type { Holding, Kind, LockService } from '../lock-service.js';
import { LOCK_SERVICE_OPTIONS, lockServiceFrom } from '../services/index.js';
import { CannotRunError, SupervisorLostError, supervise } from '../supervise.js';
import { err, out } from '../output.js';

export async function runOrElect(command: 'run' | 'elect', argv: readonly string[]): Promise<number> {
  const kind: Kind = command === 'run' ? 'lock' : 'election';
  const { own, command: cmd } = splitCommand(argv);
  const { values, positionals } = parse(own, {
    ...LOCK_SERVICE_OPTIONS,
    timeout: { type: 'string' },
    grace: { type: 'string' },
    'safety-margin': { type: 'string' },
    id: { type: 'string' },
    'lock-delay': { type: 'string' },
  });
  if (values.help) {
    out(HELP[command]);
    return ExitCode.ok;
  }
  const name = positionals[0];
  if (name === undefined || positionals.length !== 1) throw new UsageError(`${command} needs exactly one ${kind} name before --`);
  if (cmd.length === 0) throw new UsageError(`${command} needs a command after --`);
  if (command === 'elect' && values.timeout !== undefined) throw new UsageError('elect has no --timeout: a candidate waits until elected');
  if (command === 'run' && values.id !== undefined) throw new UsageError('--id is an elect option');
  if (command === 'elect' && values['lock-delay'] !== undefined) throw new UsageError('--lock-delay is a run option: an election has no lock-delay');
  const timeoutMs = positiveInt(values.timeout as string | undefined, '--timeout');
  const requestedGraceMs = nonNegativeInt(values.grace as string | undefined, '--grace');
  const requestedMarginMs = nonNegativeInt(values['safety-margin'] as string | undefined, '--safety-margin');
  const lockDelayMs = nonNegativeInt(values['lock-delay'] as string | undefined, '--lock-delay');
  const address = lockServiceFrom(values);
  address.checkName(kind, name);
  if (lockDelayMs !== undefined && address.lockDelay !== true) {
    throw new UsageError(`--lock-delay needs ZooKeeper (zookeeper:// or --zookeeper): ${address.description} has no lock-delay`);
  }

  // From here on a SIGINT or SIGTERM is ours until the lock is held: see ../interrupt.ts.
  const interruption = listenForInterrupt();
  // --timeout bounds the whole wait, the connect included: a lock service
  // that does not answer must not hold a run for its own connect timeout.
  const started = performance.now();
  const deadline = timeoutMs === undefined ? undefined : new AbortController();
  const timer = deadline === undefined ? undefined : setTimeout(() => deadline.abort(new Error(`--timeout ${timeoutMs} ms passed while connecting`)), timeoutMs);
  timer?.unref();
  let service: LockService | null;
  try {
    service = await connectUnlessInterrupted(address, interruption, deadline?.signal);
  } catch (error) {
    // Unavailable (69), not "held by someone else" (75): nobody was asked for the lock.
    if (deadline?.signal.aborted === true) {
      err(`cannot reach ${address.description} within --timeout ${timeoutMs} ms; nothing was acquired`);
      return ExitCode.unavailable;
    }
    throw error;
  } finally {
    clearTimeout(timer);
  }
  if (service === null) {
    interruption.end();
    return interruption.exitCode;
  }
  try {
    // Checks that need the negotiated session timeout.
    const marginMs = service.safetyMargin(requestedMarginMs);
    const maxGraceMs = Math.floor(marginMs / 2);
    const graceMs = requestedGraceMs ?? maxGraceMs;
    if (graceMs > maxGraceMs) {
      throw new UsageError(
        `--grace ${graceMs} does not fit: a stopped command must be gone before the session can expire, so --grace is at most half the safety margin ` +
          `(${maxGraceMs} ms of ${marginMs} ms with the negotiated ${service.sessionTimeoutMs} ms session); lower --grace or raise --safety-margin or --session-timeout`,
      );
    }

    // An operator's Ctrl-C while we still wait for the lock: stop waiting, leave nothing behind.
    let holding: Holding;
    try {
      interruption.signal.throwIfAborted();
      holding = await service.hold(kind, name, {
        signal: interruption.signal,
        safetyMarginMs: marginMs,
        // What the connect left of --timeout (at least 1 ms: 0 would mean "do not wait").
        ...(timeoutMs !== undefined && { timeoutMs: Math.max(1, Math.ceil(timeoutMs - (performance.now() - started))) }),
        ...(values.id !== undefined && { id: values.id as string }),
        ...(lockDelayMs !== undefined && { lockDelayMs }),
      });
    } catch (error) {
      if (error instanceof LockTimeoutError) {
        err(`lock ${name} not acquired within ${timeoutMs} ms (held by someone else); try again later`);
        return ExitCode.lockTimeout;
      }
      if (interruption.by !== null) {
        err(`interrupted by ${interruption.by} while waiting for ${name}; nothing is held`);
        return interruption.exitCode;
      }
      throw error;
    }
    // The operator's signal arrived but the grant was handed out anyway (a
    // source finishing its last step as the signal came): the signal was
    // ours, not the command's, so the command must not start now and run
    // with nobody left to stop it. Give the grant back and exit as interrupted.
    if (interruption.by !== null) {
      await holding.end().catch(() => undefined);
      err(`interrupted by ${interruption.by} while acquiring ${name}; released it, ${cmd[0]} was not started`);
      return interruption.exitCode;
    }

    const token = formatToken(holding.token);
    // The token bound to its lock, in the text form a fencing-token header or a bound fence takes.
    const env: NodeJS.ProcessEnv = { ...process.env, FENCING_TOKEN: token, FENCEKEEPER_SEQUENCER: formatSequencer(holding.sequencer) };
    // The lock service's credentials are ours, not the command's.
    delete env.ZOOKEEPER_AUTH;
    delete env.ZOOKEEPER_AUTH_FILE;
    if (kind === 'lock') env.FENCEKEEPER_LOCK = name;
    else Object.assign(env, { FENCEKEEPER_ELECTION: name, FENCEKEEPER_EPOCH: token });
    const what = kind === 'lock' ? 'lock' : 'leadership of';
    try {
      // From here on an operator's signal is the command's: supervise() listens before we stop.
      const result = await interruption.handOver(() =>
        supervise(cmd, env, holding, {
          graceMs,
          onLoss: (reason) => err(`${what} ${name} lost (${(reason as Error)?.message ?? 'unknown'}); stopping ${cmd[0]}`),
        }),
      );
      if (!result.started) {
        err(`${what} ${name} lost before ${cmd[0]} could start`);
        return ExitCode.lockLost;
      }
      return result.stoppedForLoss && result.code === 0 ? ExitCode.lockLost : result.code;
    } catch (error) {
      if (error instanceof CannotRunError) {
        err(`cannot run ${cmd[0]}: ${error.message}`);
        return ExitCode.cannotRun;
      }
      if (error instanceof SupervisorLostError) {
        err(error.message);
        return ExitCode.software;
      }
      throw error;
    } finally {
      await holding.end();
    }
  } finally {
    interruption.end();
    await service.close();
  }
}
