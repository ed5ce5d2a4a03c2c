// Regression: withFence(), PostgresFenceStore and migrate() hold a client
// checked out of a pg.Pool; pg-pool takes its own 'error' listener off such a
// client, and pg emits 'error' when the connection breaks. Nobody listened,
// so a connection lost mid-transaction crashed the process (an unhandled
// 'error' event) instead of failing the call. Found by the fault run
// (test/faults): a worker died after its PostgreSQL connection was reset.
// vitest fails the run on any uncaught exception, so surviving is asserted too.
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresFenceStore, migrate, withFence } from '../../adapters/postgres/index.js';
import { testServers } from '../helpers/servers.js';
import { uniqueId } from '../helpers/unique.js';

describe('a PostgreSQL connection lost mid-transaction', () => {
  let admin: pg.Pool;
  let pool: pg.Pool;
  const resources: string[] = [];

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: testServers().databaseUrl, max: 1 });
    pool = new pg.Pool({ connectionString: testServers().databaseUrl, max: 2 });
    pool.on('error', () => undefined); // the application's part: errors of idle clients
    await migrate(admin);
  });
  afterAll(async () => {
    await admin.query('delete from fencekeeper_fences where resource = any($1)', [resources]);
    await admin.end();
    await pool.end();
  });

  const terminate = async (client: pg.ClientBase | pg.PoolClient): Promise<void> => {
    const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
    await admin.query('select pg_terminate_backend($1)', [rows[0]?.pid]);
    await sleep(100); // let the client see its socket close
  };

  it('withFence rejects, the process survives, and the broken client is not reused', async () => {
    const resource = uniqueId('pg-loss');
    resources.push(resource);
    await expect(
      withFence(pool, resource, 5n, async (client) => {
        await terminate(client);
        await client.query('select 1');
      }),
    ).rejects.toThrow();
    // The pool hands out a working connection afterwards, and the fence did not move.
    await withFence(pool, resource, 5n, async (client) => {
      await client.query('select 1');
    });
    const { rows } = await admin.query<{ token: string }>('select token::text as token from fencekeeper_fences where resource = $1', [resource]);
    expect(rows[0]?.token).toBe('5');
  });

  it("PostgresFenceStore: an admission whose connection is lost fails to commit; the store stays usable", async () => {
    const resource = uniqueId('pg-loss-store');
    resources.push(resource);
    const store = new PostgresFenceStore(pool);
    const admission = await store.admit(resource, 7n);
    await terminate(admission.transaction);
    await expect(admission.commit()).rejects.toThrow();
    const next = await store.admit(resource, 7n);
    await next.commit();
    expect(await store.current(resource)).toBe(7n);
  });
});
