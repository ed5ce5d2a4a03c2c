// withFence on Kysely and on a pg.Pool at network latency, each beside its
// plain transaction, op by op rather than in blocks: every operation of one
// side is followed by one of each other side, through one delay proxy, at
// concurrency 1. On a machine whose load swings by tens from one second to
// the next (the shared 2-core one), blocks of 400 ms (run.ts) fall on
// different loads and their ratios swing by tens of percent; operations taken
// in turn share whatever load there is. Prints each side's median latency and
// the ratio baseline median / side median.
//
//   npm run build
//   set -a; . /work/srv/env; set +a
//   node node_modules/vite-node/vite-node.mjs test/bench/latency/interleaved.ts
//
// RTT (ms, default 0.5), N (operations per side, default 2500), BEFORE (a
// build of another commit, e.g. a copy of its dist/: adds "withFence (Kysely),
// BEFORE" beside the current build's). Asserts nothing.
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { median, quantile, startProxy } from './proxy.js';
import { postgresSetup, throughProxy } from './postgres-paths.js';

interface Fencing { withFence(db: unknown, resource: string, token: bigint, work: (trx: never) => Promise<unknown>): Promise<unknown> }

const url = process.env['DATABASE_URL'] ?? 'postgres://root@127.0.0.1:5432/test';
const RTT = Number(process.env['RTT'] ?? 0.5);
const N = Number(process.env['N'] ?? 2500);
const TOKEN = 34n;
const current = (await import(new URL('../../../dist/adapters/postgres/index.js', import.meta.url).href)) as Fencing;
const before = process.env['BEFORE'] === undefined ? undefined : ((await import(`${process.env['BEFORE']}/adapters/postgres/index.js`)) as Fencing);

const setup = await postgresSetup(url);
const proxy = await startProxy(`interleaved-${process.pid}`, (RTT * 1000) / 2, [Number(new URL(url).port || 5432)]);
const proxied = throughProxy(url, (target) => proxy.port(target));
const pools: pg.Pool[] = [];
const pool = (): pg.Pool => {
  const p = new pg.Pool({ connectionString: proxied, max: 1, idleTimeoutMillis: 0, options: `-c search_path=${setup.schema}` });
  pools.push(p);
  return p;
};
interface Db { docs: { id: number; body: string } }
const kyselies: Kysely<Db>[] = [];
const kysely = (): Kysely<Db> => {
  const k = new Kysely<Db>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: proxied, max: 1, idleTimeoutMillis: 0, options: `-c search_path=${setup.schema}` }) }) });
  kyselies.push(k);
  return k;
};
const body = (): string => Math.random().toString(36).slice(2);
const kyUpdate = (id: number) => sql`UPDATE docs SET body = ${body()} WHERE id = ${id}`;
const UPDATE = { name: 'il_update', text: 'UPDATE docs SET body = $1 WHERE id = $2' };

const kPlain = kysely();
const kFenced = kysely();
const pPlain = pool();
const pFenced = pool();
/** Each side with the name of its baseline. */
const sides: Record<string, { baseline: string; op: () => Promise<unknown> }> = {
  'db.transaction()': { baseline: 'db.transaction()', op: () => kPlain.transaction().execute((trx) => kyUpdate(1).execute(trx)) },
  'withFence (Kysely)': { baseline: 'db.transaction()', op: () => current.withFence(kFenced, 'docs:2', TOKEN, (trx: Kysely<Db>) => kyUpdate(2).execute(trx)) },
  'BEGIN; UPDATE; COMMIT': {
    baseline: 'BEGIN; UPDATE; COMMIT',
    op: async () => {
      const client = await pPlain.connect();
      try {
        await client.query('BEGIN');
        await client.query({ ...UPDATE, values: [body(), 3] });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    },
  },
  'withFence (pg.Pool)': { baseline: 'BEGIN; UPDATE; COMMIT', op: () => current.withFence(pFenced, 'docs:4', TOKEN, (client: pg.PoolClient) => client.query({ ...UPDATE, values: [body(), 4] })) },
};
if (before !== undefined) {
  const kBefore = kysely();
  sides['withFence (Kysely), BEFORE'] = { baseline: 'db.transaction()', op: () => before.withFence(kBefore, 'docs:5', TOKEN, (trx: Kysely<Db>) => kyUpdate(5).execute(trx)) };
}

try {
  const names = Object.keys(sides);
  for (let i = 0; i < 50; i += 1) for (const name of names) await sides[name]!.op();
  const latencies: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
  const load0 = loadavg()[0]!;
  for (let i = 0; i < N; i += 1) {
    for (let k = 0; k < names.length; k += 1) {
      const name = names[(i + k) % names.length]!;
      const start = performance.now();
      await sides[name]!.op();
      latencies[name]!.push(performance.now() - start);
    }
  }
  console.log(`RTT ${RTT} ms (proxy pid ${proxy.pid}), concurrency 1, ${N} operations per side taken in turn; load ${load0.toFixed(1)} -> ${loadavg()[0]!.toFixed(1)}`);
  console.log('side                          median ms   p25-p75 ms       baseline median / side median');
  for (const name of names) {
    const m = median(latencies[name]!);
    const b = median(latencies[sides[name]!.baseline]!);
    console.log(`${name.padEnd(28)}  ${m.toFixed(3).padStart(9)}   ${quantile(latencies[name]!, 0.25).toFixed(3)}-${quantile(latencies[name]!, 0.75).toFixed(3)}      ${(b / m).toFixed(3)}x of ${sides[name]!.baseline}`);
  }
} finally {
  for (const k of kyselies) await k.destroy();
  for (const p of pools) await p.end();
  await proxy.stop();
  await setup.drop();
}
