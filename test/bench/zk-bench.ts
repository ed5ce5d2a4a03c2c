// ZooKeeper wire-client benchmark: this client vs node-zookeeper-client 1.1.3,
// same server, same run, alternating, several repetitions, medians reported.
//
//   FK_ZK_STANDALONE=127.0.0.1:2181 npx vite-node test/bench/zk-bench.ts
//   env: BENCH_REPS (5), BENCH_PIPELINED (40000 requests per rep), BENCH_WINDOW (1000 in flight),
//        BENCH_SERIAL (3000 round trips per rep)
//
// Figures only, no assertions. "pipelined" keeps BENCH_WINDOW exists() in
// flight on one connection (each reply issues the next); "serial" awaits each
// exists() before sending the next and reports p50/p99 of the round trip.
// "CPU µs/req" is this process's user+system CPU per pipelined request: on a
// loaded machine it compares the clients' own cost better than wall time.
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';

const require = createRequire(import.meta.url);

interface NzcClient {
  connect(): void;
  close(): void;
  once(event: 'connected', listener: () => void): void;
  exists(path: string, callback: (error: Error | null, stat: unknown) => void): void;
  create(path: string, callback: (error: (Error & { getCode?: () => number }) | null) => void): void;
}
const nzc = require('node-zookeeper-client') as { createClient(connect: string, options: object): NzcClient };

const server = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const reps = Number(process.env.BENCH_REPS ?? 5);
const pipelinedCount = Number(process.env.BENCH_PIPELINED ?? 40_000);
const windowSize = Number(process.env.BENCH_WINDOW ?? 1000);
const serialCount = Number(process.env.BENCH_SERIAL ?? 3000);
const path = '/zookeeper'; // exists on every server; no setup, no cleanup

/** Exists with a callback, whatever the client. */
type ExistsFn = (done: (error: unknown) => void) => void;

interface Subject {
  readonly name: string;
  open(): Promise<{ exists: ExistsFn; close(): Promise<void> }>;
}

const ours: Subject = {
  name: 'fencekeeper',
  async open() {
    const zk = await ZooKeeperClient.connect({ connectString: server, sessionTimeoutMs: 30_000 });
    return {
      exists: (done) => {
        zk.exists(path).then(() => done(null), done);
      },
      close: () => zk.close(),
    };
  },
};

const theirs: Subject = {
  name: 'node-zookeeper-client',
  open() {
    return new Promise((resolve) => {
      const client = nzc.createClient(server, { sessionTimeout: 30_000 });
      client.once('connected', () =>
        resolve({
          exists: (done) => client.exists(path, (error) => done(error)),
          close: async () => client.close(),
        }),
      );
      client.connect();
    });
  },
};

/** Requests per second of wall time, and this process's CPU time (user + system) per request in µs. */
function pipelined(exists: ExistsFn, total: number, window: number): Promise<{ ops: number; cpuUs: number }> {
  return new Promise((resolve, reject) => {
    let issued = 0;
    let done = 0;
    const start = performance.now();
    const cpu = process.cpuUsage();
    const onReply = (error: unknown): void => {
      if (error) return reject(error as Error);
      done++;
      if (done === total) {
        const used = process.cpuUsage(cpu);
        resolve({ ops: (total * 1000) / (performance.now() - start), cpuUs: (used.user + used.system) / total });
      }
      else if (issued < total) {
        issued++;
        exists(onReply);
      }
    };
    for (; issued < Math.min(window, total); ) {
      issued++;
      exists(onReply);
    }
  });
}

async function serial(exists: ExistsFn, total: number): Promise<{ p50: number; p99: number }> {
  const samples = new Float64Array(total);
  for (let i = 0; i < total; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve, reject) => exists((e) => (e ? reject(e as Error) : resolve())));
    samples[i] = performance.now() - t0;
  }
  samples.sort();
  return { p50: samples[Math.floor(total * 0.5)] as number, p99: samples[Math.floor(total * 0.99)] as number };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

interface Figures { ops: number[]; cpuUs: number[]; p50: number[]; p99: number[] }
const results = new Map<string, Figures>();

console.log(`server ${server}; ${reps} repetitions; pipelined ${pipelinedCount} exists (window ${windowSize}); serial ${serialCount} round trips`);
for (let rep = 0; rep < reps; rep++) {
  // Alternate the order so neither client always runs on a warmer server.
  const order = rep % 2 === 0 ? [ours, theirs] : [theirs, ours];
  for (const subject of order) {
    const conn = await subject.open();
    await pipelined(conn.exists, 2000, windowSize); // warm-up (JIT, server caches)
    await serial(conn.exists, 200);
    const { ops, cpuUs } = await pipelined(conn.exists, pipelinedCount, windowSize);
    const lat = await serial(conn.exists, serialCount);
    await conn.close();
    const f = results.get(subject.name) ?? { ops: [], cpuUs: [], p50: [], p99: [] };
    f.ops.push(ops);
    f.cpuUs.push(cpuUs);
    f.p50.push(lat.p50);
    f.p99.push(lat.p99);
    results.set(subject.name, f);
    console.log(`  rep ${rep + 1} ${subject.name.padEnd(22)} ${ops.toFixed(0).padStart(7)} exists/s  ${cpuUs.toFixed(1).padStart(5)} µs CPU/req  p50 ${lat.p50.toFixed(3)} ms  p99 ${lat.p99.toFixed(3)} ms`);
  }
}

const a = results.get(ours.name) as Figures;
const b = results.get(theirs.name) as Figures;
const row = (name: string, f: Figures): string =>
  `| ${name.padEnd(22)} | ${median(f.ops).toFixed(0).padStart(9)} | ${median(f.cpuUs).toFixed(1).padStart(11)} | ${median(f.p50).toFixed(3).padStart(8)} | ${median(f.p99).toFixed(3).padStart(8)} |`;
console.log('\nmedians');
console.log('| client                 | exists/s  | CPU µs/req  | p50 ms   | p99 ms   |');
console.log('|------------------------|-----------|-------------|----------|----------|');
console.log(row(ours.name, a));
console.log(row(theirs.name, b));
console.log(
  `| ratio fencekeeper/nzc  | ${(median(a.ops) / median(b.ops)).toFixed(2).padStart(8)}x | ${(median(a.cpuUs) / median(b.cpuUs)).toFixed(2).padStart(10)}x | ${(median(a.p50) / median(b.p50)).toFixed(2).padStart(7)}x | ${(median(a.p99) / median(b.p99)).toFixed(2).padStart(7)}x |`,
);
console.log('(exists/s: higher is better; CPU and latency ratios below 1 mean fencekeeper is cheaper/faster)');
