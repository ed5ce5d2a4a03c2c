// Benchmark: what a table binding costs the row helpers. One run, one
// database, one connection count for every mode:
//   plain        UPDATE docs SET body = $1 WHERE id = $2  (named prepared statement)
//   <op>:base    the row helper of a baseline build (FK_POSTGRES_BASELINE: e.g. main's,
//                whose statement has no binding check), on an unbound table
//   <op>:unbound this build's row helper on a table never bound, a bare token
//   <op>:bound   this build's row helper on a table bound to the lock, its sequencer
// for <op> in fencedUpdate and fencedUpsert (BENCH_OPS). Each mode has its own
// table of BENCH_ROWS rows; workers write random rows by primary key with the
// same token (the same holder writing many times, the common case).
//
//   npm run build
//   mkdir -p .tmp/base && git archive main src adapters migrations tsconfig.json tsconfig.build.json package.json | tar -x -C .tmp/base \
//     && ln -s ../../node_modules .tmp/base/node_modules && (cd .tmp/base && node ../../node_modules/typescript/bin/tsc -p tsconfig.build.json)
//   FK_POSTGRES_BASELINE=$PWD/.tmp/base/dist/adapters/postgres/index.js node test/bench/pg-rows-bench.mjs
//
// Without FK_POSTGRES_BASELINE the :base modes are left out. DATABASE_URL,
// BENCH_CONNECTIONS (default 8), BENCH_SECONDS (per block, default 2),
// BENCH_ROUNDS (default 5), BENCH_ROWS (default 1000). Modes take turns in
// rotating blocks so load from elsewhere falls on all alike; the figures are
// totals over all blocks, the median of per-round ratios, and CPU per
// operation (the pool's server backends from /proc when the server is local,
// and this process), which swings far less than throughput on a busy machine.
// A script that prints figures: nothing asserts on time.
import { loadavg } from 'node:os';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { measureModes, ratioText, summarize } from './pg-rounds.mjs';

const adapterPath = process.env.FK_POSTGRES_ADAPTER ?? new URL('../../dist/adapters/postgres/index.js', import.meta.url).href;
const current = await import(adapterPath);
const base = process.env.FK_POSTGRES_BASELINE === undefined ? undefined : await import(process.env.FK_POSTGRES_BASELINE);

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const connections = Number(process.env.BENCH_CONNECTIONS ?? 8);
const seconds = Number(process.env.BENCH_SECONDS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const rowCount = Number(process.env.BENCH_ROWS ?? 1000);
const ops = (process.env.BENCH_OPS ?? 'fencedUpdate,fencedUpsert').split(',');
const schema = `fk_pgrows_${randomBytes(4).toString('hex')}`;
const TOKEN = 34n;
const BINDING = { kind: 'lock', lock: 'bench/rows', source: { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-0000000bench' } };
const SEQUENCER = { kind: 'lock', name: BINDING.lock, source: BINDING.source, token: TOKEN };

const admin = new pg.Pool({ connectionString: url, max: 1 });
await admin.query(`CREATE SCHEMA ${schema}`);
// idleTimeoutMillis 0: the same backends serve every block, so their CPU can be read.
const pool = new pg.Pool({ connectionString: url, max: connections, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
const randomId = () => 1 + Math.floor(Math.random() * rowCount);

const write = {
  fencedUpdate: (adapter, table, token) => (id, body) => adapter.fencedUpdate(pool, { table, where: { id }, set: { body }, token }),
  fencedUpsert: (adapter, table, token) => (id, body) => adapter.fencedUpsert(pool, { table, values: { id, body }, key: ['id'], token }),
};

const MODES = { plain: (id, body) => pool.query({ name: 'bench_plain_update', text: 'UPDATE docs_plain SET body = $1 WHERE id = $2', values: [body, id] }) };
const tables = ['docs_plain'];
for (const op of ops) {
  if (base !== undefined) { MODES[`${op}:base`] = write[op](base, `docs_${op.toLowerCase()}_base`, TOKEN); tables.push(`docs_${op.toLowerCase()}_base`); }
  MODES[`${op}:unbound`] = write[op](current, `docs_${op.toLowerCase()}_unbound`, TOKEN); tables.push(`docs_${op.toLowerCase()}_unbound`);
  MODES[`${op}:bound`] = write[op](current, `docs_${op.toLowerCase()}_bound`, SEQUENCER); tables.push(`docs_${op.toLowerCase()}_bound`);
}

try {
  await current.migrate(pool);
  for (const table of tables) {
    await pool.query(`CREATE TABLE ${table} (id int PRIMARY KEY, body text, fencing_token bigint NOT NULL DEFAULT 0)`);
    await pool.query(`INSERT INTO ${table} (id, body, fencing_token) SELECT g, 'initial', 1 FROM generate_series(1, ${rowCount}) g`);
    await pool.query(`VACUUM ANALYZE ${table}`);
    if (table.endsWith('_bound')) await current.bindTable(pool, table, BINDING);
  }
  // Bindings of other tables, so the probe is a real index lookup rather than a scan of an empty table.
  for (let i = 0; i < 200; i += 1) {
    await pool.query(`CREATE TABLE other_${i} (id int PRIMARY KEY, fencing_token bigint)`);
    await current.bindTable(pool, `other_${i}`, BINDING);
  }
  await pool.query('VACUUM ANALYZE fencekeeper_table_bindings');

  const { totals, loadBefore } = await measureModes(pool, { modes: MODES, connections, rounds, seconds, randomId });

  const { rows: [{ server_version: version }] } = await pool.query('SHOW server_version');
  console.log(`PostgreSQL ${version}, ${connections} connections, ${rounds} rounds x ${seconds}s per mode, ${rowCount} rows per table`);
  console.log('mode                    tx/s   server CPU us/op   client CPU us/op   ops');
  const summary = summarize(totals);
  for (const [name, s] of Object.entries(summary)) {
    console.log(`${name.padEnd(22)} ${s.tps.toFixed(0).padStart(6)}   ${s.serverUs.toFixed(1).padStart(16)}   ${s.clientUs.toFixed(1).padStart(16)}   ${s.ops}`);
  }
  const ratio = (a, b) => ratioText(summary, a, b);
  for (const op of ops) {
    if (base !== undefined) console.log(`${op}: unbound / base: ${ratio(`${op}:unbound`, `${op}:base`)}`);
    if (base !== undefined) console.log(`${op}: bound / base:   ${ratio(`${op}:bound`, `${op}:base`)}`);
    console.log(`${op}: bound / unbound: ${ratio(`${op}:bound`, `${op}:unbound`)}`);
  }
  console.log(`fencedUpdate:unbound / plain: ${ratio(`${ops[0]}:unbound`, 'plain')}`);
  console.log(`load average before the rounds: ${loadBefore.map((l) => l.toFixed(1)).join(' ')}; at the end: ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
} finally {
  await pool.end();
  await admin.query(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
