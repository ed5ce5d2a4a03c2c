// ZooKeeper lock kinds benchmark: a read lock, a write lock and a permit
// beside the plain lock, same server, same run, medians reported.
//
//   FK_ZK_STANDALONE=127.0.0.1:2181 node node_modules/vite-node/vite-node.mjs test/bench/zk-kinds-bench.ts
//   env: BENCH_REPS (5), BENCH_SECONDS (2 per subject and rep)
//
// One client per subject (all opened first), one name each, acquire then
// release in a loop, uncontended. Within a rep the subjects take turns in
// blocks of 25 cycles, a different one first each block, until each has run
// BENCH_SECONDS: a machine whose load drifts loads all of them alike, and the
// per-rep ratios compare like with like. Printed: each rep's cycles/s and
// ratio to the plain lock, then the medians, and the socket writes per cycle
// counted on each client's socket (a round trip each: a request that waits
// for a reply starts a new write). Figures only, no assertions.
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { ZooKeeperClient, type Connector } from '../../src/sources/zookeeper/client.js';
import { connectTcp } from '../../src/sources/zookeeper/connection.js';
import { acquireLock } from '../../src/sources/zookeeper/recipes/lock.js';
import { acquirePermit } from '../../src/sources/zookeeper/recipes/permit.js';
import { acquireReadLock, acquireWriteLock } from '../../src/sources/zookeeper/recipes/rw-lock.js';

const SERVER = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const REPS = Number(process.env.BENCH_REPS ?? 5);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const BLOCK = 25;
const tag = `bench_kinds_${process.pid}_${Date.now().toString(36)}`;

interface Subject {
  readonly name: string;
  readonly cycle: (zk: ZooKeeperClient) => Promise<void>;
}

const SUBJECTS: readonly Subject[] = [
  { name: 'plain lock', cycle: async (zk) => (await acquireLock(zk, `${tag}/plain`)).release() },
  { name: 'read lock', cycle: async (zk) => (await acquireReadLock(zk, `${tag}/rw-read`)).release() },
  { name: 'write lock', cycle: async (zk) => (await acquireWriteLock(zk, `${tag}/rw-write`)).release() },
  { name: 'permit (of 4)', cycle: async (zk) => (await acquirePermit(zk, `${tag}/permit`, { permits: 4 })).release() },
];

/** A plain TCP connector that counts the client's socket writes. */
function counting(): { connector: Connector; writes: () => number } {
  let writes = 0;
  const connector: Connector = async (address, options) => {
    const socket = await connectTcp(address, options);
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((...args: unknown[]) => {
      writes++;
      return write(...args);
    }) as typeof socket.write;
    return socket;
  };
  return { connector, writes: () => writes };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

async function main(): Promise<void> {
  const wires = SUBJECTS.map(() => counting());
  const zks = await Promise.all(wires.map((w) => ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 30_000, connector: w.connector })));
  // Warm: each client reads the source's identity once, each name's container exists.
  for (let i = 0; i < SUBJECTS.length; i++) for (let k = 0; k < 50; k++) await SUBJECTS[i]!.cycle(zks[i]!);
  const rates: number[][] = SUBJECTS.map(() => []);
  const writesPerCycle: number[][] = SUBJECTS.map(() => []);
  console.log(`load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}; ${REPS} reps of ${SECONDS} s per subject`);
  for (let rep = 0; rep < REPS; rep++) {
    const time = SUBJECTS.map(() => 0);
    const cycles = SUBJECTS.map(() => 0);
    const writes = SUBJECTS.map(() => 0);
    for (let block = 0; time.some((t) => t < SECONDS * 1000); block++) {
      for (let j = 0; j < SUBJECTS.length; j++) {
        const i = (block + j) % SUBJECTS.length;
        if (time[i]! >= SECONDS * 1000) continue;
        const w0 = wires[i]!.writes();
        const t0 = performance.now();
        for (let k = 0; k < BLOCK; k++) await SUBJECTS[i]!.cycle(zks[i]!);
        time[i]! += performance.now() - t0;
        cycles[i]! += BLOCK;
        writes[i]! += wires[i]!.writes() - w0;
      }
    }
    const rate = SUBJECTS.map((_, i) => (cycles[i]! / time[i]!) * 1000);
    SUBJECTS.forEach((_, i) => {
      rates[i]!.push(rate[i]!);
      writesPerCycle[i]!.push(writes[i]! / cycles[i]!);
    });
    console.log(`rep ${rep + 1}: ${SUBJECTS.map((s, i) => `${s.name} ${rate[i]!.toFixed(0)}/s (${(rate[i]! / rate[0]!).toFixed(2)}x)`).join(', ')}`);
  }
  console.log('\nmedians | cycles/s | vs plain lock (median of per-rep ratios) | socket writes per cycle');
  for (let i = 0; i < SUBJECTS.length; i++) {
    const ratios = rates[i]!.map((r, rep) => r / rates[0]![rep]!);
    console.log(`${SUBJECTS[i]!.name.padEnd(14)} | ${median(rates[i]!).toFixed(0).padStart(6)} | ${median(ratios).toFixed(2)}x | ${median(writesPerCycle[i]!).toFixed(2)}`);
  }
  await Promise.all(zks.map((zk) => zk.close()));
}

await main();
