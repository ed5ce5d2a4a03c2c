// Benchmark: what fencing() costs on the hot path. One run, loopback, autocannon:
// a bare route vs the same empty handler behind fencing() with MemoryFenceStore
// (one resource, one token, so every request is admitted and committed).
//
//   npx tsc -p tsconfig.build.json && node test/bench/express-bench.mjs
//
// BENCH_DURATION (s per measurement, default 5), BENCH_ROUNDS (default 3),
// BENCH_CONNECTIONS (default 32). The server runs in a child process so that
// it and autocannon do not share one core. Rounds alternate the routes and
// the best round of each is reported (the least disturbed by the machine),
// with the server process's CPU time per request (process.cpuUsage), which
// other load on the machine disturbs far less than requests per second.
// A script that prints figures: nothing here asserts on time.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const TOKEN = '34';
// More targets (PostgresFenceStore) are added here and in serve().
const TARGETS = [
  { name: 'bare', path: '/bare', headers: {} },
  { name: 'fencing() + MemoryFenceStore', path: '/memory', headers: { 'fencing-token': TOKEN } },
];

if (process.argv[2] === '--serve') {
  await serve();
} else {
  await measure();
}

async function serve() {
  const { default: express } = await import('express');
  const { fencing, MemoryFenceStore } = await import('../../dist/adapters/express/index.js');
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const empty = (_req, res) => { res.end(); };
  app.get('/bare', empty);
  app.get('/memory', fencing({ store: new MemoryFenceStore(), resource: 'bench' }), empty);
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  // The server's CPU time, asked for around each measurement: CPU per request
  // is the figure least disturbed by other work on the machine.
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send({ cpu: user + system });
    }
  });
  process.on('disconnect', () => server.close(() => process.exit(0)));
}

async function measure() {
  const { default: autocannon } = await import('autocannon');
  const duration = Number(process.env.BENCH_DURATION ?? 5);
  const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);

  const child = fork(fileURLToPath(import.meta.url), ['--serve'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`server exited (${code})`)));
  });

  const serverCpu = () =>
    new Promise((resolve) => {
      const onMessage = (message) => {
        if (typeof message?.cpu === 'number') {
          child.off('message', onMessage);
          resolve(message.cpu);
        }
      };
      child.on('message', onMessage);
      child.send('cpu');
    });
  const run = (target, seconds) =>
    autocannon({ url: `http://127.0.0.1:${port}${target.path}`, headers: target.headers, connections, duration: seconds });

  // Warm up both routes (JIT, connection pools).
  for (const target of TARGETS) await run(target, 2);

  const best = new Map();
  const cpu = new Map();
  for (let round = 0; round < rounds; round++) {
    for (const target of round % 2 === 0 ? TARGETS : [...TARGETS].reverse()) {
      const cpuBefore = await serverCpu();
      const result = await run(target, duration);
      const cpuAfter = await serverCpu();
      if (result.non2xx !== 0 || result.errors !== 0) {
        throw new Error(`${target.name}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
      }
      const figures = {
        rps: result.requests.average,
        p50: result.latency.p50,
        p99: result.latency.p99,
        cpuPerRequest: (cpuAfter - cpuBefore) / result.requests.total,
      };
      const previous = best.get(target.name);
      if (previous === undefined || figures.rps > previous.rps) best.set(target.name, figures);
      const cheapest = cpu.get(target.name);
      if (cheapest === undefined || figures.cpuPerRequest < cheapest) cpu.set(target.name, figures.cpuPerRequest);
    }
  }
  child.disconnect();

  const bare = best.get(TARGETS[0].name);
  console.log(`node ${process.version}, ${connections} connections, ${rounds} rounds of ${duration} s per route (best round shown)`);
  const bareCpu = cpu.get(TARGETS[0].name);
  console.log('route                            req/s    p50 ms  p99 ms  vs bare   server CPU µs/req  vs bare');
  for (const target of TARGETS) {
    const f = best.get(target.name);
    const c = cpu.get(target.name);
    console.log(
      `${target.name.padEnd(30)} ${f.rps.toFixed(0).padStart(8)} ${String(f.p50).padStart(8)} ${String(f.p99).padStart(7)}  ${(f.rps / bare.rps).toFixed(3)}` +
        `   ${c.toFixed(1).padStart(17)}  ${(c / bareCpu).toFixed(3)}`,
    );
  }
}
