// postgresSource through PgBouncer in transaction pooling mode: a private
// PgBouncer (the Debian package's binary) started by this file on a port of
// its own, in front of the shared PostgreSQL. A LISTEN there runs on
// whichever server connection the statement got, so the source's probe
// (a NOTIFY to its own channel) is never heard: it refuses to start with
// LISTEN_UNAVAILABLE rather than leave its waiters asleep.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ListenUnavailableError } from '../../../src/index.js';
import { postgresSource } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, uniqueName } from './helpers.js';
import { retrying } from '../../helpers/wait.js';

const PGBOUNCER = '/usr/sbin/pgbouncer';
let dir = '';
let bouncer: ChildProcess | null = null;
let port = 0;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: free } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return free;
}

beforeAll(async () => {
  if (!existsSync(PGBOUNCER)) throw new Error(`${PGBOUNCER} is not installed (Debian package pgbouncer)`);
  const target = new URL(DATABASE_URL);
  dir = await mkdtemp(join(tmpdir(), 'fk-pgbouncer-'));
  // PgBouncer refuses to run as root: as root, it is told to switch to nobody, who must write its log and pid file here.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) await chmod(dir, 0o777);
  port = await freePort();
  const database = target.pathname.slice(1);
  await writeFile(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `${database} = host=${target.hostname} port=${target.port || '5432'} dbname=${database} user=${decodeURIComponent(target.username)}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      'pool_mode = transaction',
      'default_pool_size = 4',
      'ignore_startup_parameters = extra_float_digits,options',
      `logfile = ${join(dir, 'pgbouncer.log')}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  bouncer = spawn(PGBOUNCER, [...(asRoot ? ['-u', 'nobody'] : []), join(dir, 'pgbouncer.ini')], { stdio: 'ignore' });
  await retrying(async () => {
    const client = new pg.Client({ connectionString: `postgres://${target.username}@127.0.0.1:${port}/${database}` });
    await client.connect();
    await client.query('SELECT 1');
    await client.end();
  }, 20_000, 'the private PgBouncer to accept connections');
});

afterAll(async () => {
  if (bouncer !== null && bouncer.exitCode === null) {
    const exited = new Promise((resolve) => bouncer!.once('exit', resolve));
    bouncer.kill('SIGTERM');
    await exited;
  }
  if (dir !== '') await rm(dir, { recursive: true, force: true });
});

describe('postgresSource through PgBouncer in transaction pooling mode', () => {
  it('refuses to start with LISTEN_UNAVAILABLE (its own NOTIFY never arrives)', async () => {
    const target = new URL(DATABASE_URL);
    const pool = new pg.Pool({ connectionString: `postgres://${target.username}@127.0.0.1:${port}${target.pathname}`, max: 3 });
    pool.on('error', () => undefined);
    try {
      const source = postgresSource(pool, { leaseMs: 3000 });
      const error = await source.acquireLock(uniqueName('pgsource/bouncer')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ListenUnavailableError);
      expect((error as ListenUnavailableError).code).toBe('LISTEN_UNAVAILABLE');
      expect((error as Error).message).toMatch(/PgBouncer/);
      await source.close();
    } finally {
      await pool.end();
    }
  });
});
