// Fenced paths at network latency: every fenced path beside its unfenced baseline,
// both through the same delay proxy (test/servers/delay-proxy.c) in the same run,
// at 0, 0.2, 0.5 and 1 ms of added round trip, at concurrency 1 (latency-bound)
// and at the path's usual concurrency. One command:
//
//   set -a; . /work/srv/env; set +a   # or the servers' env of your machine
//   npm run bench:latency              # BENCH_QUICK=1 for a short try (about a minute)
//
// Env: DATABASE_URL, S3_ENDPOINT (+ S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION), FK_ZK_STANDALONE,
// FK_ETCD, FK_REDIS, FK_REDLOCK (the test servers' defaults otherwise); BENCH_QUICK=1;
// BENCH_ONLY=postgres,s3,locks (families); BENCH_RTTS=0,0.2,0.5,1; BENCH_ROUNDS, BENCH_BLOCK_MS;
// BENCH_CHARTS=0 to write no charts. Prints, per pair: median ops/s and IQR of each side,
// the median per-round ratio and its IQR, the round trips per operation of each side
// (counted by the proxy, exact), the proxy's CPU per operation and the load average. The
// proxy's own calibration comes first: the round trip it really adds (ping-pong through it
// against the same ping-pong direct) and its CPU per round trip. Writes
// docs/images/bench/latency-*.svg (ratio vs RTT per path, the aim as a dashed rule).
// Asserts nothing.
import { cpus, loadavg } from 'node:os';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeLatencyCharts, type LatencyCharts } from './charts.js';
import { median } from './proxy.js';
import { calibrate, startProxy } from './proxy.js';
import { HEADER, measurePair, row, type PairResult, type PathPair } from './pairs.js';
import { postgresPairs, postgresSetup, throughProxy } from './postgres-paths.js';
import { etcdPair, postgresSourcePair, redisPair, s3Pair, s3Setup, targetPorts, zookeeperPair, type Endpoints } from './other-paths.js';

const QUICK = process.env['BENCH_QUICK'] === '1' || process.argv.includes('--quick');
const RTTS = (process.env['BENCH_RTTS'] ?? '0,0.2,0.5,1').split(',').map(Number);
const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? (QUICK ? 2 : 5));
const BLOCK_MS = Number(process.env['BENCH_BLOCK_MS'] ?? (QUICK ? 150 : 400));
const ONLY = new Set((process.env['BENCH_ONLY'] ?? 'postgres,s3,locks').split(','));
const CHARTS = process.env['BENCH_CHARTS'] !== '0';

const endpoints: Endpoints = {
  postgres: process.env['DATABASE_URL'] ?? 'postgres://root@127.0.0.1:5432/test',
  s3: process.env['S3_ENDPOINT'] ?? 'http://127.0.0.1:7480',
  zk: process.env['FK_ZK_STANDALONE'] ?? '127.0.0.1:2181',
  etcd: (process.env['FK_ETCD'] ?? 'http://127.0.0.1:2379').split(',')[0]!,
  redis: process.env['FK_REDIS'] ?? 'redis://127.0.0.1:6390',
  redlock: (process.env['FK_REDLOCK'] ?? [6391, 6392, 6393, 6394, 6395].map((p) => `redis://127.0.0.1:${p}`).join(',')).split(','),
};

const load = (): string => loadavg().map((l) => l.toFixed(1)).join(' ');
const started = performance.now();
console.log(`fenced paths at network latency: ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), Node ${process.version}, load ${load()}`);
console.log(`${QUICK ? 'QUICK mode: ' : ''}${ROUNDS} rounds x ${BLOCK_MS} ms per side and concurrency; RTTs ${RTTS.join(', ')} ms`);

// --- the proxy's calibration
console.log('\nthe delay proxy, calibrated (ping-pong of one byte, through the proxy vs direct, medians):');
console.log('set RTT ms   direct ms   proxied ms   added ms   proxy CPU us/round trip   load');
for (const rtt of RTTS) {
  const c = await calibrate((rtt * 1000) / 2, QUICK ? 2 : 5, QUICK ? 100 : 200);
  console.log(`${rtt.toFixed(1).padStart(10)}   ${c.directMs.toFixed(3).padStart(9)}   ${c.proxiedMs.toFixed(3).padStart(10)}   ${c.addedMs.toFixed(3).padStart(8)}   ${c.proxyCpuUsPerRoundTrip.toFixed(1).padStart(23)}   ${load()}`);
}

const pg = ONLY.has('postgres') || ONLY.has('locks') ? await postgresSetup(endpoints.postgres) : undefined;
const s3 = ONLY.has('s3') ? await s3Setup(endpoints.s3) : undefined;
const results: PairResult[] = [];
const aims = new Map<string, number>();
const usual = new Map<string, number>();

try {
  for (const rtt of RTTS) {
    const proxy = await startProxy(`bench-${process.pid}-${Math.round(rtt * 1000)}`, (rtt * 1000) / 2, targetPorts(endpoints));
    const port = (target: number): number => proxy.port(target);
    console.log(`\n--- RTT ${rtt} ms (proxy pid ${proxy.pid}, +${(rtt * 1000) / 2} us each way); load ${load()}`);
    console.log(HEADER);
    const factories: (() => Promise<PathPair[]>)[] = [];
    if (ONLY.has('postgres')) factories.push(() => postgresPairs(throughProxy(endpoints.postgres, port), pg!.schema));
    if (ONLY.has('s3')) factories.push(async () => [s3Pair(endpoints, port, s3!.bucket, rtt)]);
    if (ONLY.has('locks')) {
      factories.push(
        async () => [await zookeeperPair(endpoints, port)],
        async () => [await etcdPair(endpoints, port)],
        async () => [redisPair([endpoints.redis], port, 'Redis lock cycle')],
        async () => [redisPair(endpoints.redlock, port, 'Redlock lock cycle (5)')],
        async () => [await postgresSourcePair(throughProxy(endpoints.postgres, port), pg!.schema)],
      );
    }
    try {
      for (const factory of factories) {
        const pairs = await factory();
        try {
          for (const pair of pairs) {
            aims.set(pair.path, pair.aim);
            usual.set(pair.path, pair.usual);
            for (const concurrency of [1, pair.usual]) {
              const r = await measurePair(proxy, pair, rtt, concurrency, { rounds: ROUNDS, blockMs: BLOCK_MS }, concurrency === 1);
              results.push(r);
              console.log(row(r, pair));
            }
          }
        } finally {
          for (const pair of pairs) await pair.close();
        }
      }
    } finally {
      const stats = await proxy.stats();
      console.log(`proxy at RTT ${rtt} ms: ${stats.connections} connections, ${((stats.bytesC2s + stats.bytesS2c) / 1e6).toFixed(1)} MB, CPU ${(stats.cpuUs / 1e6).toFixed(2)} s, late past its due time: mean ${stats.lateUsMean} us, max ${stats.lateUsMax} us`);
      await proxy.stop();
    }
  }
} finally {
  await pg?.drop();
  await s3?.drop();
}

// --- summary at 0.5 ms, concurrency 1: the aims
console.log('\nat 0.5 ms RTT, concurrency 1 (the aims):');
for (const r of results.filter((x) => x.rttMs === 0.5 && x.concurrency === 1)) {
  const ratio = median(r.ratios);
  const aim = aims.get(r.path)!;
  const trips = `${r.fencedTrips} vs ${r.baselineTrips} round trips`;
  const why = ratio >= aim ? '' : r.fencedTrips! > r.baselineTrips! ? `; not met: ${trips}, bound at RTT-bound speed ${(r.baselineTrips! / r.fencedTrips!).toFixed(2)}x` : `; not met with the same round trips (${trips}): CPU, not the network`;
  console.log(`  ${r.path.padEnd(26)} ${ratio.toFixed(2)}x  (aim >= ${aim}${ratio >= aim ? ', met' : ''}; ${trips}${why}; load ${r.load.toFixed(1)})`);
  if (r.path === 'withFence (pg.Pool)') {
    const b = results.find((x) => x.path === 'bound: fence SQL, bare pg' && x.rttMs === 0.5 && x.concurrency === 1);
    if (b !== undefined) console.log(`  ${''.padEnd(26)} beside it, the same messages from a bare pg client: ${median(b.ratios).toFixed(2)}x of the plain transaction (PostgreSQL's cost of the fence at equal round trips; withFence / bound ${(ratio / median(b.ratios)).toFixed(2)}x is the library's)`);
  }
}

// --- charts: ratio vs RTT per path, at concurrency 1 and the usual one, the aim as a rule
const charts: LatencyCharts = {
  subtitle: `npm run bench:latency${QUICK ? ' (quick)' : ''} · ${cpus().length} cores, load ${load()} · Node ${process.version}`,
  points: results.filter((r) => !r.path.startsWith('bound')).map((r) => ({ path: r.path, rttMs: r.rttMs, concurrency: r.concurrency, ratio: median(r.ratios), aim: aims.get(r.path)! })),
};
const saved = join(process.env['FK_STATE_DIR'] ?? tmpdir(), 'bench-latency.json');
await writeFile(saved, JSON.stringify(charts, null, 1));
console.log(`\nthe chart points: ${saved} (draw again: node node_modules/vite-node/vite-node.mjs test/bench/latency/redraw.ts ${saved})`);
if (CHARTS) for (const f of await writeLatencyCharts(charts)) console.log(`wrote ${f}`);
console.log(`\ndone in ${((performance.now() - started) / 1000).toFixed(0)} s; load ${load()}`);
process.exit(0);
