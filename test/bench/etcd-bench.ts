// etcd lock benchmark: fencekeeper/etcd vs etcd3's own Lock vs the raw floor
// of a session lock, same etcd, same run, medians reported.
//
//   FK_ETCD=http://127.0.0.1:2389 node node_modules/vite-node/vite-node.mjs test/bench/etcd-bench.ts
//   FK_ETCD=http://127.0.0.1:2389 bash test/bench/plain.sh etcd-bench   (the built package under plain Node)
//   env: BENCH_REPS (6), BENCH_SECONDS (3 per subject and rep)
//   FK_BASELINE: the root of another build of the package (a checkout with dist/, e.g. the
//   commit before a change, built in a worktree): its acquireLock joins as a fourth subject,
//   `baseline`, in the same rotating blocks, and the run prints ours/baseline per rep, then
//   both medians with their interquartile ranges (a regression: our median below the
//   baseline's by more than their IQR).
//
// Within a rep the subjects take turns in blocks of 25 cycles (each on its
// own client, all opened first), a different one first each block, until
// each has run BENCH_SECONDS: a machine whose load drifts (other work on
// the same cores) loads all three alike, and the per-rep ratios compare
// like with like. Printed: each rep's figures and ratios, then the medians.
//
// Figures only, no assertions. One client, one lock, acquire then release in
// a loop, uncontended:
//   fencekeeper   acquireLock + release on the client's one lease (granted before timing)
//   etcd3 Lock    etcd.lock(name).acquire() + release() (a lease granted per acquire)
//   raw floor     one lease for the run; per cycle a put-if-absent txn with that
//                 lease, then a delete: the least a session lock can send
// "acquire" is the latency of the acquire alone; "CPU µs" is this process's
// user+system CPU per cycle (the client's own cost, less sensitive to load).
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import { acquireLock, etcdSession } from '../../src/sources/etcd/index.js';

const host = new URL(process.env.FK_ETCD ?? 'http://127.0.0.1:2389').host;
const reps = Number(process.env.BENCH_REPS ?? 6);
const seconds = Number(process.env.BENCH_SECONDS ?? 3);
const run = Math.random().toString(16).slice(2, 10);

interface Cycle {
  acquire(): Promise<void>;
  release(): Promise<void>;
}

interface Subject {
  readonly name: string;
  open(etcd: Etcd3): Promise<Cycle>;
}

const ours: Subject = {
  name: 'fencekeeper',
  async open(etcd) {
    await etcdSession(etcd, { ttlSeconds: 10 }).lease();
    let lock: Awaited<ReturnType<typeof acquireLock>> | null = null;
    return {
      acquire: async () => {
        lock = await acquireLock(etcd, `bench/${run}/ours`);
      },
      release: () => lock!.release(),
    };
  },
};

const theirs: Subject = {
  name: 'etcd3 Lock',
  async open(etcd) {
    let lock: ReturnType<Etcd3['lock']> | null = null;
    return {
      acquire: async () => {
        lock = etcd.lock(`bench/${run}/theirs`);
        await lock.acquire();
      },
      release: () => lock!.release(),
    };
  },
};

const BASELINE = process.env.FK_BASELINE;
interface BaselineEtcd {
  acquireLock(etcd: Etcd3, name: string): Promise<{ release(): Promise<void> }>;
  etcdSession(etcd: Etcd3, options?: { ttlSeconds?: number }): { lease(): Promise<unknown>; close(): Promise<void> };
}
/** The baseline's etcd entry (fencekeeper/etcd as that build has it). */
const baseline = BASELINE === undefined ? undefined : ((await import(`${BASELINE.replace(/\/$/, '')}/dist/src/sources/etcd/index.js`)) as BaselineEtcd);

const base: Subject = {
  name: 'baseline',
  async open(etcd) {
    await baseline!.etcdSession(etcd, { ttlSeconds: 10 }).lease();
    let lock: { release(): Promise<void> } | null = null;
    return {
      acquire: async () => {
        lock = await baseline!.acquireLock(etcd, `bench/${run}/base`);
      },
      release: () => lock!.release(),
    };
  },
};

const floor: Subject = {
  name: 'raw floor',
  async open(etcd) {
    const lease = await etcd.leaseClient.leaseGrant({ TTL: 60 });
    const key = Buffer.from(`bench/${run}/raw`);
    return {
      acquire: async () => {
        const r = await etcd.kv.txn({
          compare: [{ key, target: 'Create', result: 'Equal', create_revision: '0' }],
          success: [{ request_put: { key, value: Buffer.from('x'), lease: lease.ID } }],
          failure: [],
        });
        if (!r.succeeded) throw new Error('raw floor: key taken');
      },
      release: async () => {
        await etcd.kv.deleteRange({ key });
      },
    };
  },
};

interface Figures {
  cyclesPerSecond: number;
  p50: number;
  p99: number;
  cpuMicros: number;
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

interface Running {
  readonly subject: Subject;
  readonly etcd: Etcd3;
  readonly cycle: Cycle;
  readonly latencies: number[];
  ms: number;
  cpu: number;
}

const BLOCK = 25;

async function open(subject: Subject): Promise<Running> {
  const etcd = new Etcd3({ hosts: [host] });
  const cycle = await subject.open(etcd);
  for (let i = 0; i < 50; i++) {
    await cycle.acquire();
    await cycle.release();
  }
  return { subject, etcd, cycle, latencies: [], ms: 0, cpu: 0 };
}

async function measureRep(rep: number): Promise<Map<string, Figures>> {
  const running: Running[] = [];
  try {
    for (const subject of subjects) running.push(await open(subject));
    for (let block = 0; running.some((r) => r.ms < seconds * 1000); block++) {
      for (let i = 0; i < running.length; i++) {
        const r = running[(i + block + rep) % running.length] as Running;
        if (r.ms >= seconds * 1000) continue;
        const cpu = process.cpuUsage();
        const start = performance.now();
        for (let n = 0; n < BLOCK; n++) {
          const t = performance.now();
          await r.cycle.acquire();
          r.latencies.push(performance.now() - t);
          await r.cycle.release();
        }
        r.ms += performance.now() - start;
        const used = process.cpuUsage(cpu);
        r.cpu += used.user + used.system;
      }
    }
    const figures = new Map<string, Figures>();
    for (const r of running) {
      r.latencies.sort((a, b) => a - b);
      figures.set(r.subject.name, {
        cyclesPerSecond: (r.latencies.length / r.ms) * 1000,
        p50: quantile(r.latencies, 0.5),
        p99: quantile(r.latencies, 0.99),
        cpuMicros: r.cpu / r.latencies.length,
      });
    }
    return figures;
  } finally {
    for (const r of running) {
      await (r.subject === base ? baseline!.etcdSession(r.etcd) : etcdSession(r.etcd)).close();
      r.etcd.close();
    }
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

const subjects = baseline === undefined ? [floor, ours, theirs] : [floor, ours, theirs, base];
const vsBaseline: number[] = [];
const iqr = (xs: number[]): [number, number] => {
  const s = [...xs].sort((a, b) => a - b);
  return [s[Math.floor(s.length / 4)] ?? Number.NaN, s[Math.min(s.length - 1, Math.floor((3 * s.length) / 4))] ?? Number.NaN];
};
const results = new Map<string, Figures[]>(subjects.map((s) => [s.name, []]));
const ratios = { floor: [] as number[], etcd3: [] as number[] };
console.log(`etcd at ${host}; ${reps} reps x ${seconds} s per subject, in turns of ${BLOCK} cycles; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
for (let rep = 0; rep < reps; rep++) {
  const figures = await measureRep(rep);
  for (const subject of subjects) {
    const f = figures.get(subject.name)!;
    results.get(subject.name)!.push(f);
    console.log(`  rep ${rep + 1} ${subject.name.padEnd(12)} ${f.cyclesPerSecond.toFixed(0).padStart(5)} cycles/s  acquire p50 ${f.p50.toFixed(2)} ms  p99 ${f.p99.toFixed(2)} ms  CPU ${f.cpuMicros.toFixed(0)} µs/cycle`);
  }
  const o = figures.get('fencekeeper')!.cyclesPerSecond;
  ratios.floor.push(o / figures.get('raw floor')!.cyclesPerSecond);
  ratios.etcd3.push(o / figures.get('etcd3 Lock')!.cyclesPerSecond);
  if (baseline !== undefined) {
    vsBaseline.push(o / figures.get('baseline')!.cyclesPerSecond);
    console.log(`  rep ${rep + 1} fencekeeper / baseline ${vsBaseline.at(-1)!.toFixed(3)}x`);
  }
  console.log(`  rep ${rep + 1} fencekeeper / raw floor ${ratios.floor.at(-1)!.toFixed(2)}x, / etcd3 Lock ${ratios.etcd3.at(-1)!.toFixed(2)}x; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
}
console.log('medians:');
const med = new Map<string, Figures>();
for (const subject of subjects) {
  const fs = results.get(subject.name)!;
  const m = { cyclesPerSecond: median(fs.map((f) => f.cyclesPerSecond)), p50: median(fs.map((f) => f.p50)), p99: median(fs.map((f) => f.p99)), cpuMicros: median(fs.map((f) => f.cpuMicros)) };
  med.set(subject.name, m);
  console.log(`  ${subject.name.padEnd(12)} ${m.cyclesPerSecond.toFixed(0).padStart(5)} cycles/s  acquire p50 ${m.p50.toFixed(2)} ms  p99 ${m.p99.toFixed(2)} ms  CPU ${m.cpuMicros.toFixed(0)} µs/cycle`);
}
const o = med.get('fencekeeper')!.cyclesPerSecond;
console.log(`fencekeeper / raw floor ${(o / med.get('raw floor')!.cyclesPerSecond).toFixed(2)}x (median of per-rep ratios ${median(ratios.floor).toFixed(2)}x); fencekeeper / etcd3 Lock ${(o / med.get('etcd3 Lock')!.cyclesPerSecond).toFixed(2)}x (${median(ratios.etcd3).toFixed(2)}x); load average after ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
if (baseline !== undefined) {
  const ourCycles = results.get('fencekeeper')!.map((f) => f.cyclesPerSecond);
  const baseCycles = results.get('baseline')!.map((f) => f.cyclesPerSecond);
  const [oq1, oq3] = iqr(ourCycles);
  const [bq1, bq3] = iqr(baseCycles);
  const [rq1, rq3] = iqr(vsBaseline);
  const gap = median(baseCycles) - median(ourCycles);
  const spread = Math.max(oq3 - oq1, bq3 - bq1);
  console.log(
    `ours ${median(ourCycles).toFixed(0)} cycles/s [IQR ${oq1.toFixed(0)}..${oq3.toFixed(0)}] vs baseline (FK_BASELINE=${BASELINE}) ${median(baseCycles).toFixed(0)} [${bq1.toFixed(0)}..${bq3.toFixed(0)}]; ` +
      `ours/baseline per rep: median ${median(vsBaseline).toFixed(3)}x [${rq1.toFixed(3)}, ${rq3.toFixed(3)}]; ${gap > spread ? 'REGRESSION: ours below the baseline by more than the IQR' : 'no regression (within the IQR)'}`,
  );
}
