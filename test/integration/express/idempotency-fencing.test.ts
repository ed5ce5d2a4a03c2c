// fencing() then idempotency() on one route, with PostgresFenceStore: the
// stored response is written in the fence's transaction, so it commits or
// rolls back with the handler's writes. The regression this guards: a
// response stored on its own commits even when the handler's writes roll
// back, and the retry is then told "done" about writes that never happened.
import { express } from './variants.js';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { MemoryIdempotencyStore, fencing, idempotency } from '../../../adapters/express/index.js';
import { PostgresFenceStore, PostgresIdempotencyStore } from '../../../adapters/postgres/index.js';
import type { IdempotencyStore } from '../../../src/index.js';
import { serve, type Served } from './helpers.js';
import { adminPool, migratedSchema, uniqueName } from '../postgres/helpers.js';

const { pool } = migratedSchema(adminPool(), 'fk_idemfence', { max: 8 });

beforeAll(async () => {
  await pool.query('CREATE TABLE accounts (id int PRIMARY KEY)');
  // Deferred: a bad row is accepted by its INSERT and refused at COMMIT,
  // after the response has gone out.
  await pool.query('CREATE TABLE entries (id serial PRIMARY KEY, account int NOT NULL REFERENCES accounts (id) DEFERRABLE INITIALLY DEFERRED, amount int NOT NULL)');
  await pool.query('INSERT INTO accounts VALUES (1)');
});

interface Route {
  served: Served;
  url: string;
  runs: number;
}

/** POST /pay: fenced on "ledger", then idempotency(); the first run writes a row the COMMIT refuses. */
async function route(store: IdempotencyStore<unknown>, resource: string): Promise<Route> {
  const app = express();
  const state: Route = { served: undefined as unknown as Served, url: '', runs: 0 };
  app.post(
    '/pay',
    fencing({ store: new PostgresFenceStore(pool), resource }),
    express.json(),
    idempotency({ store }),
    async (req, res, next) => {
      try {
        state.runs += 1;
        const trx = req.fencing!.transaction as pg.PoolClient;
        const account = state.runs === 1 ? 999 : 1; // 999: no such account, refused at COMMIT
        await trx.query('INSERT INTO entries (account, amount) VALUES ($1, $2)', [account, (req.body as { amount: number }).amount]);
        res.status(201).json({ paid: (req.body as { amount: number }).amount, run: state.runs });
      } catch (error) {
        next(error);
      }
    },
  );
  state.served = await serve(app);
  state.url = `http://127.0.0.1:${state.served.port}/pay`;
  return state;
}

async function pay(url: string, key: string, token = '7'): Promise<{ status: number; replayed: boolean; body: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'fencing-token': token, 'idempotency-key': key, 'content-type': 'application/json' }, body: '{"amount":42}' });
  return { status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true', body: await res.json() };
}

describe('idempotency() behind fencing() with PostgresFenceStore', () => {
  it('a response whose writes were rolled back at COMMIT is not replayed: the retry runs the handler again', async () => {
    const r = await route(new PostgresIdempotencyStore(pool), uniqueName('ledger'));
    try {
      await pool.query('DELETE FROM entries');
      const key = `"${crypto.randomUUID()}"`;
      // The client is told 201, but the COMMIT refuses the row (and the stored response with it).
      const first = await pay(r.url, key);
      expect(first).toMatchObject({ status: 201, replayed: false, body: { run: 1 } });
      // The retry waits for the fence, i.e. for that COMMIT to have failed.
      const retry = await pay(r.url, key);
      expect(retry).toMatchObject({ status: 201, replayed: false, body: { run: 2 } });
      expect(r.runs).toBe(2);
      const again = await pay(r.url, key);
      expect(again).toMatchObject({ status: 201, replayed: true, body: { run: 2 } });
      expect(r.runs).toBe(2);
      // Exactly the second run's write stands, and the key records its response.
      expect((await pool.query('SELECT account, amount FROM entries')).rows).toEqual([{ account: 1, amount: 42 }]);
      const keys = await pool.query<{ state: string; status: number }>('SELECT state, status FROM fencekeeper_idempotency_keys WHERE key = $1', [key.slice(1, -1)]);
      expect(keys.rows).toEqual([{ state: 'completed', status: 201 }]);
    } finally {
      await r.served.close();
    }
  });

  it('a stale fencing token is refused before idempotency() sees the request: nothing is claimed', async () => {
    const resource = uniqueName('ledger');
    const r = await route(new PostgresIdempotencyStore(pool), resource);
    try {
      // Run 1 fails its commit, run 2 commits with token 9.
      await pay(r.url, `"${crypto.randomUUID()}"`, '9');
      await pay(r.url, `"${crypto.randomUUID()}"`, '9');
      const key = crypto.randomUUID();
      const stale = await pay(r.url, `"${key}"`, '8');
      expect(stale.status).toBe(409);
      expect(stale.body).toMatchObject({ code: 'STALE_TOKEN' });
      expect((await pool.query('SELECT 1 FROM fencekeeper_idempotency_keys WHERE key = $1', [key])).rowCount).toBe(0);
    } finally {
      await r.served.close();
    }
  });

  it('for contrast, MemoryIdempotencyStore (no transaction) replays the rolled-back success, as its documentation warns', async () => {
    const r = await route(new MemoryIdempotencyStore(), uniqueName('ledger'));
    try {
      await pool.query('DELETE FROM entries');
      const key = `"${crypto.randomUUID()}"`;
      expect((await pay(r.url, key)).status).toBe(201);
      const retry = await pay(r.url, key);
      expect(retry).toMatchObject({ status: 201, replayed: true, body: { run: 1 } });
      expect(r.runs).toBe(1);
      expect((await pool.query('SELECT count(*)::int AS n FROM entries')).rows).toEqual([{ n: 0 }]);
    } finally {
      await r.served.close();
    }
  });
});
