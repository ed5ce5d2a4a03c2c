#!/usr/bin/env node
/**
 * fencekeeper: hold a lock (or a leadership) while a command runs, inspect a
 * lock's queue, apply the fence table's migrations, play the paused-holder
 * demo.
 *
 * The CLI is the package's top layer: it uses the core through its public
 * API (../index.js) and may load any adapter (../../adapters/*), each only
 * in the command that needs it, since their libraries are optional peer
 * dependencies. Nothing in the core or the adapters imports the CLI. The
 * operator commands live in commands/; the demo, which only `fencekeeper
 * demo` loads, in demo/. The one place that turns flags and environment
 * into a connection to the lock service is lock-service.ts.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { FencekeeperError } from '../index.js';
import { UsageError } from './args.js';
import { demo } from './commands/demo.js';
import { effectsCommand } from './commands/effects.js';
import { migrateCommand } from './commands/migrate.js';
import { runOrElect } from './commands/run.js';
import { status } from './commands/status.js';
import { ExitCode } from './exit-codes.js';
import { HELP, isHelpTopic } from './help.js';
import { UnreachableError } from './lock-service.js';
import { err, out } from './output.js';
import { packageVersion } from './version.js';

/** Errors that say a server did not answer (socket-level codes, as Node and pg report them). */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'EAI_AGAIN']);

export async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'run':
      case 'elect':
        return await runOrElect(command, rest);
      case 'status':
        return await status(rest);
      case 'migrate':
        return await migrateCommand(rest);
      case 'effects':
        return await effectsCommand(rest);
      case 'demo':
        return await demo(rest);
      case '--version':
      case '-V':
        out(packageVersion());
        return ExitCode.ok;
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        out(HELP.main);
        return command === undefined ? ExitCode.usage : ExitCode.ok;
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)}`);
    }
  } catch (error) {
    const usage = (message: string): number => {
      err(message);
      err(`run 'fencekeeper ${isHelpTopic(command) && command !== 'main' ? `${command} ` : ''}--help' for usage`);
      return ExitCode.usage;
    };
    if (error instanceof UsageError) return usage(error.message);
    // Everything the CLI hands the library (names, margins, timeouts, the
    // servers of a URL) is the operator's input, after the checks the CLI
    // can make without I/O. What the library still refuses as an invalid
    // argument is therefore a usage error too, wherever it is found: e.g. a
    // redlock:// URL naming one server under two host names, which only the
    // servers' run_ids reveal at the first acquire.
    if (error instanceof FencekeeperError && error.code === 'INVALID_ARGUMENT') return usage(`${error.code}: ${error.message}`);
    if (error instanceof UnreachableError) {
      err(error.message);
      return ExitCode.unavailable;
    }
    if (error instanceof FencekeeperError) {
      err(`${error.code}: ${error.message}`);
      // ACL_MISMATCH: the lock's nodes carry another ACL than the run asked
      // for (or a node on the way is closed to us): a matter of permissions,
      // as a bare NOAUTH is, not a fault of ours.
      if (error.code === 'ZK_NOAUTH' || error.code === 'ZK_AUTHFAILED' || error.code === 'ACL_MISMATCH') return ExitCode.noPermission;
      return error.code === 'CONNECTION_LOSS' || error.code === 'SESSION_EXPIRED' || error.code === 'TLS_FAILED' ? ExitCode.unavailable : ExitCode.software;
    }
    const code = (error as { code?: unknown })?.code;
    if (typeof code === 'string' && UNREACHABLE_CODES.has(code)) {
      err(`a server could not be reached: ${(error as Error).message}`);
      return ExitCode.unavailable;
    }
    err(`unexpected error: ${(error as Error)?.stack ?? String(error)}`);
    return ExitCode.software;
  }
}

// Run when executed (bin), not when imported by tests.
const invoked = process.argv[1];
if (invoked !== undefined && import.meta.url === pathToFileURL(realpathSync(invoked)).href) {
  process.exitCode = await main(process.argv.slice(2));
}
