// Benchmark: fencekeeper's lock against the same recipe on node-zookeeper-client 1.1.3.
//   FK_ZK_STANDALONE=127.0.0.1:2181 npx vite-node test/bench/lock-bench.ts
// Env: FK_ZK_STANDALONE (default 127.0.0.1:2181), BENCH_CYCLES (sequential cycles per run,
// default 1000), BENCH_GRANTS (grants per contended run, default 800), BENCH_RUNS (default 3).
//
// Both on the same ZooKeeper, in one process, taking turns in small blocks within each
// run (so a loaded machine loads both alike):
//   sequential   one session: acquire + release, one cycle at a time (cycles/s)
//   contended    16 sessions looping acquire + release on one lock (grants/s)
//   acquire      uncontended acquire latency, p50/p99 (from the sequential loop)
//   round trip   the floor: one exists() on our client, p50
//   traffic      socket writes and reads per sequential cycle, counted on the client's
//                sockets (a request that waits for a reply starts a new write)
// The nzc recipe is the textbook one: create ephemeral-sequential, getChildren,
// exists(predecessor, watch) when not first, delete: 3 round trips per uncontended
// cycle. The median of the runs is printed with ratios. Prints figures; asserts nothing.
import net from 'node:net';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { acquireLock } from '../../src/sources/zookeeper/recipes/lock.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { call, nzc, nzcAcquire, nzcConnect, type NzcClient } from './nzc-lock.js';

const SERVER = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const CYCLES = Number(process.env.BENCH_CYCLES ?? 1000);
const GRANTS = Number(process.env.BENCH_GRANTS ?? 800);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const CONTENDERS = 16;
const tag = `bench_${process.pid}_${Date.now().toString(36)}`;

// ---------------------------------------------------------------- node-zookeeper-client

async function nzcMkdirp(client: NzcClient, path: string): Promise<void> {
  let at = '';
  for (const part of path.split('/').filter(Boolean)) {
    at += `/${part}`;
    await new Promise<void>((resolve, reject) =>
      client.create(at, (err) => (err && err.getCode?.() !== nzc.Exception.NODE_EXISTS ? reject(err) : resolve())),
    );
  }
}

// ---------------------------------------------------------------- measurements

interface Figures {
  cyclesPerSec: number;
  cpuUsPerCycle: number;
  grantsPerSec: number;
  p50: number;
  p99: number;
  writesPerCycle: number;
  readsPerCycle: number;
}

const quantile = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] as number;
};
const median = (xs: number[]): number => quantile(xs, 0.5);

interface Impl {
  readonly label: string;
  /** One acquire; resolves with a release. */
  acquire(client: unknown, lock: string): Promise<() => Promise<void>>;
  connect(connectString: string): Promise<unknown>;
  close(client: unknown): Promise<void>;
}

const ours: Impl = {
  label: 'fencekeeper',
  async acquire(client, lock) {
    const l = await acquireLock(client as ZooKeeperClient, lock);
    return () => l.release();
  },
  connect: (connectString) => ZooKeeperClient.connect({ connectString, sessionTimeoutMs: 10_000 }),
  close: (client) => (client as ZooKeeperClient).close(),
};

const theirs: Impl = {
  label: 'node-zookeeper-client',
  acquire: (client, lock) => nzcAcquire(client as NzcClient, `/${tag}/${lock}`),
  async connect(connectString) {
    return nzcConnect(connectString);
  },
  async close(client) {
    (client as NzcClient).close();
  },
};

/**
 * Count socket writes and 'data' deliveries between this process and the
 * server, per cycle: the write syscalls a cycle costs and the wake-ups for
 * replies (a request that must wait for a reply starts a new write). Both
 * clients write through net.Socket, so patching its prototype counts both.
 */
const traffic = { writes: 0, reads: 0, port: -1 };
{
  const write = net.Socket.prototype.write;
  const emit = net.Socket.prototype.emit;
  net.Socket.prototype.write = function (this: net.Socket, ...args: unknown[]) {
    if (this.remotePort === traffic.port) traffic.writes++;
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as typeof write;
  net.Socket.prototype.emit = function (this: net.Socket, event: string | symbol, ...args: unknown[]) {
    if (event === 'data' && this.remotePort === traffic.port) traffic.reads++;
    return (emit as (...a: unknown[]) => boolean).call(this, event, ...args);
  } as typeof emit;
}

/** Time and CPU spent by one implementation, summed over its blocks. */
class Tally {
  ms = 0;
  cpuUs = 0;
  count = 0;
  readonly acquireMs: number[] = [];
  async block(count: number, body: () => Promise<void>): Promise<void> {
    const cpu = process.cpuUsage();
    const start = performance.now();
    await body();
    this.ms += performance.now() - start;
    const used = process.cpuUsage(cpu);
    this.cpuUs += used.user + used.system;
    this.count += count;
  }
}

async function cycles(impl: Impl, client: unknown, lock: string, n: number, tally: Tally): Promise<void> {
  await tally.block(n, async () => {
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      const release = await impl.acquire(client, lock);
      tally.acquireMs.push(performance.now() - t);
      await release();
    }
  });
}

async function trafficPerCycle(impl: Impl, client: unknown, lock: string): Promise<{ writes: number; reads: number }> {
  traffic.port = Number(SERVER.slice(SERVER.lastIndexOf(':') + 1));
  traffic.writes = traffic.reads = 0;
  const n = 200;
  for (let i = 0; i < n; i++) await (await impl.acquire(client, lock))();
  traffic.port = -1;
  return { writes: traffic.writes / n, reads: traffic.reads / n };
}

async function contendedBlock(impl: Impl, clients: unknown[], lock: string, grants: number, tally: Tally): Promise<void> {
  await tally.block(grants, async () => {
    let granted = 0;
    await Promise.all(
      clients.map(async (client) => {
        while (granted < grants) {
          const release = await impl.acquire(client, lock);
          granted++;
          await release();
        }
      }),
    );
  });
}

/** p50 of one read (exists) and of one write (create2 of an ephemeral), on our client. */
async function roundTrips(zk: ZooKeeperClient, n: number, read: number[], write: number[]): Promise<void> {
  for (let i = 0; i < n; i++) {
    let t = performance.now();
    await zk.exists('/');
    read.push(performance.now() - t);
    t = performance.now();
    const { path } = await zk.create(`/${tag}/rtt-`, null, { mode: 'ephemeral_sequential' });
    write.push(performance.now() - t);
    await zk.delete(path);
  }
}

/**
 * One run. The two implementations take turns in small blocks (50 cycles,
 * 100 contended grants), so on a loaded machine both see the same load.
 */
async function runOnce(run: number): Promise<{ figures: Map<Impl, Figures>; read: number; write: number }> {
  const impls = [ours, theirs];
  const lockOf = (impl: Impl, what: string): string => `${impl === ours ? tag : 'l'}_${run}_${what}`;
  const single = new Map<Impl, unknown>();
  const many = new Map<Impl, unknown[]>();
  for (const impl of impls) {
    single.set(impl, await impl.connect(SERVER));
    many.set(impl, await Promise.all(Array.from({ length: CONTENDERS }, () => impl.connect(SERVER))));
  }
  const rttClient = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 });
  try {
    const seq = new Map(impls.map((i) => [i, new Tally()]));
    const con = new Map(impls.map((i) => [i, new Tally()]));
    const read: number[] = [];
    const write: number[] = [];
    for (const impl of impls) for (let i = 0; i < 50; i++) await (await impl.acquire(single.get(impl), lockOf(impl, 'seq')))();
    for (let b = 0; b * 50 < CYCLES; b++) {
      const order = (b + run) % 2 === 0 ? impls : [...impls].reverse();
      for (const impl of order) await cycles(impl, single.get(impl), lockOf(impl, 'seq'), 50, seq.get(impl)!);
      await roundTrips(rttClient, 10, read, write);
    }
    for (let b = 0; b * 100 < GRANTS; b++) {
      const order = (b + run) % 2 === 0 ? impls : [...impls].reverse();
      for (const impl of order) await contendedBlock(impl, many.get(impl)!, lockOf(impl, 'con'), 100, con.get(impl)!);
    }
    const figures = new Map<Impl, Figures>();
    for (const impl of impls) {
      const t = await trafficPerCycle(impl, single.get(impl), lockOf(impl, 'seq'));
      const s = seq.get(impl)!;
      const c = con.get(impl)!;
      figures.set(impl, {
        cyclesPerSec: (s.count * 1000) / s.ms,
        cpuUsPerCycle: s.cpuUs / s.count,
        grantsPerSec: (c.count * 1000) / c.ms,
        p50: quantile(s.acquireMs, 0.5),
        p99: quantile(s.acquireMs, 0.99),
        writesPerCycle: t.writes,
        readsPerCycle: t.reads,
      });
    }
    return { figures, read: median(read), write: median(write) };
  } finally {
    for (const impl of impls) await Promise.all([single.get(impl), ...many.get(impl)!].map((c) => impl.close(c)));
    await rttClient.close();
  }
}

async function main(): Promise<void> {
  const setup = await nzcConnect(SERVER);
  for (let run = 0; run < RUNS; run++) {
    for (const suffix of ['seq', 'con']) await nzcMkdirp(setup, `/${tag}/l_${run}_${suffix}`);
  }
  const results = new Map<Impl, Figures[]>([
    [ours, []],
    [theirs, []],
  ]);
  const rtt: { read: number; write: number }[] = [];
  const load = [loadavg()[0]!];
  for (let run = 0; run < RUNS; run++) {
    const { figures, read, write } = await runOnce(run);
    for (const [impl, f] of figures) results.get(impl)!.push(f);
    rtt.push({ read, write });
    load.push(loadavg()[0]!);
    process.stderr.write(`run ${run + 1}/${RUNS} done\n`);
  }
  // Clean up the nzc parents (ours are containers, reaped by the server).
  const rm = async (path: string): Promise<void> => {
    const children = await call<string[]>((cb) => setup.getChildren(path, cb)).catch(() => [] as string[]);
    for (const c of children) await rm(`${path}/${c}`);
    await call<undefined>((cb) => setup.remove(path, -1, (err) => cb(err, undefined))).catch(() => undefined);
  };
  await rm(`/${tag}`);
  setup.close();

  const med = (impl: Impl, key: keyof Figures): number => median(results.get(impl)!.map((f) => f[key]));
  const rows: [string, keyof Figures, number, boolean][] = [
    ['sequential acquire+release (cycles/s)', 'cyclesPerSec', 0, true],
    [`${CONTENDERS} contenders (grants/s)`, 'grantsPerSec', 0, true],
    ['uncontended acquire p50 (ms)', 'p50', 3, false],
    ['uncontended acquire p99 (ms)', 'p99', 3, false],
    ['socket writes per cycle', 'writesPerCycle', 2, false],
    ['socket reads (wake-ups) per cycle', 'readsPerCycle', 2, false],
    ['client CPU per sequential cycle (us)', 'cpuUsPerCycle', 0, false],
  ];
  const pad = (s: string, n: number): string => s.padEnd(n);
  console.log(`\nlock benchmark on ${SERVER}: median of ${RUNS} runs (${CYCLES} cycles, ${GRANTS} contended grants each)`);
  console.log(`load average (1 min) during the runs: ${load.map((l) => l.toFixed(2)).join(' -> ')} on ${(await import('node:os')).cpus().length} cores`);
  console.log(
    `one round trip on our client, p50: a read (exists) ${median(rtt.map((r) => r.read)).toFixed(3)} ms, ` +
      `a write (create2 ephemeral) ${median(rtt.map((r) => r.write)).toFixed(3)} ms\n`,
  );
  console.log(`${pad('', 40)}${pad('fencekeeper', 14)}${pad('nzc 1.1.3', 14)}ours/nzc`);
  for (const [label, key, digits, higherIsBetter] of rows) {
    const a = med(ours, key);
    const b = med(theirs, key);
    const ratio = a / b;
    console.log(
      `${pad(label, 40)}${pad(a.toFixed(digits), 14)}${pad(b.toFixed(digits), 14)}${ratio.toFixed(2)}x${higherIsBetter ? '' : ' (lower is better)'}`,
    );
  }
  console.log('\nper run:');
  for (const impl of [ours, theirs]) {
    for (const [i, f] of results.get(impl)!.entries()) {
      console.log(
        `  ${pad(impl.label, 22)} run ${i + 1}: ${f.cyclesPerSec.toFixed(0)} cycles/s, ${f.grantsPerSec.toFixed(0)} grants/s, p50 ${f.p50.toFixed(3)} ms, p99 ${f.p99.toFixed(3)} ms, ${f.writesPerCycle.toFixed(2)} writes + ${f.readsPerCycle.toFixed(2)} reads/cycle, ${f.cpuUsPerCycle.toFixed(0)} us CPU/cycle`,
      );
    }
  }
}

await main();
