// Benchmark: what fencing costs in PostgreSQL. One run, one database, one
// connection count for every mode:
//   plain        UPDATE ... SET body = $1 WHERE id = $2          (named prepared statement)
//   fencedUpdate the same update through fencedUpdate() (fence condition + token write)
//   tx           BEGIN; the plain UPDATE; COMMIT                 (a checked-out client)
//   oneMore      tx with a trivial `SELECT 1` travelling in BEGIN's message: the same round trips
//                and one statement more. The bound of any design that checks the fence in a
//                statement of its own: withFence / oneMore is what the fence costs beyond the
//                cheapest such statement, statements / oneMore what PostgreSQL's fence work does.
//   rowLock      tx with `EXECUTE <SELECT 1 FROM fencekeeper_fences WHERE resource = $1 FOR NO KEY UPDATE>`
//                in BEGIN's message: the row lock alone, no mark compared, no savepoint. Not a fence;
//                the bound of any design that serializes holders with the fence row's lock, as
//                withFence's guarantee needs (a concurrent holder must wait for our commit).
//   withFence    withFence(resource, token, the plain UPDATE)    (the same three messages as tx: BEGIN
//                travels with the fence statement and a savepoint, and the closing message replaces COMMIT)
//   statements   the very messages withFence sends, from a bare pg client with none of the library's
//                code: `BEGIN; EXECUTE <fence statement>; SAVEPOINT`, the UPDATE, `SET CONSTRAINTS ALL
//                IMMEDIATE; RELEASE SAVEPOINT; COMMIT`. The fence statement is the upsert for a row's
//                first admission here and the probe (an equal token's row lock, fence-open.ts) after
//                it, as withFence chooses. statements / tx is what PostgreSQL's work for the fence
//                costs (the bound for withFence / tx at the same round trips); withFence / statements
//                is what the library adds on top.
//   baseline     withFence from another build (FK_POSTGRES_BASELINE: the path of its
//                dist/adapters/postgres/index.js), when given: withFence / baseline compares two
//                versions in one run.
//
//   npm run build && node test/bench/postgres-bench.mjs
//
// DATABASE_URL (default postgres://root@127.0.0.1:5432/test), BENCH_CONNECTIONS
// (pool size = concurrent workers, default 8), BENCH_SECONDS (per block,
// default 2), BENCH_ROUNDS (default 5), BENCH_ROWS (default 1000),
// FK_POSTGRES_ADAPTER (path of the built adapter; default ../../dist/...).
// Each worker updates random rows by primary key (withFence: the resource is
// the row, so holders rarely contend and the figure is the statement's cost,
// not lock waits); the token stays the same (the same holder writing many
// times, the common case). Modes take turns in rotating blocks, so load from
// elsewhere on the machine falls on all of them alike; the totals over all
// blocks are reported, with the median of the per-round ratios (each round's
// blocks run back to back, so a ratio within a round sees nearly the same
// machine). On a busy machine transactions per second swing; CPU time per
// operation swings far less, so the script also prints the server backends'
// CPU (from /proc/<pid>/stat of the pool's backends, when the server is local)
// and this process's CPU per operation.
// Only the pg.Pool path is measured here; PostgresFenceStore's figures are in
// pg-store-bench.mjs.
// A script that prints figures: nothing asserts on time.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { measureModes, ratioText, summarize } from './pg-rounds.mjs';

const adapterPath = process.env.FK_POSTGRES_ADAPTER ?? new URL('../../dist/adapters/postgres/index.js', import.meta.url).href;
const { migrate, fencedUpdate, withFence } = await import(adapterPath);
// The fence statement withFence prepares on each connection (fence/open.ts), for the `statements` mode:
// fence/advance.js's (an equal token only locks the row); in builds from before the feature folders
// fence-advance.js's, and in builds from before the probe fence-row.js's.
const advanceModule = await import(new URL('fence/advance.js', adapterPath).href)
  .catch(() => import(new URL('fence-advance.js', adapterPath).href))
  .catch(() => undefined);
const FENCE_STATEMENT = advanceModule?.OPEN_ADVANCE ?? (await import(new URL('fence-row.js', adapterPath).href)).ADVANCE_CHECKED;
// The probe withFence opens with once this process has admitted the token on the row (undefined in a build without it).
const EQUAL_STATEMENT = advanceModule?.OPEN_EQUAL;
const baselinePath = process.env.FK_POSTGRES_BASELINE;
const baseline = baselinePath === undefined ? undefined : (await import(baselinePath)).withFence;

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const connections = Number(process.env.BENCH_CONNECTIONS ?? 8);
const seconds = Number(process.env.BENCH_SECONDS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const rowCount = Number(process.env.BENCH_ROWS ?? 1000);
const schema = `fk_pgbench_${randomBytes(4).toString('hex')}`;
const TOKEN = 34n;

const loadAtStart = (await import('node:os')).loadavg().map((l) => l.toFixed(1)).join(' ');
const admin = new pg.Pool({ connectionString: url, max: 1 });
await admin.query(`CREATE SCHEMA ${schema}`);
// idleTimeoutMillis 0: the same backends serve every block, so their CPU can be read.
const pool = new pg.Pool({ connectionString: url, max: connections, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });

const UPDATE = { name: 'bench_plain_update', text: 'UPDATE docs SET body = $1 WHERE id = $2' };
const randomId = () => 1 + Math.floor(Math.random() * rowCount);

const MODES = {
  plain: async (id, body) => {
    await pool.query({ ...UPDATE, values: [body, id] });
  },
  fencedUpdate: async (id, body) => {
    await fencedUpdate(pool, { table: 'docs', where: { id }, set: { body }, token: TOKEN });
  },
  tx: async (id, body) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query({ ...UPDATE, values: [body, id] });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  },
  oneMore: async (id, body) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN; SELECT 1');
      await client.query({ ...UPDATE, values: [body, id] });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  },
  rowLock: async (id, body) => {
    const client = await pool.connect();
    try {
      if (!lockPrepared.has(client)) {
        await client.query('PREPARE bench_lock (text) AS SELECT 1 FROM fencekeeper_fences WHERE resource = $1 FOR NO KEY UPDATE');
        lockPrepared.add(client);
      }
      const locked = await client.query(`BEGIN; EXECUTE bench_lock(E'docs:${id}')`);
      if (locked[1].rowCount !== 1) throw new Error('the bench\'s row lock found no fence row');
      await client.query({ ...UPDATE, values: [body, id] });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  },
  withFence: async (id, body) => {
    await withFence(pool, `docs:${id}`, TOKEN, (client) => client.query({ ...UPDATE, values: [body, id] }));
  },
  statements: async (id, body) => {
    const client = await pool.connect();
    try {
      if (!prepared.has(client)) {
        await client.query(`PREPARE bench_fence (text, int8, text, text, text, text) AS ${FENCE_STATEMENT}`);
        if (EQUAL_STATEMENT !== undefined) await client.query(`PREPARE bench_equal (text, int8, text, text, text, text) AS ${EQUAL_STATEMENT}`);
        prepared.add(client);
      }
      const args = `(E'docs:${id}', ${TOKEN}::int8, NULL::text, NULL::text, NULL::text, NULL::text)`;
      if (EQUAL_STATEMENT !== undefined && admitted.has(id)) {
        const probed = await client.query(`BEGIN; EXECUTE bench_equal${args}; SAVEPOINT fencekeeper_fenced`);
        // Missed (a row's first advance still in flight on another connection when the probe's snapshot was
        // taken): as withFence, roll back and open with the upsert in the same message.
        if (probed[1].rowCount !== 1) await client.query(`ROLLBACK; BEGIN; EXECUTE bench_fence${args}; SAVEPOINT fencekeeper_fenced`);
      } else {
        const opened = await client.query(`BEGIN; EXECUTE bench_fence${args}; SAVEPOINT fencekeeper_fenced`);
        // Admitted: no row (the equal token, fence/advance.js), or a row carrying our token (the statement before it).
        const row = opened[1].rows[0];
        if (row !== undefined && row.token !== undefined && row.token !== String(TOKEN)) throw new Error('the bench\'s fence statement was refused');
        admitted.add(id);
      }
      await client.query({ ...UPDATE, values: [body, id] });
      await client.query('SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT');
    } finally {
      client.release();
    }
  },
};
const prepared = new WeakSet();
const lockPrepared = new WeakSet();
/** Rows the statements mode has admitted TOKEN on (withFence keeps the same guess, per resource). */
const admitted = new Set();
if (baseline !== undefined) {
  MODES.baseline = async (id, body) => {
    await baseline(pool, `docs:${id}`, TOKEN, (client) => client.query({ ...UPDATE, values: [body, id] }));
  };
}

try {
  await migrate(pool);
  await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text, fencing_token bigint NOT NULL DEFAULT 0)');
  await pool.query(`INSERT INTO docs (id, body, fencing_token) SELECT g, 'initial', 1 FROM generate_series(1, ${rowCount}) g`);
  await pool.query(`INSERT INTO fencekeeper_fences (resource, token) SELECT 'docs:' || g, 1 FROM generate_series(1, ${rowCount}) g`);
  await pool.query('VACUUM ANALYZE docs');
  await pool.query('VACUUM ANALYZE fencekeeper_fences');

  const { totals } = await measureModes(pool, { modes: MODES, connections, rounds, seconds, randomId });

  const summary = summarize(totals);
  const { rows: [{ server_version: version }] } = await pool.query('SHOW server_version');
  console.log(`PostgreSQL ${version}, ${connections} connections, ${rounds} rounds x ${seconds}s per mode, ${rowCount} rows`);
  console.log('mode           tx/s   p50 ms   p99 ms   server CPU us/op   client CPU us/op   ops');
  for (const [name, s] of Object.entries(summary)) {
    console.log(`${name.padEnd(13)} ${s.tps.toFixed(0).padStart(5)}   ${s.p50.toFixed(3).padStart(6)}   ${s.p99.toFixed(3).padStart(6)}   ${s.serverUs.toFixed(1).padStart(16)}   ${s.clientUs.toFixed(1).padStart(16)}   ${s.ops}`);
  }
  const ratio = (a, b) => ratioText(summary, a, b);
  console.log(`fencedUpdate / plain: ${ratio('fencedUpdate', 'plain')}   (aim: within 5%)`);
  console.log(`withFence / tx:       ${ratio('withFence', 'tx')}   (aim >= 0.95x; the same round trips, more work on the server)`);
  console.log(`statements / tx:      ${ratio('statements', 'tx')}   (withFence's messages from a bare client: PostgreSQL's cost of the fence)`);
  console.log(`oneMore / tx:         ${ratio('oneMore', 'tx')}   (the bound of any fence checked in a statement of its own: the issue's 0.95x aim is reachable only if this is >= 0.95x)`);
  console.log(`rowLock / tx:         ${ratio('rowLock', 'tx')}   (the bound of any fence that serializes holders with the row's lock, as withFence's guarantee needs)`);
  console.log(`withFence / rowLock:  ${ratio('withFence', 'rowLock')}   (withFence against that bound: the mark's check, the savepoint, the library)`);
  console.log(`withFence / oneMore:  ${ratio('withFence', 'oneMore')}   (withFence against that bound)`);
  console.log(`statements / oneMore: ${ratio('statements', 'oneMore')}   (PostgreSQL's fence work against that bound)`);
  console.log(`withFence / statements: ${ratio('withFence', 'statements')}   (what the library adds to its own statements)`);
  console.log(`tx / plain:           ${ratio('tx', 'plain')}`);
  if (baseline !== undefined) console.log(`withFence / baseline: ${ratio('withFence', 'baseline')}   (this build against ${baselinePath})`);
  console.log(`load average at the start: ${loadAtStart}, at the end: ${(await import('node:os')).loadavg().map((l) => l.toFixed(1)).join(' ')}`);
} finally {
  await pool.end();
  await admin.query(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
