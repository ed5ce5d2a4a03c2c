/**
 * PostgreSQL as the CLI's lock service:
 *   postgres://[user[:password]@]host[:port][/database][?param=value...]
 *   (postgresql:// alike)
 * --session-timeout is the source's session lease (leaseMs, default 10000
 * ms, 500..86400000). The tables come from `fencekeeper migrate`: a database
 * without them is reported at connect, with that advice, before any lock is
 * asked for. A password (in the URL's credentials or its query) is accepted
 * from $FENCEKEEPER_LOCK_SERVICE only, never from the command line (where
 * `ps` shows it to every user of the machine).
 *
 * pg and fencekeeper/postgres are loaded only when such a URL is used, so the
 * CLI works without pg installed.
 */
import { ClientClosedError, ConnectionLossError, InvalidArgumentError, SchemaMissingError, SessionExpiredError } from '../../index.js';
import { UsageError, lockNameRule, positiveInt } from '../args.js';
import { UnreachableError, type LockService, type LockServiceContext, type LockServiceKind, type QueueEntry } from '../lock-service.js';
import { followQueue, serviceOf } from './source-service.js';

type PostgresEntry = typeof import('../../../adapters/postgres/index.js');
type Source = ReturnType<PostgresEntry['postgresSource']>;
type Entry = Awaited<ReturnType<Source['lockStatus']>>['waiters'][number];
interface Pool {
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

const DEFAULT_LEASE_MS = 10_000;
const MIN_LEASE_MS = 500;
const MAX_LEASE_MS = 86_400_000;
/** The source keeps one connection for its heartbeat and LISTEN; the others carry grants, releases and status reads. */
const POOL_SIZE = 4;

interface PostgresUrl {
  readonly connectionString: string;
  /** host:port/database, for messages (never the credentials). */
  readonly where: string;
}

function parseUrl(scheme: string, rest: string, context: LockServiceContext): PostgresUrl {
  const { origin } = context;
  let url: URL;
  try {
    url = new URL(`${scheme}://${rest}`);
  } catch {
    throw new UsageError(`${origin}: not a ${scheme}:// URL: expected ${scheme}://[user@]host[:port][/database][?param=value]`);
  }
  if (url.hash !== '') throw new UsageError(`${origin}: a ${scheme}:// URL takes no fragment`);
  if (url.hostname === '' && !url.searchParams.has('host')) throw new UsageError(`${origin}: a ${scheme}:// URL needs a host: ${scheme}://host[:port]/database`);
  if (url.hostname.includes(',')) throw new UsageError(`${origin}: a ${scheme}:// URL names one server (the source needs the primary; put a proxy or a floating address before several)`);
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''));
  if (database.includes('/')) throw new UsageError(`${origin}: the path of a ${scheme}:// URL is one database name, got ${JSON.stringify(database)}`);
  if ((url.password !== '' || url.searchParams.has('password')) && context.fromCommandLine) {
    throw new UsageError(`${origin}: a URL with a password is accepted from FENCEKEEPER_LOCK_SERVICE only (on the command line, ps shows it to every user); or use PGPASSWORD / ~/.pgpass`);
  }
  const host = url.hostname === '' ? (url.searchParams.get('host') as string) : url.hostname;
  return { connectionString: url.href, where: `${host}${url.port === '' ? '' : `:${url.port}`}${database === '' ? '' : `/${database}`}` };
}

function leaseFrom(context: LockServiceContext): number {
  const leaseMs = positiveInt(context.values['session-timeout'] as string | undefined, '--session-timeout') ?? DEFAULT_LEASE_MS;
  if (leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS) {
    throw new UsageError(`--session-timeout ${leaseMs}: the PostgreSQL session lease is ${MIN_LEASE_MS}..${MAX_LEASE_MS} ms`);
  }
  return leaseMs;
}

function kind(scheme: 'postgres' | 'postgresql'): LockServiceKind {
  return {
    example: `${scheme}://127.0.0.1:5432/app`,
    address(rest, context) {
      const url = parseUrl(scheme, rest, context);
      const leaseMs = leaseFrom(context);
      const description = `PostgreSQL at ${url.where}`;
      return {
        description,
        // fencekeeper/postgres's name rule is the core's (well-formed Unicode, no NUL, at most 1024 characters).
        checkName: (k, name) => lockNameRule(k, name),
        connect: (signal) => connect(url, leaseMs, description, signal),
      };
    },
  };
}

export const POSTGRES_SERVICE = kind('postgres');
export const POSTGRESQL_SERVICE = kind('postgresql');

async function loadPg(): Promise<{ Pool: new (config: object) => Pool }> {
  try {
    return ((await import('pg')) as unknown as { default: { Pool: new (config: object) => Pool } }).default;
  } catch {
    throw new UsageError('postgres:// needs the pg package: npm install pg');
  }
}

async function connect(url: PostgresUrl, leaseMs: number, description: string, signal: AbortSignal | undefined): Promise<LockService> {
  const [pg, entry] = await Promise.all([loadPg(), import('../../../adapters/postgres/index.js')]);
  signal?.throwIfAborted();
  // A connect that hangs (a paused server completes the TCP handshake, then
  // answers nothing) is bounded by one lease, as the other services bound theirs.
  const pool = new pg.Pool({ connectionString: url.connectionString, max: POOL_SIZE, connectionTimeoutMillis: leaseMs, application_name: 'fencekeeper-cli' });
  // pg reports an idle connection's error as an event; the commands see it as a failed statement.
  pool.on('error', () => {});
  let source: Source;
  try {
    source = entry.postgresSource(pool as unknown as Parameters<PostgresEntry['postgresSource']>[0], { leaseMs });
  } catch (error) {
    await pool.end();
    if (error instanceof InvalidArgumentError) throw new UsageError(`--session-timeout ${leaseMs}: ${error.message}`);
    throw error;
  }
  const giveUp = (): void => void source.close().catch(() => undefined).finally(() => pool.end().catch(() => undefined));
  signal?.addEventListener('abort', giveUp, { once: true });
  try {
    // The session now (its LISTEN probe and its row): an unreachable database,
    // or one without the migration, is reported before any lock is asked for.
    await source.identity();
    signal?.throwIfAborted();
  } catch (error) {
    signal?.throwIfAborted();
    await source.close().catch(() => undefined);
    await pool.end().catch(() => undefined);
    if (error instanceof SchemaMissingError) {
      throw new UnreachableError(`${description} has no fencekeeper tables (${error.code}: ${error.relation} is missing): run \`fencekeeper migrate --database-url <the same URL>\` on that database first`);
    }
    if (error instanceof InvalidArgumentError) throw error;
    throw new UnreachableError(`cannot use ${description}: ${(error as Error).message}`);
  } finally {
    signal?.removeEventListener('abort', giveUp);
  }
  return serviceOf({
    source,
    description,
    grantMs: () => leaseMs,
    unreachable: (error) => unreachable(description, error),
    entries,
    durability: (status) => {
      // serviceOf hands back what this source's lockStatus answered.
      const { synchronousCommit, synchronousStandbyNames } = status as Awaited<ReturnType<Source['lockStatus']>>;
      return { synchronous_commit: synchronousCommit, synchronous_standby_names: synchronousStandbyNames };
    },
    watchQueue: (name, onChange, watchSignal) => watchQueue(source, description, name, onChange, watchSignal),
    async close() {
      try {
        await source.close();
      } finally {
        await pool.end();
      }
    },
  });
}

function entries(queue: readonly Entry[]): QueueEntry[] {
  return queue.map((e) => ({ role: e.waiting ? 'waiter' : 'holder', token: e.token, owner: e.owner, session: `session ${e.session}`, node: `entry ${e.entry}` }));
}

/**
 * The queue, read again each time the source's observer reports a change
 * (a NOTIFY on the lock's channel, sent only while someone observes it);
 * nothing is read while the queue does not change.
 */
function watchQueue(source: Source, description: string, name: string, onChange: Parameters<NonNullable<LockService['watchQueue']>>[1], signal: AbortSignal): Promise<void> {
  const observer = source.observeLock(name);
  return followQueue(
    (changed) => {
      const off = observer.onChange(changed);
      return () => {
        off();
        observer.close();
      };
    },
    async () => entries(await observer.queue()),
    (error) => unreachable(description, error),
    onChange,
    signal,
  );
}

/** Network codes of Node and PostgreSQL's SQLSTATEs (class 08: connection; 57P01-03: shutdown, crash, cannot connect now). */
const DOWN = /^(?:ECONNREFUSED|ECONNRESET|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT|EPIPE|EAI_AGAIN|08[0-9A-Z]{3}|57P0[123])$/;

/** A session lost (or the database out of reach) while we waited is the service becoming unreachable, not a bug. */
function unreachable(description: string, error: unknown): unknown {
  if (error instanceof SessionExpiredError || error instanceof ClientClosedError || error instanceof ConnectionLossError) return new UnreachableError(`${description}: ${error.message}`);
  const code = (error as { code?: unknown } | null)?.code;
  const message = (error as { message?: unknown } | null)?.message;
  if ((typeof code === 'string' && DOWN.test(code)) || (typeof message === 'string' && /Connection terminated|connection timeout/i.test(message))) {
    return new UnreachableError(`${description}: ${message as string}`);
  }
  return error;
}
