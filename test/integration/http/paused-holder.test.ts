// The paused holder end to end through the HTTP guards other than Express's
// own suite: Fastify 5, Fastify 4, Hono over @hono/node-server and Express 5,
// each guarding one route with MemoryFenceStore and one with
// PostgresFenceStore. A holder process takes a ZooKeeper lock (standalone,
// through the CLI's registry of sources), is SIGSTOPped past its session;
// the next holder is granted the lock and writes through every route
// (accepted); the holder is SIGCONTed and writes with its old token, and
// every route answers 409 problem+json STALE_TOKEN; the resource keeps the
// next holder's write (a Map for the memory routes, a row written through
// the fence's own transaction for the PostgreSQL ones).
import { getRequestListener } from '@hono/node-server';
import express from 'express';
import type { FastifyInstance } from 'fastify';
import { Hono } from 'hono';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as expressGuards from '../../../adapters/express/index.js';
import * as fastifyGuards from '../../../adapters/fastify/index.js';
import * as honoGuards from '../../../adapters/hono/index.js';
import { PostgresFenceStore, migrate } from '../../../adapters/postgres/index.js';
import type { FenceStore } from '../../../src/index.js';
import type { HolderProcess } from '../../../src/testing/index.js';
import { pauseSourceHolder } from '../../helpers/paused-source-holder.js';
import { serve, type Served } from '../../helpers/serve.js';
import { serverEnvironment, testServers } from '../../helpers/servers.js';
import { ZOOKEEPER } from '../../helpers/sources.js';
import { uniqueLockName, uniqueTable } from '../../helpers/unique.js';

const FIXTURE = new URL('../../fixtures/http-holder.mjs', import.meta.url).pathname;
const STORES = ['memory', 'postgres'] as const;
type StoreName = (typeof STORES)[number];

let pool: pg.Pool;
const table = uniqueTable('http_paused');
const holders: HolderProcess[] = [];
const closers: (() => Promise<void>)[] = [];
/** Per framework: its base URL. */
const bases = new Map<string, string>();
/** What the memory routes wrote: resource -> the writer's token. */
const memoryWrites = new Map<string, string>();

/** The handler's write: to the Map, or through the fence's own transaction. */
async function write(store: StoreName, resource: string, token: bigint, transaction: unknown): Promise<void> {
  if (store === 'memory') memoryWrites.set(resource, String(token));
  else
    await (transaction as pg.PoolClient).query({
      text: `INSERT INTO ${table} (resource, writer) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET writer = EXCLUDED.writer`,
      values: [resource, String(token)],
    });
}

function storeFor(name: StoreName): FenceStore<unknown> {
  return name === 'memory' ? new fastifyGuards.MemoryFenceStore() : (new PostgresFenceStore(pool) as FenceStore<unknown>);
}

async function fastifyServer(label: string, load: () => Promise<{ default: unknown }>): Promise<void> {
  const Fastify = (await load()).default as (options?: object) => FastifyInstance;
  const app = Fastify();
  for (const name of STORES) {
    await app.register(async (scope) => {
      await scope.register(fastifyGuards.fencing, { store: storeFor(name), resource: (request) => `${label}/${name}/${(request.params as { id: string }).id}` });
      scope.put(`/${name}/:id`, async (request) => {
        await write(name, request.fencing!.resource, request.fencing!.token, request.fencing!.transaction);
        return 'ok';
      });
    });
  }
  await app.listen({ port: 0, host: '127.0.0.1' });
  closers.push(() => app.close());
  bases.set(label, `http://127.0.0.1:${(app.server.address() as { port: number }).port}`);
}

async function honoServer(): Promise<void> {
  const app = new Hono<honoGuards.FencingEnv>();
  for (const name of STORES) {
    app.put(`/${name}/:id`, honoGuards.fencing({ store: storeFor(name), resource: (c) => `hono/${name}/${c.req.param('id')}` }), async (c) => {
      const fencing = c.get('fencing');
      await write(name, fencing.resource, fencing.token, fencing.transaction);
      return c.text('ok');
    });
  }
  const served: Served = await serve(getRequestListener(app.fetch));
  closers.push(() => served.close());
  bases.set('hono', `http://127.0.0.1:${served.port}`);
}

async function expressServer(): Promise<void> {
  const app = express();
  for (const name of STORES) {
    app.put(`/${name}/:id`, expressGuards.fencing({ store: storeFor(name), resource: (req) => `express/${name}/${req.params.id}` }), (req, res, next) => {
      const fencing = (req as unknown as { fencing: expressGuards.FencingContext }).fencing;
      write(name, fencing.resource, fencing.token, fencing.transaction).then(() => res.send('ok'), next);
    });
  }
  const served = await serve(app);
  closers.push(() => served.close());
  bases.set('express', `http://127.0.0.1:${served.port}`);
}

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: testServers().databaseUrl, max: 8 });
  await migrate(pool);
  await pool.query(`CREATE TABLE ${table} (resource text PRIMARY KEY, writer text NOT NULL)`);
  await fastifyServer('fastify5', () => import('fastify'));
  await fastifyServer('fastify4', () => import('fastify4'));
  await honoServer();
  await expressServer();
}, 60_000);
afterAll(async () => {
  await Promise.all(holders.map((h) => h.stop()));
  for (const close of closers) await close();
  await pool?.query(`DROP TABLE IF EXISTS ${table}`);
  await pool?.end();
}, 60_000);

describe('the paused holder through the HTTP guards (ZooKeeper standalone)', () => {
  it('a holder stopped past its session: the next holder is accepted by every route, the resumed holder refused 409 STALE_TOKEN, the next write kept', async () => {
    const name = uniqueLockName('http_paused');
    const routes = [...bases].flatMap(([framework, base]) => STORES.map((store) => ({ framework, store, url: `${base}/${store}/${name}`, resource: `${framework}/${store}/${name}` })));
    const run = await pauseSourceHolder(ZOOKEEPER, {
      lock: name,
      fixture: FIXTURE,
      env: { ...serverEnvironment(), FK_URLS: routes.map((r) => r.url).join(',') },
      holders,
      async whileStopped(next) {
        for (const route of routes) {
          const answer = await fetch(route.url, { method: 'PUT', headers: fastifyGuards.fencingHeaders(next) });
          expect(`${route.framework}/${route.store}: ${answer.status} ${await answer.text()}`).toBe(`${route.framework}/${route.store}: 200 ok`);
        }
      },
    });
    expect(run.stoppedAtGrant).toBe(true);
    expect(run.nextToken > run.oldToken, `successor ${run.nextToken} after ${run.oldToken}`).toBe(true);
    const report = run.report as unknown as { held: boolean; aborted: boolean; token: bigint; answers: { url: string; status: number; contentType: string | null; body: string }[] };
    expect(report.token).toBe(run.oldToken);
    expect(report.held).toBe(false);
    expect(report.answers.map((a) => a.url)).toEqual(routes.map((r) => r.url));
    for (const [i, answer] of report.answers.entries()) {
      const route = routes[i]!;
      const where = `${route.framework}/${route.store}`;
      expect(answer.status, where).toBe(409);
      expect(answer.contentType, where).toBe('application/problem+json');
      expect(JSON.parse(answer.body), where).toMatchObject({
        type: 'about:blank',
        status: 409,
        code: 'STALE_TOKEN',
        resource: route.resource,
        presented: String(run.oldToken),
        current: String(run.nextToken),
      });
    }
    // The resource: the next holder's write, never the resumed holder's.
    for (const route of routes.filter((r) => r.store === 'memory')) expect(memoryWrites.get(route.resource), route.resource).toBe(String(run.nextToken));
    const rows = await pool.query<{ resource: string; writer: string }>(`SELECT resource, writer FROM ${table} ORDER BY resource`);
    expect(rows.rows).toEqual(
      routes
        .filter((r) => r.store === 'postgres')
        .map((r) => ({ resource: r.resource, writer: String(run.nextToken) }))
        .sort((a, b) => (a.resource < b.resource ? -1 : 1)),
    );
  }, 180_000);
});
