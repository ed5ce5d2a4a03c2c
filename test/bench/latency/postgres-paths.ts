// The PostgreSQL pairs of the latency bench, each through the delay proxy in front
// of the server (the application on one side, PostgreSQL one RTT away):
//   withFence (pg.Pool)   withFence(resource, token, the UPDATE) vs BEGIN; the UPDATE; COMMIT
//   withFence (Kysely)    the same on a Kysely instance vs db.transaction() with the same UPDATE
//   store via Express     a route behind fencing() + PostgresFenceStore writing through
//                         req.fencing.transaction vs the same route doing BEGIN; UPDATE; COMMIT itself
//                         (HTTP on loopback, direct; only PostgreSQL is behind the proxy)
//   row helper            fencedUpdate vs the plain UPDATE (a named prepared statement)
//   bound: fence SQL      the very messages withFence sends on its common path (an equal token: the
//                         probe), from a bare pg client with none of the library's code, vs the plain
//                         transaction: PostgreSQL's own cost of the fence at the same round trips
//                         (postgres-bench.mjs's `statements`), printed beside withFence (pg.Pool)
// Workers update rows of their own (worker w: row w + 1; resource docs:w), with a
// constant token: the same holder writing many times, the common case.
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { PostgresFenceStore, fencedUpdate, migrate, withFence } from '../../../adapters/postgres/index.js';
import { fencedHandler, fencing } from '../../../adapters/express/index.js';
import { OPEN_EQUAL } from '../../../adapters/postgres/fence/advance.js';
import type { PathPair } from './pairs.js';

const TOKEN = 34n;
const USUAL = 8; // postgres-bench.mjs's BENCH_CONNECTIONS
const UPDATE = { name: 'lat_plain_update', text: 'UPDATE docs SET body = $1 WHERE id = $2' };

/** A schema of its own with the docs table and the fences, made directly (not through the proxy). */
export async function postgresSetup(url: string): Promise<{ schema: string; drop(): Promise<void> }> {
  const schema = `fk_lat_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const pool = new pg.Pool({ connectionString: url, max: 1, options: `-c search_path=${schema}` });
  await migrate(pool);
  await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint NOT NULL DEFAULT 0)');
  await pool.query(`INSERT INTO docs (id, body, fencing_token) SELECT g, 'initial', 1 FROM generate_series(1, 1000) g`);
  await pool.end();
  return {
    schema,
    drop: async () => {
      await admin.query(`DROP SCHEMA ${schema} CASCADE`);
      await admin.end();
    },
  };
}

/** The URL with its port replaced by the proxy's. */
export function throughProxy(url: string, port: (target: number) => number): string {
  const u = new URL(url);
  u.port = String(port(Number(u.port || 5432)));
  return u.href;
}

const body = (): string => randomBytes(6).toString('hex');

export async function postgresPairs(url: string, schema: string): Promise<PathPair[]> {
  const newPool = (): pg.Pool => new pg.Pool({ connectionString: url, max: USUAL, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
  const pools: pg.Pool[] = [];
  const pool = (): pg.Pool => {
    const p = newPool();
    pools.push(p);
    return p;
  };

  // withFence on pg.Pool: one pool per side, so each side's connections stay warm and its own.
  const pgFenced = pool();
  const pgPlain = pool();
  const withFencePg: PathPair = {
    path: 'withFence (pg.Pool)',
    aim: 0.95,
    usual: USUAL,
    fenced: { name: 'withFence', op: (w) => withFence(pgFenced, `docs:${w + 1}`, TOKEN, (client) => client.query({ ...UPDATE, values: [body(), w + 1] })) },
    baseline: {
      name: 'BEGIN; UPDATE; COMMIT',
      op: async (w) => {
        const client = await pgPlain.connect();
        try {
          await client.query('BEGIN');
          await client.query({ ...UPDATE, values: [body(), w + 1] });
          await client.query('COMMIT');
        } finally {
          client.release();
        }
      },
    },
    close: async () => {},
  };

  interface Db {
    docs: { id: number; body: string; fencing_token: string };
  }
  const kFenced = new Kysely<Db>({ dialect: new PostgresDialect({ pool: pool() }) });
  const kPlain = new Kysely<Db>({ dialect: new PostgresDialect({ pool: pool() }) });
  const kyselyUpdate = (w: number) => sql`UPDATE docs SET body = ${body()} WHERE id = ${w + 1}`;
  const withFenceKysely: PathPair = {
    path: 'withFence (Kysely)',
    aim: 0.95,
    usual: USUAL,
    fenced: { name: 'withFence', op: (w) => withFence(kFenced, `docs:${w + 1}`, TOKEN, (trx) => kyselyUpdate(w).execute(trx)) },
    baseline: { name: 'db.transaction()', op: (w) => kPlain.transaction().execute((trx) => kyselyUpdate(w).execute(trx)) },
    close: async () => {},
  };

  // Express: the application in this process, HTTP on loopback (direct); PostgreSQL behind the proxy.
  const storePool = pool();
  const handPool = pool();
  const app = express();
  app.post(
    '/fenced/:w',
    fencing({ store: new PostgresFenceStore(storePool), resource: (req) => `docs:${Number(req.params['w']) + 1}` }),
    fencedHandler<pg.PoolClient>(async (req, res) => {
      await req.fencing.transaction.query({ ...UPDATE, values: [body(), Number(req.params['w']) + 1] });
      res.status(204).end();
    }),
  );
  app.post('/hand/:w', async (req, res) => {
    const client = await handPool.connect();
    try {
      await client.query('BEGIN');
      await client.query({ ...UPDATE, values: [body(), Number(req.params['w']) + 1] });
      await client.query('COMMIT');
      res.status(204).end();
    } finally {
      client.release();
    }
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = async (path: string, headers: Record<string, string> = {}): Promise<void> => {
    const response = await fetch(`${base}${path}`, { method: 'POST', headers });
    await response.arrayBuffer();
    if (response.status !== 204) throw new Error(`${path}: HTTP ${response.status}`);
  };
  const store: PathPair = {
    path: 'store via Express',
    aim: 0.95,
    usual: USUAL,
    fenced: { name: 'fencing() + PostgresFenceStore', op: (w) => post(`/fenced/${w}`, { 'fencing-token': String(TOKEN) }) },
    baseline: { name: 'the route by hand', op: (w) => post(`/hand/${w}`) },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };

  const rowFenced = pool();
  const rowPlain = pool();
  const rowHelper: PathPair = {
    path: 'row helper',
    aim: 0.95,
    usual: USUAL,
    fenced: { name: 'fencedUpdate', op: (w) => fencedUpdate(rowFenced, { table: 'docs', where: { id: w + 1 }, set: { body: body() }, token: TOKEN }) },
    baseline: { name: 'the plain UPDATE', op: (w) => rowPlain.query({ ...UPDATE, values: [body(), w + 1] }) },
    close: async () => {},
  };

  // The bound: withFence's messages on its common path from a bare client (the rows were admitted
  // at TOKEN by the withFence pair before this one runs, so the probe finds them).
  const bareFence = pool();
  const prepared = new WeakSet<pg.PoolClient>();
  const bound: PathPair = {
    path: 'bound: fence SQL, bare pg',
    aim: 0.95,
    usual: USUAL,
    fenced: {
      name: "withFence's messages",
      op: async (w) => {
        const client = await bareFence.connect();
        try {
          if (!prepared.has(client)) {
            await client.query(`PREPARE lat_equal (text, int8, text, text, text, text) AS ${OPEN_EQUAL}`);
            prepared.add(client);
          }
          const probed = await client.query(`BEGIN; EXECUTE lat_equal(E'docs:${w + 1}', ${TOKEN}::int8, NULL::text, NULL::text, NULL::text, NULL::text); SAVEPOINT fencekeeper_fenced`) as unknown as pg.QueryResult[];
          if (probed[1]?.rowCount !== 1) throw new Error('the bound\'s probe found no row at the token');
          await client.query({ ...UPDATE, values: [body(), w + 1] });
          await client.query('SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT');
        } finally {
          client.release();
        }
      },
    },
    baseline: withFencePg.baseline,
    close: async () => {},
  };

  let closed = false;
  const closeAll = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    await store.close();
    await kFenced.destroy();
    await kPlain.destroy();
    await Promise.all(pools.filter((p) => !p.ended).map((p) => p.end()));
  };
  // The last pair closes everything (pairs are measured in order, then closed in order).
  return [withFencePg, bound, withFenceKysely, store, { ...rowHelper, close: closeAll }];
}
