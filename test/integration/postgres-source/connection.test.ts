// postgresSource with its connections black-holed by a TcpProxy it owns: the
// holder steps down by its own clock (send time of the last acknowledged
// renewal + lease - margin), before the database can end its session and
// grant the lock to anyone else.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { LockLostError } from '../../../src/index.js';
import { TcpProxy } from '../../../src/testing/index.js';
import { postgresSource } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, sourceSchema, uniqueName } from './helpers.js';
import { within } from '../../helpers/wait.js';

const db = sourceSchema('pgsrc_conn');
const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
});

describe('postgresSource: connection cut', () => {
  it('a black-holed holder steps down by its own clock, while the database still counts its session live', async () => {
    const target = new URL(DATABASE_URL);
    const proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
    const url = new URL(DATABASE_URL);
    url.host = proxy.address;
    const pool = new pg.Pool({ connectionString: url.toString(), max: 3, options: `-c search_path=${db.schema}` });
    pool.on('error', () => undefined);
    const source = postgresSource(pool, { leaseMs: 2000 });
    cleanups.push(async () => {
      proxy.cut();
      await proxy.close();
      await source.close();
      await pool.end();
    });
    const lock = await source.acquireLock(uniqueName('pgsource/cut'));
    const stepped = new Promise<LockLostError>((resolve) => lock.signal.addEventListener('abort', () => resolve(lock.signal.reason as LockLostError), { once: true }));
    proxy.blackhole();
    const reason = await within(stepped, 10_000, 'the holder to step down');
    expect(reason.reason).toBe('deadline');
    expect(lock.held).toBe(false);
    // The database has not ended the session yet: nobody else could have been granted the lock.
    const { rows } = await db.admin.query<{ live: boolean }>('SELECT expires_at > clock_timestamp() AS live FROM fencekeeper_lock_sessions WHERE id = $1', [lock.session.toString()]);
    expect(rows).toEqual([{ live: true }]);
  });
});
