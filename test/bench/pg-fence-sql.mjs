// Benchmark: cheaper fence SQL, measured (issue #14). Candidates for the
// statement that opens a fenced transaction, each in BEGIN's message of the
// plain BEGIN / UPDATE / COMMIT, on one pool, taking turns (pg-rounds.mjs):
//   tx    the plain transaction
//   sel1  BEGIN; SELECT 1                     (the cheapest statement of its own)
//   adv   BEGIN; EXECUTE the fence statement  (fence/advance.ts OPEN_ADVANCE: the upsert,
//                                              an equal token locks the row without rewriting it)
//   cte   one statement: SELECT ... FOR NO KEY UPDATE of the row when it carries the equal
//         token, at READ COMMITTED, with a passing binding; the upsert only when that finds
//         no row (the same outcomes: no row for the equal token, the row otherwise)
//   lck   only that SELECT ... FOR NO KEY UPDATE (fence/advance.ts OPEN_EQUAL, the probe
//         withFence and the store now open an equal token with: a fence only together with
//         the fall-back to the upsert when it finds no row, which fence/open.ts sends next)
//   nobind  lck without the binding check (MODES=... to run it; not a fence either)
//   bare    the row lock alone: no mark, binding or isolation checked
// Server CPU per transaction is the figure to read.
// First measured on the 2-core machine (December 2026, load 5-7, four runs): cte's server
// CPU per transaction was -3% to +12% of adv's, lck's no lower than adv's, and the library
// kept the upsert. cte cannot gain: PostgreSQL runs a data-modifying WITH to completion
// whether or not the query reads it, so the INSERT's machinery runs every time. Measured
// again (load 1-4, three runs), lck came out 1-24 µs per transaction below adv, and a bare
// row lock without the binding and isolation checks 40-55 µs below it (the binding's
// NOT EXISTS about 17 of that); the open now sends the probe as a statement of its own,
// with the upsert only after a miss.
// SP=1 adds the savepoint and its release to the fence modes, as withFence sends them.
//
//   npm run build && node test/bench/pg-fence-sql.mjs
//
// DATABASE_URL, C (connections, default 8), R (rounds, default 3), SEC (per block, default 2),
// MODES (comma-separated subset). A script that prints figures: nothing asserts on time.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { measureModes, ratioText, summarize } from './pg-rounds.mjs';
const { migrate } = await import('../../dist/adapters/postgres/index.js');
const { OPEN_ADVANCE } = await import('../../dist/adapters/postgres/fence/advance.js');
const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const schema = `fk_pgsql_${randomBytes(4).toString('hex')}`;
const admin = new pg.Pool({ connectionString: url, max: 1 });
await admin.query(`CREATE SCHEMA ${schema}`);
const C = Number(process.env.C ?? 8);
const pool = new pg.Pool({ connectionString: url, max: C, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
const UPDATE = { name: 'u', text: 'UPDATE docs SET body = $1 WHERE id = $2' };
const BIND = `SELECT 1 FROM fencekeeper_fence_bindings b WHERE b.resource = $1 AND ($3::text IS NULL OR (b.kind, b.lock, b.source_kind, b.source_id) IS DISTINCT FROM ($3::text, $4::text, $5::text, $6::text))`;
const LOCK = `SELECT f.token FROM fencekeeper_fences f WHERE f.resource = $1::text AND f.token = $2::int8 AND current_setting('transaction_isolation') = 'read committed' AND NOT EXISTS (${BIND}) FOR NO KEY UPDATE OF f`;
const CTE = `WITH locked AS (${LOCK}),
advanced AS (${OPEN_ADVANCE.replace("SELECT $1::text, CASE", "SELECT $1::text, CASE").replace(/\nON CONFLICT/, "\nWHERE NOT EXISTS (SELECT 1 FROM locked)\nON CONFLICT")})
SELECT token, previous FROM advanced`;
const PREPS = {
  adv: `PREPARE adv (text, int8, text, text, text, text) AS ${OPEN_ADVANCE}`,
  cte: `PREPARE cte (text, int8, text, text, text, text) AS ${CTE}`,
  lck: `PREPARE lck (text, int8, text, text, text, text) AS ${LOCK}`,
  nobind: `PREPARE nobind (text, int8) AS SELECT f.token FROM fencekeeper_fences f WHERE f.resource = $1::text AND f.token = $2::int8 AND current_setting('transaction_isolation') = 'read committed' FOR NO KEY UPDATE OF f`,
  bare: 'PREPARE bare (text) AS SELECT 1 FROM fencekeeper_fences f WHERE f.resource = $1::text FOR NO KEY UPDATE OF f',
};
if (process.env.SHOW) { console.log(CTE); }
const prepared = new WeakSet();
const withClient = async (fn) => { const c = await pool.connect(); try { if (!prepared.has(c)) { for (const p of Object.values(PREPS)) await c.query(p); prepared.add(c); } await fn(c); } finally { c.release(); } };
const SP = process.env.SP ? '; SAVEPOINT s' : '';
const CLOSE = process.env.SP ? 'SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT s; COMMIT' : 'COMMIT';
const three = (open, close = CLOSE, check) => (id, body) => withClient(async (c) => { const r = await c.query(open(id)); if (check) check(r, id); await c.query({ ...UPDATE, values: [body, id] }); await c.query(close); });
const noRow = (r) => { const rows = Array.isArray(r) ? r[1].rows : []; if (rows.length !== 0 && rows[0].token !== '34') throw new Error('refused ' + JSON.stringify(rows)); };
const all = {
  tx: three(() => 'BEGIN', 'COMMIT'),
  sel1: three(() => 'BEGIN; SELECT 1', 'COMMIT'),
  adv: three((id) => `BEGIN; EXECUTE adv(E'docs:${id}', 34, NULL, NULL, NULL, NULL)${SP}`, CLOSE, noRow),
  cte: three((id) => `BEGIN; EXECUTE cte(E'docs:${id}', 34, NULL, NULL, NULL, NULL)${SP}`, CLOSE, noRow),
  lck: three((id) => `BEGIN; EXECUTE lck(E'docs:${id}', 34, NULL, NULL, NULL, NULL)${SP}`),
  nobind: three((id) => `BEGIN; EXECUTE nobind(E'docs:${id}', 34)${SP}`),
  bare: three((id) => `BEGIN; EXECUTE bare(E'docs:${id}')${SP}`),
};
const MODES = Object.fromEntries((process.env.MODES ?? 'tx,sel1,adv,cte,lck').split(',').map((m) => [m, all[m]]));
try {
  await migrate(pool);
  await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text)');
  await pool.query(`INSERT INTO docs SELECT g, 'i' FROM generate_series(1, 1000) g`);
  await pool.query(`INSERT INTO fencekeeper_fences (resource, token) SELECT 'docs:' || g, 34 FROM generate_series(1, 1000) g`);
  await pool.query('VACUUM ANALYZE docs'); await pool.query('VACUUM ANALYZE fencekeeper_fences');
  const { totals } = await measureModes(pool, { modes: MODES, connections: C, rounds: Number(process.env.R ?? 3), seconds: Number(process.env.SEC ?? 2), randomId: () => 1 + Math.floor(Math.random() * 1000) });
  const s = summarize(totals);
  for (const [n, v] of Object.entries(s)) console.log(`${n.padEnd(8)} ${v.tps.toFixed(0).padStart(6)}  srv ${v.serverUs.toFixed(1).padStart(6)}  cli ${v.clientUs.toFixed(1).padStart(6)}  /tx ${ratioText(s, n, 'tx')}`);
  console.log('load', (await import('node:os')).loadavg().map((x) => x.toFixed(1)).join(' '));
} finally { await pool.end(); await admin.query(`DROP SCHEMA ${schema} CASCADE`); await admin.end(); }
