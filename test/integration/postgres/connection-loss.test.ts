// Regression: withFence(), PostgresFenceStore and migrate() hold a client
// checked out of a pg.Pool; pg-pool takes its own 'error' listener off such a
// client, and pg emits 'error' when the connection breaks. Nobody listened,
// so a connection lost mid-transaction crashed the process (an unhandled
// 'error' event) instead of failing the call. Found by the fault run
// (test/faults): a worker died after its PostgreSQL connection was reset.
// vitest fails the run on any uncaught exception, so surviving is asserted too.
//
// A connection lost in the middle also takes the transaction's fence advance
// with it; the advance must stand anyway (it is applied again on its own),
// and nothing of the work may commit.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CommitFailedError, StaleTokenError } from '../../../src/index.js';
import { PostgresFenceStore, migrate, withFence } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, backendPidOf, createSchema, dropSchema, newPool, uniqueName } from './helpers.js';
import { within } from '../../helpers/wait.js';

describe('a PostgreSQL connection lost mid-transaction', () => {
  const schema = uniqueName('fk_pg_loss');
  let admin: pg.Pool;
  let pool: pg.Pool;

  beforeAll(async () => {
    admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    await createSchema(admin, schema);
    pool = newPool(schema, uniqueName('fk_loss'), 2);
    pool.on('error', () => undefined); // the application's part: errors of idle clients
    await migrate(pool);
    await pool.query('CREATE TABLE work_log (resource text NOT NULL, token bigint NOT NULL)');
  });
  afterAll(async () => {
    await pool.end();
    await dropSchema(admin, schema);
    await admin.end();
  });

  const fence = async (resource: string): Promise<string[]> =>
    (await admin.query<{ token: string }>(`SELECT token::text AS token FROM ${schema}.fencekeeper_fences WHERE resource = $1`, [resource])).rows.map((row) => row.token);

  /** Terminate the backend of `client` and wait until the client has seen it (its 'error' event), answering that error. */
  const terminate = async (client: pg.PoolClient): Promise<Error> => {
    const pid = await backendPidOf(client);
    const seen = new Promise<Error>((resolve) => client.once('error', resolve));
    // With a timeout, pg_terminate_backend returns once the backend has exited.
    const { rows } = await admin.query<{ done: boolean }>('SELECT pg_terminate_backend($1, 10000) AS done', [pid]);
    expect(rows[0]?.done).toBe(true);
    return within(seen, 20_000, `the client of backend ${pid} to see its connection end`);
  };

  it('withFence rejects with the termination error, commits none of the work, keeps the advance, and does not reuse the client', async () => {
    const resource = uniqueName('pg-loss');
    expect(await fence(resource)).toEqual([]);
    let lostPid = 0;
    let seen: Error | undefined;
    let during: string[] | undefined;
    const error = await withFence(pool, resource, 5n, async (client) => {
      await client.query({ text: 'INSERT INTO work_log VALUES ($1, 5)', values: [resource] });
      during = await fence(resource);
      lostPid = await backendPidOf(client);
      seen = await terminate(client);
      await client.query('select 1');
    }).catch((e: unknown) => e);
    // The advance is part of the transaction: nobody else sees it before it commits.
    expect(during).toEqual([]);
    expect(seen).toMatchObject({ code: '57P01' }); // admin_shutdown: terminated by pg_terminate_backend
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/not queryable/);
    expect((await admin.query(`SELECT 1 FROM ${schema}.work_log WHERE resource = $1`, [resource])).rows).toHaveLength(0);
    // The advance went with the lost transaction and was applied again on its own.
    expect(await fence(resource)).toEqual(['5']);
    await expect(withFence(pool, resource, 4n, async () => 'never')).rejects.toBeInstanceOf(StaleTokenError);
    // The pool hands out a working connection afterwards, not the broken one.
    const next = await withFence(pool, resource, 6n, async (client) => backendPidOf(client));
    expect(next).not.toBe(lostPid);
    expect(await fence(resource)).toEqual(['6']);
  });

  it('PostgresFenceStore: an admission whose connection is lost fails to commit, keeps its advance, and the store stays usable', async () => {
    const resource = uniqueName('pg-loss-store');
    const store = new PostgresFenceStore(pool);
    const admission = await store.admit(resource, 7n);
    await admission.transaction.query({ text: 'INSERT INTO work_log VALUES ($1, 7)', values: [resource] });
    expect(await fence(resource)).toEqual([]);
    expect(await terminate(admission.transaction)).toMatchObject({ code: '57P01' });
    const error = await admission.commit().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CommitFailedError);
    expect(error).toMatchObject({ code: 'COMMIT_FAILED', resource, token: 7n, restored: true });
    expect((await admin.query(`SELECT 1 FROM ${schema}.work_log WHERE resource = $1`, [resource])).rows).toHaveLength(0);
    expect(await store.current(resource)).toBe(7n);
    await expect(store.admit(resource, 6n)).rejects.toMatchObject({ code: 'STALE_TOKEN', current: 7n });
    const next = await store.admit(resource, 7n);
    await next.commit();
    expect(await store.current(resource)).toBe(7n);
  });
});
