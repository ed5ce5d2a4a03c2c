import { parseArgs, type ParseArgsConfig } from 'node:util';

export class UsageError extends Error {
  override readonly name = 'UsageError';
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

export function positiveInt(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^[0-9]+$/.test(value) || Number(value) < 1 || Number(value) > 0x7fffffff) {
    throw new UsageError(`${flag} must be a positive integer (milliseconds), got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

export function zookeeperFrom(flag: string | undefined): string {
  const connect = flag ?? process.env.ZOOKEEPER;
  if (connect === undefined || connect === '') {
    throw new UsageError('no ZooKeeper to talk to: pass --zookeeper host:port[,host:port][/chroot] or set ZOOKEEPER');
  }
  return connect;
}
