// Benchmark: what fencing() costs on the hot path. One run, loopback, autocannon:
// a bare route vs the same empty handler behind fencing() with MemoryFenceStore
// and with PostgresFenceStore (one resource, one token, so every request is
// admitted and committed; with PostgreSQL that is BEGIN, the fence upsert and
// COMMIT per request, serialized on the one fence row).
//
//   npx tsc -p tsconfig.build.json && node test/bench/express-bench.mjs
//
// DATABASE_URL (default postgres://root@127.0.0.1:5432/test): the bench makes
// its own schema there (fencekeeper_fences via migrate()) and drops it after.
// BENCH_PG_POOL (default 8): the server's pool size. The CPU column is the
// Node server process only: PostgreSQL's own work per request is not in it.
//
// BENCH_DURATION (s per measurement, default 2), BENCH_ROUNDS (default 11),
// BENCH_CONNECTIONS (default 32). The server runs in a child process so that
// it and autocannon do not share one core. Rounds alternate the routes'
// order; medians over rounds are reported, with the server process's CPU time
// per request (process.cpuUsage), which other load on the machine disturbs
// less than requests per second.
//
// Diagnostics. The routes above run in a server with no diagnostics_channel
// subscriber. A second server process runs the same code with
// fencekeeper/opentelemetry instrumented (the SDK's MeterProvider and a
// BasicTracerProvider: every admission a span, every refusal counted), for
// the cost with a subscriber. BENCH_BASELINE_DIST=<another build's dist/>
// adds that build's fencing() + MemoryFenceStore to the unsubscribed server
// (say, a build from before the channels existed): the same-run baseline for
// "no cost without a subscriber".
// A script that prints figures: nothing here asserts on time.
import { fork } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { serverCpu as cpuOf } from './server-cpu.mjs';

const TOKEN = '34';
const BASELINE = process.env.BENCH_BASELINE_DIST;
const TARGETS = [
  { name: 'bare', path: '/bare', headers: {} },
  // Reference: a middleware that only defers next() by one microtask, as any
  // middleware that awaits a store must; separates "asynchronous" from "fenced".
  { name: 'async no-op middleware', path: '/deferred', headers: { 'fencing-token': TOKEN } },
  ...(BASELINE === undefined ? [] : [{ name: 'fencing() + Memory, baseline build', path: '/memory-baseline', headers: { 'fencing-token': TOKEN } }]),
  { name: 'fencing() + MemoryFenceStore', path: '/memory', headers: { 'fencing-token': TOKEN } },
  { name: 'fencing() + Memory, OTel subscribed', path: '/memory', headers: { 'fencing-token': TOKEN }, server: 'otel' },
  { name: 'fencing() + PostgresFenceStore', path: '/postgres', headers: { 'fencing-token': TOKEN } },
];

if (process.argv[2] === '--serve') {
  await serve();
} else {
  await measure();
}

async function serve() {
  const { default: express } = await import('express');
  const { fencing, MemoryFenceStore } = await import('../../dist/adapters/express/index.js');
  const { migrate, PostgresFenceStore } = await import('../../dist/adapters/postgres/index.js');
  const { default: pg } = await import('pg');
  const { randomBytes } = await import('node:crypto');
  const schema = `fk_bench_${randomBytes(5).toString('hex')}`;
  const pool = new pg.Pool({
    connectionString: process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test',
    max: Number(process.env.BENCH_PG_POOL ?? 8),
    options: `-c search_path=${schema}`,
  });
  await pool.query(`CREATE SCHEMA ${schema}`);
  await migrate(pool);
  if (process.env.BENCH_SERVE_OTEL === '1') {
    const { instrument } = await import('../../dist/adapters/opentelemetry/index.js');
    const { MeterProvider, InMemoryMetricExporter, PeriodicExportingMetricReader, AggregationTemporality } = await import('@opentelemetry/sdk-metrics');
    const { BasicTracerProvider } = await import('@opentelemetry/sdk-trace-base');
    const reader = new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), exportIntervalMillis: 3_600_000 });
    instrument({ meterProvider: new MeterProvider({ readers: [reader] }), tracerProvider: new BasicTracerProvider() });
  }
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const empty = (_req, res) => { res.end(); };
  app.get('/bare', empty);
  app.get('/deferred', (_req, _res, next) => { Promise.resolve().then(() => next()); }, empty);
  app.get('/memory', fencing({ store: new MemoryFenceStore(), resource: 'bench' }), empty);
  if (BASELINE !== undefined) {
    const baseline = await import(pathToFileURL(resolve(BASELINE, 'adapters/express/index.js')).href);
    app.get('/memory-baseline', baseline.fencing({ store: new baseline.MemoryFenceStore(), resource: 'bench' }), empty);
  }
  app.get('/postgres', fencing({ store: new PostgresFenceStore(pool), resource: 'bench' }), empty);
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  // The server's CPU time, asked for around each measurement: CPU per request
  // is the figure least disturbed by other work on the machine.
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send({ cpu: user + system });
    }
  });
  process.on('disconnect', () =>
    server.close(async () => {
      await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await pool.end();
      process.exit(0);
    }));
}

async function measure() {
  const { default: autocannon } = await import('autocannon');
  const duration = Number(process.env.BENCH_DURATION ?? 2);
  const rounds = Number(process.env.BENCH_ROUNDS ?? 11);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);

  const start = async (env) => {
    const child = fork(fileURLToPath(import.meta.url), ['--serve'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, ...env } });
    const { port } = await new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`server exited (${code})`)));
    });
    return { child, port };
  };
  const servers = { plain: await start({}), otel: await start({ BENCH_SERVE_OTEL: '1' }) };
  const serverOf = (target) => servers[target.server ?? 'plain'];

  const serverCpu = (target) => cpuOf(serverOf(target).child);
  const run = (target, seconds) =>
    autocannon({ url: `http://127.0.0.1:${serverOf(target).port}${target.path}`, headers: target.headers, connections, duration: seconds });

  // Warm up every route (JIT, connection pools).
  for (const target of TARGETS) await run(target, 2);

  // Each round measures every route back to back; a route's figures are the
  // medians over rounds, and "vs bare" is the median of the per-round ratios,
  // so a burst of other load on the machine moves one pair, not the result.
  const samples = new Map(TARGETS.map((t) => [t.name, []]));
  for (let round = 0; round < rounds; round++) {
    for (const target of round % 2 === 0 ? TARGETS : [...TARGETS].reverse()) {
      const cpuBefore = await serverCpu(target);
      const result = await run(target, duration);
      const cpuAfter = await serverCpu(target);
      if (result.non2xx !== 0 || result.errors !== 0) {
        throw new Error(`${target.name}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
      }
      samples.get(target.name).push({
        rps: result.requests.average,
        p50: result.latency.p50,
        p99: result.latency.p99,
        cpu: (cpuAfter - cpuBefore) / result.requests.total,
      });
    }
  }
  for (const { child } of Object.values(servers)) child.disconnect();

  const median = (values) => {
    const sorted = [...values].sort((x, y) => x - y);
    const mid = sorted.length >> 1;
    return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  };
  const bare = samples.get(TARGETS[0].name);
  const { loadavg, cpus } = await import('node:os');
  console.log(`node ${process.version}, ${connections} connections, ${rounds} rounds of ${duration} s per route, medians over rounds`);
  console.log(`${cpus().length} CPUs, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')} (at the end)`);
  console.log(`${'route'.padEnd(36)} req/s   p50 ms  p99 ms  req/s vs bare   server CPU µs/req  vs bare`);
  for (const target of TARGETS) {
    const s = samples.get(target.name);
    const pick = (key) => median(s.map((x) => x[key]));
    const ratio = (key) => median(s.map((x, i) => x[key] / bare[i][key]));
    console.log(
      `${target.name.padEnd(36)} ${pick('rps').toFixed(0).padStart(8)} ${String(pick('p50')).padStart(7)} ${String(pick('p99')).padStart(7)}` +
        `  ${ratio('rps').toFixed(3).padStart(13)}   ${pick('cpu').toFixed(1).padStart(17)}  ${ratio('cpu').toFixed(3)}`,
    );
  }
}
