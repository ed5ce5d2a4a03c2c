#!/usr/bin/env node
/**
 * fencekeeper: hold a lock (or a leadership) while a command runs, inspect a
 * lock's queue, apply the fence table's migrations, play the paused-holder demo.
 * The CLI is the one place in the package that writes to the console.
 */
import {
  FencekeeperError,
  LockTimeoutError,
  ZooKeeperClient,
  acquireLock,
  campaign,
  formatToken,
  lockStatus,
} from '../index.js';
import { UsageError, parse, positiveInt, splitCommand, zookeeperFrom } from './args.js';
import { ExitCode } from './exit-codes.js';
import { supervise } from './supervise.js';

const HELP: Record<string, string> = {
  main: `usage: fencekeeper <command> [options]

commands:
  run <lock> -- cmd [args...]      hold <lock> while cmd runs (FENCING_TOKEN in its environment)
  elect <name> -- cmd [args...]    campaign for <name>; run cmd while leader (FENCING_TOKEN = epoch)
  status <lock>                    the holder and the waiters of <lock>, in order, with their tokens
  migrate                          create the fence table in DATABASE_URL's database (idempotent)
  demo                             play the paused-holder timeline against real servers

Run 'fencekeeper <command> --help' for a command's options.
Environment: ZOOKEEPER (connect string), DATABASE_URL, S3_ENDPOINT.`,
  run: `usage: fencekeeper run <lock> [options] -- cmd [args...]

Acquire <lock>, run cmd with FENCING_TOKEN and FENCEKEEPER_LOCK in its
environment, and release the lock when cmd exits; exit with cmd's code.
If the lock is lost while cmd runs, cmd gets SIGTERM, then SIGKILL after
--grace; fencekeeper then exits with cmd's code (76 if cmd exited 0).

options:
  --zookeeper <hosts>        connect string (default: $ZOOKEEPER)
  --timeout <ms>             give up waiting for the lock after ms (exit 75)
  --session-timeout <ms>     ZooKeeper session timeout to request (default 10000)
  --grace <ms>               SIGTERM -> SIGKILL delay when the lock is lost (default 5000)
  --safety-margin <ms>       step down this long before the session can expire (default: timeout/4)

exit codes: cmd's own; 64 usage; 69 ZooKeeper unreachable; 75 lock not acquired in time;
            76 lock lost and cmd stopped; 127 cmd could not be started`,
  elect: `usage: fencekeeper elect <name> [options] -- cmd [args...]

Campaign for leadership of <name>; when elected, run cmd with FENCING_TOKEN
(the leader's epoch), FENCEKEEPER_ELECTION and FENCEKEEPER_EPOCH in its
environment; resign when cmd exits. Leadership lost: as for 'run'.

options:
  --zookeeper <hosts>        connect string (default: $ZOOKEEPER)
  --id <id>                  this candidate's id (default hostname:pid)
  --session-timeout <ms>     ZooKeeper session timeout to request (default 10000)
  --grace <ms>               SIGTERM -> SIGKILL delay when leadership is lost (default 5000)
  --safety-margin <ms>       step down this long before the session can expire`,
  status: `usage: fencekeeper status <lock> [--zookeeper <hosts>] [--json]

Print the holder of <lock> and its waiters in grant order, with their tokens
(the czxid of each queue node), owners and session ids.`,
  migrate: `usage: fencekeeper migrate [--database-url <url>]

Apply fencekeeper's SQL migrations (the fencekeeper_fences table) to the
database at --database-url or $DATABASE_URL. Idempotent; safe to run from
several processes at once.`,
  demo: `usage: fencekeeper demo [--unfenced]

Play seed 000's timeline with real processes and real servers: holder A
acquires jobs/reindex and writes to a PostgreSQL row, an S3 object and an
HTTP service; A is frozen (SIGSTOP) past its session timeout; B acquires
with a larger token and writes; A resumes and writes with its old token.
Every resource refuses A. Exit 0 only if every stale write was refused.
--unfenced makes the same writes without fencing (and exits 1).

Servers from ZOOKEEPER (127.0.0.1:2181), DATABASE_URL, S3_ENDPOINT
(http://127.0.0.1:7480), S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION.
'npm run demo' starts them first.`,
};

function out(text: string): void {
  process.stdout.write(`${text}\n`);
}

function err(text: string): void {
  process.stderr.write(`fencekeeper: ${text}\n`);
}

async function connect(zookeeper: string, sessionTimeoutMs: number | undefined): Promise<ZooKeeperClient> {
  return ZooKeeperClient.connect({ connectString: zookeeper, ...(sessionTimeoutMs !== undefined && { sessionTimeoutMs }) });
}

async function runOrElect(kind: 'run' | 'elect', argv: readonly string[]): Promise<number> {
  const { own, command } = splitCommand(argv);
  const { values, positionals } = parse(own, {
    zookeeper: { type: 'string' },
    timeout: { type: 'string' },
    'session-timeout': { type: 'string' },
    grace: { type: 'string' },
    'safety-margin': { type: 'string' },
    id: { type: 'string' },
  });
  if (values.help) {
    out(HELP[kind] as string);
    return ExitCode.ok;
  }
  const name = positionals[0];
  if (name === undefined || positionals.length !== 1) throw new UsageError(`${kind} needs exactly one ${kind === 'run' ? 'lock' : 'election'} name before --`);
  if (command.length === 0) throw new UsageError(`${kind} needs a command after --`);
  if (kind === 'elect' && values.timeout !== undefined) throw new UsageError('elect has no --timeout: a candidate waits until elected');
  if (kind === 'run' && values.id !== undefined) throw new UsageError('--id is an elect option');
  const timeoutMs = positiveInt(values.timeout as string | undefined, '--timeout');
  const sessionTimeoutMs = positiveInt(values['session-timeout'] as string | undefined, '--session-timeout');
  const graceMs = positiveInt(values.grace as string | undefined, '--grace') ?? 5000;
  const margin = values['safety-margin'] as string | undefined;
  const safetyMarginMs = margin === undefined ? undefined : Number.isInteger(Number(margin)) && /^[0-9]+$/.test(margin) ? Number(margin) : NaN;
  if (Number.isNaN(safetyMarginMs)) throw new UsageError('--safety-margin must be a non-negative integer (milliseconds)');
  const zookeeper = zookeeperFrom(values.zookeeper as string | undefined);

  let zk: ZooKeeperClient;
  try {
    zk = await connect(zookeeper, sessionTimeoutMs);
  } catch (error) {
    err(`cannot reach ZooKeeper at ${zookeeper}: ${(error as Error).message}`);
    return ExitCode.unavailable;
  }
  try {
    // An operator's Ctrl-C while we still wait for the lock: stop waiting, leave nothing behind.
    const waiting = new AbortController();
    const giveUp = (): void => waiting.abort(new Error('interrupted while waiting'));
    process.once('SIGINT', giveUp);
    process.once('SIGTERM', giveUp);
    let holding: { token: bigint; signal: AbortSignal; done: () => Promise<void> };
    try {
      if (kind === 'run') {
        const lock = await acquireLock(zk, name, {
          signal: waiting.signal,
          ...(timeoutMs !== undefined && { timeoutMs }),
          ...(safetyMarginMs !== undefined && { safetyMarginMs }),
        });
        holding = { token: lock.token, signal: lock.signal, done: () => lock.release() };
      } else {
        const leadership = await campaign(zk, name, {
          signal: waiting.signal,
          ...(values.id !== undefined && { id: values.id as string }),
          ...(safetyMarginMs !== undefined && { safetyMarginMs }),
        });
        holding = { token: leadership.epoch, signal: leadership.signal, done: () => leadership.resign() };
      }
    } catch (error) {
      if (error instanceof LockTimeoutError) {
        err(`lock ${name} not acquired within ${timeoutMs} ms (held by someone else); try again later`);
        return ExitCode.lockTimeout;
      }
      if (waiting.signal.aborted) {
        err(`interrupted while waiting for ${name}`);
        return 130;
      }
      throw error;
    } finally {
      process.off('SIGINT', giveUp);
      process.off('SIGTERM', giveUp);
    }

    const token = formatToken(holding.token);
    const env: NodeJS.ProcessEnv = { ...process.env, FENCING_TOKEN: token };
    if (kind === 'run') env.FENCEKEEPER_LOCK = name;
    else Object.assign(env, { FENCEKEEPER_ELECTION: name, FENCEKEEPER_EPOCH: token });
    let result;
    try {
      result = await supervise(command, env, holding.signal, graceMs, (reason) => {
        err(`${kind === 'run' ? 'lock' : 'leadership'} ${name} lost (${(reason as Error)?.message ?? 'unknown'}); stopping ${command[0]}`);
      });
    } catch (error) {
      err(`cannot run ${command[0]}: ${(error as Error).message}`);
      await holding.done();
      return 127;
    }
    await holding.done();
    if (result.stoppedForLoss && result.code === 0) return ExitCode.lockLost;
    return result.code;
  } finally {
    await zk.close();
  }
}

async function status(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { zookeeper: { type: 'string' }, json: { type: 'boolean' } });
  if (values.help) {
    out(HELP.status as string);
    return ExitCode.ok;
  }
  const name = positionals[0];
  if (name === undefined || positionals.length !== 1) throw new UsageError('status needs exactly one lock name');
  const zookeeper = zookeeperFrom(values.zookeeper as string | undefined);
  let zk: ZooKeeperClient;
  try {
    zk = await connect(zookeeper, undefined);
  } catch (error) {
    err(`cannot reach ZooKeeper at ${zookeeper}: ${(error as Error).message}`);
    return ExitCode.unavailable;
  }
  try {
    const s = await lockStatus(zk, name);
    const entries = [...(s.holder ? [{ role: 'holder', ...s.holder }] : []), ...s.waiters.map((w) => ({ role: 'waiter', ...w }))];
    if (values.json) {
      out(JSON.stringify({ lock: name, queue: entries.map((e) => ({ role: e.role, token: formatToken(e.token), owner: e.owner, session: `0x${e.sessionId.toString(16)}`, node: e.path })) }));
      return ExitCode.ok;
    }
    if (entries.length === 0) {
      out(`${name}: free (no holder, no waiters)`);
      return ExitCode.ok;
    }
    out(`${name}: held, ${s.waiters.length} waiting`);
    const rows = entries.map((e, i) => [String(i), e.role, formatToken(e.token), e.owner, `0x${e.sessionId.toString(16)}`]);
    const header = ['#', 'role', 'token', 'owner', 'session'];
    const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] as string).length)));
    const line = (r: string[]): string => r.map((v, c) => v.padEnd(widths[c] as number)).join('  ').trimEnd();
    out(line(header));
    for (const r of rows) out(line(r));
    return ExitCode.ok;
  } finally {
    await zk.close();
  }
}

async function migrateCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { 'database-url': { type: 'string' } });
  if (values.help) {
    out(HELP.migrate as string);
    return ExitCode.ok;
  }
  if (positionals.length > 0) throw new UsageError('migrate takes no arguments');
  const url = (values['database-url'] as string | undefined) ?? process.env.DATABASE_URL;
  if (!url) throw new UsageError('no database: pass --database-url or set DATABASE_URL');
  // pg is the Postgres adapter's peer dependency, loaded only for this command.
  const [{ default: pg }, { migrate }] = await Promise.all([import('pg'), import('../../adapters/postgres/index.js')]);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    const result = await migrate(pool);
    out(result.applied.length === 0 ? 'fence table up to date' : `applied: ${result.applied.join(', ')}`);
    return ExitCode.ok;
  } catch (error) {
    err(`migrate failed: ${(error as Error).message}`);
    return ExitCode.unavailable;
  } finally {
    await pool.end();
  }
}

async function demo(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { unfenced: { type: 'boolean' } });
  if (values.help) {
    out(HELP.demo as string);
    return ExitCode.ok;
  }
  if (positionals.length > 0) throw new UsageError('demo takes no arguments');
  const { runDemo } = await import('./demo.js');
  return runDemo(values.unfenced === true ? { unfenced: true } : {});
}

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
      case 'demo':
        return await demo(rest);
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        out(HELP.main as string);
        return command === undefined ? ExitCode.usage : ExitCode.ok;
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)}`);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      err(error.message);
      err(`run 'fencekeeper ${command && command in HELP ? `${command} ` : ''}--help' for usage`);
      return ExitCode.usage;
    }
    if (error instanceof FencekeeperError) {
      err(`${error.code}: ${error.message}`);
      return error.code === 'CONNECTION_LOSS' || error.code === 'SESSION_EXPIRED' ? ExitCode.unavailable : ExitCode.software;
    }
    err(`unexpected error: ${(error as Error)?.stack ?? String(error)}`);
    return ExitCode.software;
  }
}

// Run when executed (bin), not when imported by tests.
const invoked = process.argv[1];
if (invoked !== undefined && import.meta.url === new URL(`file://${(await import('node:fs')).realpathSync(invoked)}`).href) {
  process.exitCode = await main(process.argv.slice(2));
}
