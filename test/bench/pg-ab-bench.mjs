// Benchmark: two builds of the PostgreSQL adapter side by side in one run, so
// a change's gain (or loss) is measured against its own "before" on the same
// machine in the same minutes, not against a figure from another run:
//   withFence     before's withFence and after's, on one pool (8 connections), taking turns
//                 in blocks (pg-rounds.mjs): tx/s, server and client CPU per operation;
//   store         one Express server with a PostgresFenceStore of each build on its own
//                 routes (one hot resource, 64 resources), on one pool, autocannon taking
//                 turns between them: req/s and the server process's CPU per request.
// Both builds prepare the same fence statement (same text, same name) on the
// shared connections; each copy finds the other's (42P05) and uses it.
//
//   npm run build && FK_DIST_BEFORE=/path/to/other/dist node test/bench/pg-ab-bench.mjs
//
// FK_DIST_BEFORE: the build to compare with (required; e.g. main's dist, with
// its migrations/ beside it); FK_DIST (default ../../dist) the one under test.
// DATABASE_URL (default postgres://root@127.0.0.1:5432/test), BENCH_SECONDS
// (per block, default 2), BENCH_ROUNDS (default 5), BENCH_CONNECTIONS (the
// store's HTTP connections and pool size, default 32). A script that prints
// figures: nothing asserts on time.
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { measureModes, ratioText, summarize } from './pg-rounds.mjs';
import { serverCpu } from './server-cpu.mjs';

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const seconds = Number(process.env.BENCH_SECONDS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const httpConnections = Number(process.env.BENCH_CONNECTIONS ?? 32);
const after = process.env.FK_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
const before = process.env.FK_DIST_BEFORE;
const RESOURCES = 64;
const load = () => loadavg().map((l) => l.toFixed(1)).join(' ');

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await measure();

async function serve(schema) {
  const { default: express } = await import('express');
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: url, max: httpConnections, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const empty = (_req, res) => { res.end(); };
  for (const [name, dist] of [['before', before], ['after', after]]) {
    const { fencing } = await import(`${dist}/adapters/express/index.js`);
    const { PostgresFenceStore } = await import(`${dist}/adapters/postgres/index.js`);
    const store = new PostgresFenceStore(pool);
    app.get(`/${name}/hot`, fencing({ store, resource: 'bench-hot' }), empty);
    app.get(`/${name}/many`, fencing({ store, resource: () => `bench-many-${1 + Math.floor(Math.random() * RESOURCES)}` }), empty);
  }
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send({ cpu: user + system });
    }
  });
  process.on('disconnect', () => server.close(async () => { await pool.end(); process.exit(0); }));
}

async function measure() {
  if (before === undefined) throw new Error('FK_DIST_BEFORE: the build to compare with (a dist/ directory)');
  const { default: pg } = await import('pg');
  const { default: autocannon } = await import('autocannon');
  const loadAtStart = load();
  const A = await import(`${before}/adapters/postgres/index.js`);
  const B = await import(`${after}/adapters/postgres/index.js`);
  const schema = `fk_pgab_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const pool = new pg.Pool({ connectionString: url, max: 8, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
  let child;
  try {
    await B.migrate(pool);
    await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text)');
    await pool.query("INSERT INTO docs SELECT g, 'initial' FROM generate_series(1, 1000) g");
    await pool.query("INSERT INTO fencekeeper_fences (resource, token) SELECT 'docs:' || g, 1 FROM generate_series(1, 1000) g");
    await pool.query(`INSERT INTO fencekeeper_fences (resource, token) SELECT 'bench-many-' || g, 1 FROM generate_series(1, ${RESOURCES}) g`);
    await pool.query("INSERT INTO fencekeeper_fences (resource, token) VALUES ('bench-hot', 1)");
    await pool.query('VACUUM ANALYZE docs');
    await pool.query('VACUUM ANALYZE fencekeeper_fences');
    const UPDATE = { name: 'bench_ab_update', text: 'UPDATE docs SET body = $1 WHERE id = $2' };
    const fenced = (withFence) => (id, body) => withFence(pool, `docs:${id}`, 34n, (client) => client.query({ ...UPDATE, values: [body, id] }));
    const { totals } = await measureModes(pool, {
      modes: { before: fenced(A.withFence), after: fenced(B.withFence) },
      connections: 8, rounds, seconds, randomId: () => 1 + Math.floor(Math.random() * 1000),
    });
    const summary = summarize(totals);
    console.log(`withFence, 8 connections, ${rounds} rounds x ${seconds} s per build`);
    console.log('build     tx/s   server CPU us/op   client CPU us/op');
    for (const [name, s] of Object.entries(summary)) console.log(`${name.padEnd(7)} ${s.tps.toFixed(0).padStart(6)}   ${s.serverUs.toFixed(1).padStart(16)}   ${s.clientUs.toFixed(1).padStart(16)}`);
    console.log(`after / before: ${ratioText(summary, 'after', 'before')}`);

    child = fork(fileURLToPath(import.meta.url), ['--serve', schema], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, FK_DIST: after, FK_DIST_BEFORE: before } });
    const { port } = await new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`server exited (${code})`)));
    });
    const block = async (path, duration) => {
      const cpu0 = await serverCpu(child);
      const result = await autocannon({ url: `http://127.0.0.1:${port}${path}`, headers: { 'fencing-token': '34' }, connections: httpConnections, duration });
      const cpu1 = await serverCpu(child);
      if (result.non2xx !== 0 || result.errors !== 0) throw new Error(`${path}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
      return { rps: result.requests.total / duration, cpuUs: (cpu1 - cpu0) / result.requests.total };
    };
    const paths = ['/before/hot', '/after/hot', '/before/many', '/after/many'];
    for (const path of paths) await block(path, 1); // warm up
    const samples = Object.fromEntries(paths.map((p) => [p, []]));
    for (let round = 0; round < rounds; round += 1) {
      const order = round % 2 === 0 ? paths : [...paths].reverse();
      for (const path of order) samples[path].push(await block(path, seconds));
    }
    const median = (values) => [...values].sort((x, y) => x - y)[values.length >> 1];
    console.log(`store (fencing() + PostgresFenceStore, empty handler), ${httpConnections} HTTP connections = pool size, ${rounds} rounds x ${seconds} s per build, medians`);
    console.log('route           req/s   Express CPU us/request');
    for (const path of paths) console.log(`${path.padEnd(13)} ${median(samples[path].map((s) => s.rps)).toFixed(0).padStart(7)}   ${median(samples[path].map((s) => s.cpuUs)).toFixed(0).padStart(8)}`);
    for (const kind of ['hot', 'many']) {
      const a = samples[`/after/${kind}`];
      const b = samples[`/before/${kind}`];
      const perRound = median(a.map((s, i) => s.rps / b[i].rps));
      const cpu = median(b.map((s) => s.cpuUs)) / median(a.map((s) => s.cpuUs));
      console.log(`${kind}: after / before ${perRound.toFixed(3)}x median per round, ${cpu.toFixed(3)}x by Express CPU per request`);
    }
    console.log(`load average at the start: ${loadAtStart}, at the end: ${load()}`);
  } finally {
    child?.disconnect();
    await pool.end();
    await admin.query(`DROP SCHEMA ${schema} CASCADE`);
    await admin.end();
  }
}
