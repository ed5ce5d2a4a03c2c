// Benchmark: lock throughput on one session, against the protocol floor and the peer.
//   FK_ZK_STANDALONE=127.0.0.1:2181 npx vite-node test/bench/lock-throughput.ts
// Env: FK_ZK_STANDALONE (default 127.0.0.1:2181), BENCH_ROUNDS (default 7), BENCH_BLOCK_MS
// (time per implementation per round and K, default 300), BENCH_HELD (locks held for the
// memory figures, default 10000), BENCH_HANDOFFS (contended grants per implementation and
// round, default 400), BENCH_ONLY (comma list of sections: cycles,memory,handoff).
//
// Three implementations of the same fair-queue lock, on the same ZooKeeper:
//   fencekeeper   acquireLock + release
//   nzc           node-zookeeper-client 1.1.3, the textbook recipe (create, getChildren,
//                 exists(predecessor) when not first, remove)
//   floor         a raw client written here for nothing but this recipe: per cycle it
//                 writes create2 (ephemeral sequential) and getChildren in one socket
//                 write, checks the listing, then deletes: the requests fencekeeper sends
//                 for an uncontended cycle, with shorter paths and no data (about 159
//                 bytes a cycle against our 260: our node names carry the join's guid,
//                 our data the owner), and nothing else: what the server allows.
// Sections:
//   cycles    K = 1, 16, 64 loops on one session, each acquiring and releasing its own
//             lock name: cycles/s and client CPU per cycle (process.cpuUsage). The
//             implementations take turns in blocks of BENCH_BLOCK_MS, in a rotating order,
//             so a loaded machine loads all alike; the median over rounds is printed.
//   memory    BENCH_HELD locks held on one session, then as many waiters (a second session
//             queueing for each of them): heap per held lock and per waiter (after a GC).
//   handoff   16 sessions looping on one lock: time from a holder's release() call to the
//             next holder's grant, p50/p99, fencekeeper against nzc.
// A process-wide 'warning' listener counts warnings (MaxListenersExceededWarning): printed.
// FK_BASELINE: the root of another build of the package (a checkout with dist/, e.g. the
// commit before a change, built in a worktree): its acquireLock joins the cycles section as
// a fourth implementation, `baseline`, in the same rotating blocks, and the section prints
// ours/baseline per round, its median and interquartile range.
// Prints figures; asserts nothing.
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { acquireLock, type ZooKeeperLock } from '../../src/sources/zookeeper/recipes/lock.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { nzcAcquire, nzcConnect as nzcConnectTo, type NzcClient } from './nzc-lock.js';
import { RawSession, rawCycle } from './raw-zk.js';

const SERVER = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const nzcConnect = (): Promise<NzcClient> => nzcConnectTo(SERVER);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const BLOCK_MS = Number(process.env.BENCH_BLOCK_MS ?? 300);
const HELD = Number(process.env.BENCH_HELD ?? 10_000);
const HANDOFFS = Number(process.env.BENCH_HANDOFFS ?? 400);
const ONLY = new Set((process.env.BENCH_ONLY ?? 'cycles,memory,handoff').split(','));
const KS = [1, 16, 64];
const tag = `tp_${process.pid}_${Date.now().toString(36)}`;

const warnings: string[] = [];
process.on('warning', (w) => warnings.push(`${w.name}: ${w.message}`));

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// ---------------------------------------------------------------- setup

/** Persistent parents for nzc and the floor (ours makes its own containers). */
async function mkdirs(zk: ZooKeeperClient, paths: string[]): Promise<void> {
  const made = new Set<string>();
  for (const path of paths) {
    let at = '';
    for (const part of path.split('/').filter(Boolean)) {
      at += `/${part}`;
      if (made.has(at)) continue;
      made.add(at);
      await zk.create(at).catch((e: { code?: string }) => {
        if (e.code !== 'ZK_NODEEXISTS') throw e;
      });
    }
  }
}

async function rmTree(zk: ZooKeeperClient, path: string): Promise<void> {
  const children = await zk.getChildren(path).catch(() => [] as string[]);
  await Promise.all(children.map((c) => rmTree(zk, `${path}/${c}`)));
  await zk.delete(path).catch(() => undefined);
}

// ---------------------------------------------------------------- measurements

const quantile = (xs: readonly number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};
const median = (xs: readonly number[]): number => quantile(xs, 0.5);

type Impl = 'fencekeeper' | 'nzc' | 'floor' | 'baseline';
const BASELINE = process.env.FK_BASELINE;
interface BaselineClient { close(): Promise<void> }
interface BaselineModule {
  ZooKeeperClient: { connect(o: { connectString: string; sessionTimeoutMs: number }): Promise<BaselineClient> };
  acquireLock(zk: BaselineClient, name: string): Promise<{ release(): Promise<void> }>;
}
/** The baseline's ZooKeeper entry: fencekeeper/zookeeper where the build has one, else the root (builds before it). */
async function loadBaseline(root: string): Promise<BaselineModule> {
  const dist = root.replace(/\/$/, '') + '/dist/src';
  return (await import(`${dist}/sources/zookeeper/index.js`).catch(() => import(`${dist}/index.js`))) as BaselineModule;
}
const baseline = BASELINE === undefined ? undefined : await loadBaseline(BASELINE);
const IMPLS: Impl[] = baseline === undefined ? ['fencekeeper', 'nzc', 'floor'] : ['fencekeeper', 'nzc', 'floor', 'baseline'];

interface Sessions {
  ours: ZooKeeperClient;
  theirs: NzcClient;
  raw: RawSession;
  base: BaselineClient | undefined;
}

/** K loops on one session for `ms`, each on its own lock: cycles and CPU. */
async function block(impl: Impl, s: Sessions, k: number, ms: number): Promise<{ cycles: number; ms: number; cpuUs: number }> {
  let cycles = 0;
  const cpu = process.cpuUsage();
  const start = performance.now();
  const until = start + ms;
  const loop = async (i: number): Promise<void> => {
    const name = `k${k}_${i}`;
    if (impl === 'fencekeeper') {
      const lock = `${tag}/${name}`;
      while (performance.now() < until) {
        const held = await acquireLock(s.ours, lock);
        await held.release();
        cycles++;
      }
    } else if (impl === 'baseline') {
      const lock = `${tag}/base/${name}`;
      while (performance.now() < until) {
        const held = await baseline!.acquireLock(s.base!, lock);
        await held.release();
        cycles++;
      }
    } else if (impl === 'nzc') {
      const parent = `/${tag}/nzc/${name}`;
      while (performance.now() < until) {
        await (await nzcAcquire(s.theirs, parent))();
        cycles++;
      }
    } else {
      const parent = `/${tag}/raw/${name}`;
      while (performance.now() < until) {
        await rawCycle(s.raw, parent);
        cycles++;
      }
    }
  };
  await Promise.all(Array.from({ length: k }, (_, i) => loop(i)));
  const elapsed = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return { cycles, ms: elapsed, cpuUs: used.user + used.system };
}

async function cyclesSection(setup: ZooKeeperClient): Promise<void> {
  const parents: string[] = [];
  for (const k of KS) for (let i = 0; i < k; i++) parents.push(`/${tag}/nzc/k${k}_${i}`, `/${tag}/raw/k${k}_${i}`);
  await mkdirs(setup, parents);
  const s: Sessions = {
    ours: await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 }),
    theirs: await nzcConnect(),
    raw: await RawSession.connect(SERVER),
    base: baseline === undefined ? undefined : await baseline.ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 }),
  };
  const rates = new Map<string, number[]>();
  const cpu = new Map<string, number[]>();
  const key = (impl: Impl, k: number): string => `${impl}/${k}`;
  try {
    // Warm-up: every path once, so the JIT and the containers are in place.
    for (const k of KS) for (const impl of IMPLS) await block(impl, s, k, 150);
    for (let round = 0; round < ROUNDS; round++) {
      for (const k of KS) {
        const order = IMPLS.map((_, i) => IMPLS[(i + round) % IMPLS.length] as Impl);
        for (const impl of order) {
          const r = await block(impl, s, k, BLOCK_MS);
          (rates.get(key(impl, k)) ?? rates.set(key(impl, k), []).get(key(impl, k))!).push((r.cycles * 1000) / r.ms);
          (cpu.get(key(impl, k)) ?? cpu.set(key(impl, k), []).get(key(impl, k))!).push(r.cpuUs / r.cycles);
        }
      }
      process.stderr.write(`cycles: round ${round + 1}/${ROUNDS}, load ${loadavg()[0]!.toFixed(2)}\n`);
    }
  } finally {
    await s.ours.close();
    s.theirs.close();
    s.raw.close();
    await s.base?.close();
  }
  console.log(`\nK loops on one session, each acquiring + releasing its own lock (${ROUNDS} rounds of ${BLOCK_MS} ms per implementation)`);
  console.log('cycles/s: median over rounds; ratios: median of the per-round ratios (same round, same load); CPU: median us per cycle');
  console.log(`${'K'.padEnd(4)}${'ours/s'.padEnd(9)}${'nzc/s'.padEnd(9)}${'floor/s'.padEnd(9)}${'ours/floor'.padEnd(12)}${'ours/nzc'.padEnd(10)}${'CPU ours'.padEnd(10)}${'nzc'.padEnd(8)}${'floor'.padEnd(8)}ours/floor`);
  for (const k of KS) {
    const rs = (impl: Impl): number[] => rates.get(key(impl, k))!;
    const r = (impl: Impl): number => median(rs(impl));
    const c = (impl: Impl): number => median(cpu.get(key(impl, k))!);
    const ratio = (a: Impl, b: Impl): number => median(rs(a).map((x, i) => x / rs(b)[i]!));
    console.log(
      `${String(k).padEnd(4)}${r('fencekeeper').toFixed(0).padEnd(9)}${r('nzc').toFixed(0).padEnd(9)}${r('floor').toFixed(0).padEnd(9)}` +
        `${ratio('fencekeeper', 'floor').toFixed(2).padEnd(12)}${ratio('fencekeeper', 'nzc').toFixed(2).padEnd(10)}` +
        `${c('fencekeeper').toFixed(1).padEnd(10)}${c('nzc').toFixed(1).padEnd(8)}${c('floor').toFixed(1).padEnd(8)}${(c('fencekeeper') / c('floor')).toFixed(2)}`,
    );
  }
  if (baseline !== undefined) {
    console.log(`ours/baseline (FK_BASELINE=${BASELINE}), per round ratio of the same round's blocks: median [q1, q3]`);
    for (const k of KS) {
      const ours = rates.get(key('fencekeeper', k))!;
      const ratios = rates.get(key('baseline', k))!.map((b, i) => ours[i]! / b);
      console.log(`  K=${k}: ${median(ratios).toFixed(3)} [${quantile(ratios, 0.25).toFixed(3)}, ${quantile(ratios, 0.75).toFixed(3)}]  ours ${median(ours).toFixed(0)}/s, baseline ${median(rates.get(key('baseline', k))!).toFixed(0)}/s`);
    }
  }
  console.log('per round (cycles/s):');
  for (const k of KS) for (const impl of IMPLS) console.log(`  K=${k} ${impl.padEnd(12)} ${rates.get(key(impl, k))!.map((x) => x.toFixed(0)).join(' ')}`);
}

function heapUsed(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

async function memorySection(): Promise<void> {
  const holder = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 30_000 });
  const waiterClient = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 30_000 });
  const names = Array.from({ length: HELD }, (_, i) => `${tag}/m/${i}`);
  const held: ZooKeeperLock[] = [];
  const waiting: Promise<ZooKeeperLock>[] = [];
  try {
    // The parents first (containers made on the first acquire), then measure a clean take.
    for (let i = 0; i < HELD; i += 500) await Promise.all(names.slice(i, i + 500).map(async (n) => (await acquireLock(holder, n)).release()));
    await new Promise((r) => setTimeout(r, 50));
    const before = heapUsed();
    for (let i = 0; i < HELD; i += 500) held.push(...(await Promise.all(names.slice(i, i + 500).map((n) => acquireLock(holder, n)))));
    await new Promise((r) => setTimeout(r, 50)); // the own-node watches go out on the next turn
    const withHeld = heapUsed();
    for (let i = 0; i < HELD; i += 500) {
      waiting.push(...names.slice(i, i + 500).map((n) => acquireLock(waiterClient, n)));
      await waiterClient.sync();
      await waiterClient.exists('/');
    }
    // Every waiter has listed and set its predecessor watch once its exists reply is in.
    await new Promise((r) => setTimeout(r, 500));
    const withWaiters = heapUsed();
    console.log(`\nmemory: ${HELD} locks held on one session, then ${HELD} waiters on a second session in the same process (heap after GC)`);
    console.log(`  per held lock: ${((withHeld - before) / HELD).toFixed(0)} bytes   per waiter: ${((withWaiters - withHeld) / HELD).toFixed(0)} bytes`);
    console.log(`  (lock state on both sides: the holder's Lock, holding and own-node watch; the waiter's queue state and predecessor watch)`);
    for (const l of held) void l.release();
    const granted = await Promise.all(waiting);
    await Promise.all(granted.map((l) => l.release()));
  } finally {
    await holder.close();
    await waiterClient.close();
  }
}

async function handoffSection(setup: ZooKeeperClient): Promise<void> {
  const CONTENDERS = 16;
  await mkdirs(setup, [`/${tag}/nzc/handoff`]);
  const ours = await Promise.all(Array.from({ length: CONTENDERS }, () => ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 })));
  const theirs = await Promise.all(Array.from({ length: CONTENDERS }, () => nzcConnect()));
  const gaps = new Map<string, number[]>([
    ['fencekeeper', []],
    ['nzc', []],
  ]);
  const rate = new Map<string, number[]>([
    ['fencekeeper', []],
    ['nzc', []],
  ]);
  const run = async (impl: 'fencekeeper' | 'nzc'): Promise<void> => {
    let grants = 0;
    let releasedAt = -1;
    const start = performance.now();
    await Promise.all(
      Array.from({ length: CONTENDERS }, async (_, i) => {
        while (grants < HANDOFFS) {
          let release: () => Promise<void>;
          if (impl === 'fencekeeper') {
            const lock = await acquireLock(ours[i]!, `${tag}/handoff`);
            release = () => lock.release();
          } else {
            release = await nzcAcquire(theirs[i]!, `/${tag}/nzc/handoff`);
          }
          const now = performance.now();
          if (releasedAt >= 0) gaps.get(impl)!.push(now - releasedAt);
          grants++;
          releasedAt = performance.now();
          await release();
        }
      }),
    );
    rate.get(impl)!.push((grants * 1000) / (performance.now() - start));
  };
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const impl of round % 2 === 0 ? (['fencekeeper', 'nzc'] as const) : (['nzc', 'fencekeeper'] as const)) await run(impl);
    }
  } finally {
    await Promise.all(ours.map((c) => c.close()));
    for (const c of theirs) c.close();
  }
  console.log(`\ncontended handoff: ${CONTENDERS} sessions looping on one lock, release() call -> next grant (${ROUNDS} rounds x ${HANDOFFS} grants)`);
  for (const impl of ['fencekeeper', 'nzc']) {
    const g = gaps.get(impl)!;
    console.log(`  ${impl.padEnd(12)} p50 ${quantile(g, 0.5).toFixed(3)} ms  p99 ${quantile(g, 0.99).toFixed(3)} ms  grants/s ${median(rate.get(impl)!).toFixed(0)}`);
  }
}

async function main(): Promise<void> {
  const load = [loadavg()[0]!];
  const setup = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 30_000 });
  try {
    if (ONLY.has('cycles')) await cyclesSection(setup);
    load.push(loadavg()[0]!);
    if (ONLY.has('memory')) await memorySection();
    if (ONLY.has('handoff')) await handoffSection(setup);
    load.push(loadavg()[0]!);
  } finally {
    await rmTree(setup, `/${tag}`);
    await setup.close();
  }
  console.log(`\nserver ${SERVER}; load average (1 min): ${load.map((l) => l.toFixed(2)).join(' -> ')} on ${cpus().length} cores`);
  console.log(`process warnings: ${warnings.length === 0 ? 'none' : warnings.join(' | ')}`);
}

await main();
