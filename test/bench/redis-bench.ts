// Benchmark: fencekeeper/redis against npm `redlock` 5.0.0-beta.2,
// `@sesamecare-oss/redlock` 1.4 and the raw floor, on the same servers in one run.
//   FK_REDIS=redis://127.0.0.1:6390 FK_REDLOCK=redis://127.0.0.1:6391,... npx vite-node test/bench/redis-bench.ts
//   bash test/bench/plain.sh redis-bench   (the built package under plain Node, as users run it: npm
//   redlock loads as plain Node either way, so a vite-node run reads our side a few percent low)
// Env: FK_REDIS, FK_REDLOCK (defaults: the test servers' ports), BENCH_CYCLES (cycles per
// case per run, default 1500), BENCH_RUNS (default 3), BENCH_GROUPS ('one', 'five', or
// both, the default). FK_BASELINE: the root of another build of the package (a checkout with
// dist/, e.g. the commit before a change, built in a worktree): its acquireLock joins each
// group as `baseline single` / `baseline Redlock`, in the same rotating blocks, and the run
// ends with ours against it: the medians over runs with their interquartile ranges (a
// regression: our median below the baseline's by more than their IQR), and the per-block
// paired ratio.
//
// One client (or one set of five), acquire + release, one cycle at a time, uncontended:
//   one node    raw floor (SET NX PX, then a compare-and-delete script), fencekeeper's
//               single-instance lock (token by INCR in the same script), redlock, sesame
//   five nodes  raw floor (the same on all five in parallel), fencekeeper's Redlock (with
//               its quorum-counter token: one more round trip), redlock, sesame
// Cases take turns in blocks of 50 cycles within each run, so a loaded machine (and a disk
// busy with other work: every node fsyncs each write) loads all alike. Printed per case:
// the median over runs of cycles/s, acquire p50/p99 (ms), CPU time per cycle (µs, this
// process: user + system), and ratios against the raw floor and redlock of the same run.
// Then the same comparison paired block by block: each block of a case against the block
// of the raw floor and of redlock in the same turn (run and rotation), the median over all
// blocks of the cycles/s ratio and of the CPU difference per cycle. A burst of load from
// elsewhere hits both blocks of a pair about alike, so these move far less from run to
// run than ratios of the medians do, on a machine shared with other work. Asserts nothing.
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { Redlock as SesameRedlock } from '@sesamecare-oss/redlock';
import { acquireLock } from '../../src/sources/redis/index.js';

const single = process.env.FK_REDIS ?? 'redis://127.0.0.1:6390';
const nodes = (process.env.FK_REDLOCK ?? [6391, 6392, 6393, 6394, 6395].map((p) => `redis://127.0.0.1:${p}`).join(',')).split(',');
const CYCLES = Number(process.env.BENCH_CYCLES ?? 1500);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const GROUPS = (process.env.BENCH_GROUPS ?? 'one,five').split(',');
const TTL = 10_000;

const RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

function client(url: string): Redis {
  const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(url);
  if (m === null) throw new Error(`not a redis://host:port URL: ${url}`);
  const c = new Redis({ host: m[1] as string, port: Number(m[2]) });
  // By its SHA1 after the first call (EVALSHA), as every library here runs its scripts.
  c.defineCommand('fkRelease', { numberOfKeys: 1, lua: RELEASE });
  return c;
}


interface Case {
  readonly name: string;
  readonly group: 'one node' | 'five nodes';
  /** One cycle: returns the acquire's latency in ms. */
  cycle(key: string): Promise<number>;
}

function raw(clients: readonly Redis[]): Case['cycle'] {
  return async (key) => {
    const value = randomBytes(15).toString('base64url');
    const t0 = performance.now();
    const replies = await Promise.all(clients.map((c) => c.set(key, value, 'PX', TTL, 'NX')));
    const acquired = performance.now() - t0;
    if (replies.filter((r) => r === 'OK').length < Math.floor(clients.length / 2) + 1) throw new Error('raw: not acquired');
    await Promise.all(clients.map((c) => (c as Redis & { fkRelease(key: string, value: string): Promise<unknown> }).fkRelease(key, value)));
    return acquired;
  };
}

function ours(target: Redis | Redis[]): Case['cycle'] {
  return async (key) => {
    const t0 = performance.now();
    const lock = await acquireLock(target, key, { ttlMs: TTL });
    const acquired = performance.now() - t0;
    await lock.release();
    return acquired;
  };
}

type AcquireLock = typeof acquireLock;
const BASELINE = process.env.FK_BASELINE;
/** The baseline's Redis source (src/sources/redis of that build). */
const baselineAcquire = BASELINE === undefined ? undefined : ((await import(`${BASELINE.replace(/\/$/, '')}/dist/src/sources/redis/index.js`)) as { acquireLock: AcquireLock }).acquireLock;

function theirsBuild(target: Redis | Redis[]): Case['cycle'] {
  return async (key) => {
    const t0 = performance.now();
    const lock = await baselineAcquire!(target, key, { ttlMs: TTL });
    const acquired = performance.now() - t0;
    await lock.release();
    return acquired;
  };
}

function peer(lib: { acquire(resources: string[], duration: number): Promise<{ release(): Promise<unknown> }> }): Case['cycle'] {
  return async (key) => {
    const t0 = performance.now();
    const lock = await lib.acquire([key], TTL);
    const acquired = performance.now() - t0;
    await lock.release();
    return acquired;
  };
}

// redlock 5's package.json `exports` carry no types: loaded by a specifier TypeScript does not resolve.
interface PeerLock {
  acquire(resources: string[], duration: number): Promise<{ release(): Promise<unknown> }>;
}
const redlockSpecifier = 'redlock';
const Redlock = ((await import(redlockSpecifier)) as { default: new (clients: Redis[], settings: object) => PeerLock }).default;

const one = client(single);
const five = nodes.map(client);
const settings = { retryCount: 0, automaticExtensionThreshold: 500 };
const cases: Case[] = [
  { name: 'raw floor', group: 'one node', cycle: raw([one]) },
  { name: 'fencekeeper single', group: 'one node', cycle: ours(one) },
  { name: 'redlock 5', group: 'one node', cycle: peer(new Redlock([one], settings)) },
  { name: 'sesame', group: 'one node', cycle: peer(new SesameRedlock([one], settings)) },
  { name: 'raw floor', group: 'five nodes', cycle: raw(five) },
  { name: 'fencekeeper Redlock', group: 'five nodes', cycle: ours(five) },
  { name: 'redlock 5', group: 'five nodes', cycle: peer(new Redlock(five, settings)) },
  { name: 'sesame', group: 'five nodes', cycle: peer(new SesameRedlock(five, settings)) },
  ...(baselineAcquire === undefined
    ? []
    : [
        { name: 'baseline single', group: 'one node', cycle: theirsBuild(one) },
        { name: 'baseline Redlock', group: 'five nodes', cycle: theirsBuild(five) },
      ]),
].filter((c) => GROUPS.includes(c.group === 'one node' ? 'one' : 'five')) as Case[];
const groups = (['one node', 'five nodes'] as const).filter((g) => cases.some((c) => c.group === g));

/** One block of BLOCK cycles of a case: its wall time (ms) and CPU time (µs). Index i of every case: the same turn. */
interface Block {
  ms: number;
  cpu: number;
}
const blocks = new Map<Case, Block[]>(cases.map((c) => [c, []]));

interface Figures {
  cyclesPerSecond: number;
  p50: number;
  p99: number;
  cpuMicros: number;
}

const quantile = (sorted: readonly number[], q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

const BLOCK = 50;

/**
 * One run: every case takes turns in blocks of BLOCK cycles until each has
 * done CYCLES, so that a disk or CPU busy with other work for a while (the
 * nodes fsync every write) slows all cases alike.
 */
async function runOnce(run: number): Promise<Map<Case, Figures>> {
  const keyOf = (c: Case): string => `${tag}_${c.group === 'one node' ? 1 : 5}_${c.name.replace(/\W+/g, '_')}`;
  for (const c of cases) for (let i = 0; i < 50; i++) await c.cycle(keyOf(c)); // warm-up: scripts loaded, connections up, JIT
  const state = new Map(cases.map((c) => [c, { latencies: [] as number[], ms: 0, cpu: 0 }]));
  for (let done = 0; done < CYCLES; done += BLOCK) {
    // A different order each block: no case always goes first.
    const order = cases.map((_, i) => cases[(i + run + done / BLOCK) % cases.length] as Case);
    for (const c of order) {
      const s = state.get(c)!;
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      for (let i = 0; i < BLOCK; i++) s.latencies.push(await c.cycle(keyOf(c)));
      const ms = performance.now() - t0;
      const cpu = process.cpuUsage(cpu0);
      s.ms += ms;
      s.cpu += cpu.user + cpu.system;
      blocks.get(c)!.push({ ms, cpu: cpu.user + cpu.system });
    }
  }
  const figures = new Map<Case, Figures>();
  for (const [c, s] of state) {
    s.latencies.sort((a, b) => a - b);
    const n = s.latencies.length;
    figures.set(c, { cyclesPerSecond: n / (s.ms / 1000), p50: quantile(s.latencies, 0.5), p99: quantile(s.latencies, 0.99), cpuMicros: s.cpu / n });
  }
  return figures;
}

const results = new Map<Case, Figures[]>(cases.map((c) => [c, []]));
const tag = `bench_${process.pid}_${Date.now().toString(36)}`;
console.log(`redis-bench: ${CYCLES} cycles per case per run, ${RUNS} runs; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
for (let run = 0; run < RUNS; run++) {
  for (const [c, f] of await runOnce(run)) results.get(c)!.push(f);
}

const summary = new Map<Case, Figures>();
for (const [c, runs] of results) {
  summary.set(c, {
    cyclesPerSecond: median(runs.map((r) => r.cyclesPerSecond)),
    p50: median(runs.map((r) => r.p50)),
    p99: median(runs.map((r) => r.p99)),
    cpuMicros: median(runs.map((r) => r.cpuMicros)),
  });
}
for (const group of groups) {
  const inGroup = cases.filter((c) => c.group === group);
  const floor = summary.get(inGroup.find((c) => c.name === 'raw floor')!)!;
  const redlock = summary.get(inGroup.find((c) => c.name === 'redlock 5')!)!;
  console.log(`\n${group}`);
  console.log('  case                  cycles/s  acquire p50  p99 (ms)  CPU/cycle  vs raw  vs redlock');
  for (const c of inGroup) {
    const f = summary.get(c)!;
    console.log(
      `  ${c.name.padEnd(20)} ${f.cyclesPerSecond.toFixed(0).padStart(9)}  ${f.p50.toFixed(3).padStart(11)}  ${f.p99.toFixed(3).padStart(8)}  ${f.cpuMicros.toFixed(0).padStart(6)} µs  ${(f.cyclesPerSecond / floor.cyclesPerSecond).toFixed(2).padStart(6)}  ${(f.cyclesPerSecond / redlock.cyclesPerSecond).toFixed(2).padStart(9)}`,
    );
  }
}
for (const group of groups) {
  const inGroup = cases.filter((c) => c.group === group);
  const floor = blocks.get(inGroup.find((c) => c.name === 'raw floor')!)!;
  const redlock = blocks.get(inGroup.find((c) => c.name === 'redlock 5')!)!;
  // Over the blocks of one turn: cycles/s ratio = the other's block time / this one's.
  const rate = (mine: Block[], theirs: Block[]): number => median(mine.map((b, i) => (theirs[i] as Block).ms / b.ms));
  const cpuMinus = (mine: Block[], theirs: Block[]): number => median(mine.map((b, i) => (b.cpu - (theirs[i] as Block).cpu) / BLOCK));
  console.log(`\n${group}, paired by turn (median over ${floor.length} blocks of ${BLOCK} cycles)`);
  console.log('  case                  vs raw  vs redlock  CPU/cycle - redlock\'s');
  for (const c of inGroup) {
    const mine = blocks.get(c)!;
    console.log(`  ${c.name.padEnd(20)} ${rate(mine, floor).toFixed(3).padStart(7)}  ${rate(mine, redlock).toFixed(3).padStart(9)}  ${cpuMinus(mine, redlock).toFixed(1).padStart(10)} µs`);
  }
}
console.log(`\nload average at the end ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
one.disconnect();
for (const c of five) c.disconnect();
if (BASELINE !== undefined) {
  const iqr = (xs: readonly number[]): string => {
    const sorted = [...xs].sort((a, b) => a - b);
    return `${quantile(sorted, 0.25).toFixed(0)}..${quantile(sorted, 0.75).toFixed(0)}`;
  };
  console.log(`\nours against the baseline (FK_BASELINE=${BASELINE}); load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  for (const group of groups) {
    const inGroup = cases.filter((c) => c.group === group);
    const mine = inGroup.find((c) => c.name.startsWith('fencekeeper'))!;
    const theirs = inGroup.find((c) => c.name.startsWith('baseline'))!;
    const ourRuns = results.get(mine)!.map((f) => f.cyclesPerSecond);
    const baseRuns = results.get(theirs)!.map((f) => f.cyclesPerSecond);
    const spread = (xs: readonly number[]): number => {
      const sorted = [...xs].sort((a, b) => a - b);
      return quantile(sorted, 0.75) - quantile(sorted, 0.25);
    };
    const gap = median(baseRuns) - median(ourRuns);
    const paired = blocks.get(theirs)!.map((b, i) => b.ms / (blocks.get(mine)![i] as Block).ms).sort((a, b) => a - b);
    console.log(
      `  ${group}: ours ${median(ourRuns).toFixed(0)} cycles/s [IQR ${iqr(ourRuns)}], baseline ${median(baseRuns).toFixed(0)} [${iqr(baseRuns)}]; ` +
        `paired by block ours/baseline ${quantile(paired, 0.5).toFixed(3)}x [${quantile(paired, 0.25).toFixed(3)}, ${quantile(paired, 0.75).toFixed(3)}]; ` +
        `${gap > Math.max(spread(ourRuns), spread(baseRuns)) ? 'REGRESSION: ours below the baseline by more than the IQR' : 'no regression (within the IQR)'}`,
    );
  }
}
