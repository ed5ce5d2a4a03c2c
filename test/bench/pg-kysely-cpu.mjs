// Benchmark: where withFence's time goes at concurrency 1 with no added
// latency (issue #35), on a pg.Pool and on a Kysely instance, each beside its
// plain transaction: per operation, the wall time, this process's CPU (the
// client: pg, Kysely, fencekeeper) and the CPU of the one PostgreSQL backend
// serving that side (server-cpu.mjs: /proc ticks, so the server must run on
// this machine). Every side has a pool of one connection of its own; the sides
// take turns in blocks, the starting one rotating each round.
//   pg.tx      BEGIN; UPDATE; COMMIT on a pg client
//   pg.fence   withFence(pg.Pool) around the same UPDATE
//   pg.bound   withFence's messages on its common path from a bare pg client
//   ky.tx      db.transaction() with the same UPDATE through Kysely
//   ky.fence   withFence(Kysely) around it
//
//   npm run build && node test/bench/pg-kysely-cpu.mjs
//
// DATABASE_URL, DIST, BEFORE (a build to run beside: pg.fence.before, ky.fence.before), R (rounds, default 5), SEC (seconds per block, default 1),
// MODES (comma-separated subset), PROFILE=<mode> (only that mode, in a loop:
// run under node --cpu-prof). Prints figures; asserts nothing.
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { backendCpuMs } from './server-cpu.mjs';

// DIST: another build to measure (a copy of dist/ from the commit before, say).
const dist = process.env.DIST ?? new URL('../../dist', import.meta.url).pathname;
const { migrate, withFence } = await import(`${dist}/adapters/postgres/index.js`);
const { OPEN_EQUAL } = await import(`${dist}/adapters/postgres/fence/advance.js`);
// BEFORE: a second build (the commit before, say): its withFence runs as pg.fence.before and ky.fence.before, beside.
const before = process.env.BEFORE === undefined ? undefined : await import(`${process.env.BEFORE}/adapters/postgres/index.js`);

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const ROUNDS = Number(process.env.R ?? 5);
const SEC = Number(process.env.SEC ?? 1);
const TOKEN = 34n;
const UPDATE = { name: 'kc_update', text: 'UPDATE docs SET body = $1 WHERE id = $2' };
const schema = `fk_kcpu_${randomBytes(4).toString('hex')}`;
const admin = new pg.Pool({ connectionString: url, max: 1 });
await admin.query(`CREATE SCHEMA ${schema}`);
const newPool = () => new pg.Pool({ connectionString: url, max: 1, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
const setup = newPool();
await migrate(setup);
await setup.query('CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint NOT NULL DEFAULT 0)');
await setup.query(`INSERT INTO docs (id, body, fencing_token) SELECT g, 'initial', 1 FROM generate_series(1, 10) g`);
// Every fence at TOKEN already, so each side starts on the common path (an equal token).
for (let id = 1; id <= 10; id += 1) await withFence(setup, `docs:${id}`, TOKEN, async () => {});
await setup.end();

const body = () => randomBytes(6).toString('hex');
const pools = [];
const pool = () => {
  const p = newPool();
  pools.push(p);
  return p;
};

const pgTx = pool();
const pgFence = pool();
const bare = pool();
const kyTxPool = pool();
const kyFencePool = pool();
const kyTx = new Kysely({ dialect: new PostgresDialect({ pool: kyTxPool }) });
const kyFence = new Kysely({ dialect: new PostgresDialect({ pool: kyFencePool }) });
const kyUpdate = (id) => sql`UPDATE docs SET body = ${body()} WHERE id = ${id}`;
let barePrepared = false;

const modes = {
  'pg.tx': {
    pool: pgTx,
    op: async () => {
      const client = await pgTx.connect();
      try {
        await client.query('BEGIN');
        await client.query({ ...UPDATE, values: [body(), 1] });
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    },
  },
  'pg.fence': { pool: pgFence, op: () => withFence(pgFence, 'docs:2', TOKEN, (client) => client.query({ ...UPDATE, values: [body(), 2] })) },
  'pg.bound': {
    pool: bare,
    op: async () => {
      const client = await bare.connect();
      try {
        if (!barePrepared) {
          await client.query(`PREPARE kc_equal (text, int8, text, text, text, text) AS ${OPEN_EQUAL}`);
          barePrepared = true;
        }
        const probed = await client.query(`BEGIN; EXECUTE kc_equal(E'docs:3', ${TOKEN}::int8, NULL::text, NULL::text, NULL::text, NULL::text); SAVEPOINT fencekeeper_fenced`);
        if (probed[1]?.rowCount !== 1) throw new Error('the bound\'s probe found no row at the token');
        await client.query({ ...UPDATE, values: [body(), 3] });
        await client.query('SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT');
      } finally {
        client.release();
      }
    },
  },
  'ky.tx': { pool: kyTxPool, op: () => kyTx.transaction().execute((trx) => kyUpdate(4).execute(trx)) },
  'ky.fence': { pool: kyFencePool, op: () => withFence(kyFence, 'docs:5', TOKEN, (trx) => kyUpdate(5).execute(trx)) },
};
if (before !== undefined) {
  const pgBefore = pool();
  const kyBeforePool = newPool(); // ended by kyBefore.destroy()
  const kyBefore = new Kysely({ dialect: new PostgresDialect({ pool: kyBeforePool }) });
  pools.push({ end: () => kyBefore.destroy(), ended: false });
  modes['pg.fence.before'] = { pool: pgBefore, op: () => before.withFence(pgBefore, 'docs:6', TOKEN, (client) => client.query({ ...UPDATE, values: [body(), 6] })) };
  modes['ky.fence.before'] = { pool: kyBeforePool, op: () => before.withFence(kyBefore, 'docs:7', TOKEN, (trx) => kyUpdate(7).execute(trx)) };
}

const selected = (process.env.MODES ?? Object.keys(modes).join(',')).split(',');
const load = () => loadavg().map((l) => l.toFixed(1)).join(' ');

// Warm every side (prepares, the probe's guess, JIT) before anything is measured.
for (const name of selected) for (let i = 0; i < 300; i += 1) await modes[name].op();

if (process.env.PROFILE) {
  const op = modes[process.env.PROFILE].op;
  // The loop alone is profiled (not the start-up and warm-up): node:inspector's Profiler.
  const { Session } = await import('node:inspector/promises');
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
  const until = performance.now() + SEC * 1000 * ROUNDS;
  let n = 0;
  while (performance.now() < until) {
    await op();
    n += 1;
  }
  const { profile } = await session.post('Profiler.stop');
  const file = `${process.env.PROFILE_DIR ?? '.'}/${process.env.PROFILE}.cpuprofile`;
  (await import('node:fs')).writeFileSync(file, JSON.stringify(profile));
  console.log(`${process.env.PROFILE}: ${n} ops, profile ${file}, ${(await import('node:os')).loadavg()[0].toFixed(1)} load`);
  console.log(`${process.env.PROFILE}: ${n} ops, ${((SEC * 1000 * ROUNDS * 1000) / n).toFixed(1)} us/op, load ${load()}`);
} else {
  const servers = {};
  for (const name of selected) servers[name] = await backendCpuMs(modes[name].pool, 1);
  const totals = Object.fromEntries(selected.map((name) => [name, { ops: 0, ms: 0, clientMs: 0, serverMs: 0, perRound: [] }]));
  console.log(`withFence at RTT 0, concurrency 1: ${ROUNDS} rounds x ${SEC} s per mode; load ${load()}`);
  for (let round = 0; round < ROUNDS; round += 1) {
    for (let k = 0; k < selected.length; k += 1) {
      const name = selected[(round + k) % selected.length];
      const op = modes[name].op;
      const server0 = servers[name]();
      const cpu0 = process.cpuUsage();
      const start = performance.now();
      const deadline = start + SEC * 1000;
      let ops = 0;
      while (performance.now() < deadline) {
        await op();
        ops += 1;
      }
      const elapsed = performance.now() - start;
      const cpu = process.cpuUsage(cpu0);
      const t = totals[name];
      t.ops += ops;
      t.ms += elapsed;
      t.clientMs += (cpu.user + cpu.system) / 1000;
      t.serverMs += servers[name]() - server0;
      t.perRound.push((elapsed * 1000) / ops);
    }
  }
  const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log('mode        us/op (median round)   client CPU us/op   server CPU us/op');
  for (const name of selected) {
    const t = totals[name];
    console.log(`${name.padEnd(10)}  ${med(t.perRound).toFixed(1).padStart(20)}   ${((t.clientMs * 1000) / t.ops).toFixed(1).padStart(16)}   ${((t.serverMs * 1000) / t.ops).toFixed(1).padStart(16)}`);
  }
  console.log(`load ${load()}`);
}
await kyTx.destroy();
await kyFence.destroy();
await Promise.all(pools.filter((p) => !p.ended).map((p) => p.end()));
await admin.query(`DROP SCHEMA ${schema} CASCADE`);
await admin.end();
