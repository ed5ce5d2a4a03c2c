import { parseArgs, type ParseArgsConfig } from 'node:util';
import { InvalidArgumentError } from '../index.js';
import { assertLockName } from '../extend.js';

/** A mistake in the command line (flags, arguments, a lock name): exit 64. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * The name rule every source shares (assertLockName: a name a sequencer can
 * carry, well-formed Unicode), as a usage error: the CLI's copies of the
 * sources' own rules check it before loading any adapter.
 */
export function lockNameRule(kind: string, name: string): void {
  try {
    assertLockName(name);
  } catch (error) {
    if (error instanceof InvalidArgumentError) throw new UsageError(`bad ${kind} name: ${error.message}`);
    throw error;
  }
}

/** Split `fencekeeper run lock --flags -- cmd args` at the first `--`: the command's own flags are never ours. */
export function splitCommand(argv: readonly string[]): { own: string[]; command: string[] } {
  const at = argv.indexOf('--');
  return at === -1 ? { own: [...argv], command: [] } : { own: argv.slice(0, at), command: argv.slice(at + 1) };
}

export interface ParsedArgs {
  readonly values: Readonly<Record<string, string | boolean | undefined>>;
  readonly positionals: readonly string[];
}

export function parse(argv: readonly string[], options: NonNullable<ParseArgsConfig['options']>): ParsedArgs {
  try {
    const { values, positionals } = parseArgs({ args: [...argv], options: { help: { type: 'boolean', short: 'h' }, ...options }, allowPositionals: true, strict: true });
    return { values: values as ParsedArgs['values'], positionals };
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** The database of --database-url, else of DATABASE_URL (the commands on the PostgreSQL tables); a UsageError when neither names one. */
export function databaseUrl(values: ParsedArgs['values']): string {
  const url = (values['database-url'] as string | undefined) ?? process.env.DATABASE_URL;
  if (!url) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  return url;
}

function integer(value: string, flag: string, min: number): number {
  if (!/^[0-9]+$/.test(value) || Number(value) < min || Number(value) > 0x7fffffff) {
    throw new UsageError(`${flag} must be ${min === 0 ? 'a non-negative' : 'a positive'} integer (milliseconds), got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

export function positiveInt(value: string | undefined, flag: string): number | undefined {
  return value === undefined ? undefined : integer(value, flag, 1);
}

export function nonNegativeInt(value: string | undefined, flag: string): number | undefined {
  return value === undefined ? undefined : integer(value, flag, 0);
}
