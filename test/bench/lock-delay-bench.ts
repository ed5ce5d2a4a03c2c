// Benchmark: what opting into lock-delay costs an uncontended acquire + release.
//   FK_ZK_STANDALONE=127.0.0.1:2181 npx vite-node test/bench/lock-delay-bench.ts
// Env: FK_ZK_STANDALONE (default 127.0.0.1:2181), BENCH_ROUNDS (default 9), BENCH_BLOCK_MS (default 400).
//
// Two variants on one session each, in alternating blocks of BENCH_BLOCK_MS (the order
// flips every round, so a loaded machine loads both alike), K = 1 and 16 loops each
// cycling its own lock name:
//   plain      acquireLock + release: the default path (a create2 and its listing, a delete)
//   delayed    the same with { lockDelayMs: 1 }: the parent's stat read before and after the
//              create (pipelined in the same write), and a release that deletes the node and
//              writes the parent in one multi. A lock seen without a clean record (its
//              first acquire, one after the container was reaped) waits the 1 ms.
// Prints cycles/s (median over rounds), the median per-round ratio delayed/plain, client CPU
// per cycle (process.cpuUsage) and the load average. Asserts nothing.
import { loadavg } from 'node:os';
import { acquireLock } from '../../src/sources/zookeeper/recipes/lock.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { closedLoop, median, type LoopFigures } from './closed-loop.js';

const SERVER = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);
const BLOCK_MS = Number(process.env.BENCH_BLOCK_MS ?? 400);
const KS = [1, 16];
const tag = `ld_${process.pid}_${Date.now().toString(36)}`;
type Variant = 'plain' | 'delayed';

const clients: Record<Variant, ZooKeeperClient> = {
  plain: await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 }),
  delayed: await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 }),
};

function block(variant: Variant, k: number): Promise<LoopFigures> {
  const zk = clients[variant];
  const options = variant === 'delayed' ? { lockDelayMs: 1 } : {};
  return closedLoop(k, BLOCK_MS, async (i) => {
    const lock = await acquireLock(zk, `${tag}/${variant}-${k}-${i}`, options);
    await lock.release();
  });
}

const figures = new Map(KS.map((k) => [k, { plain: [] as number[], delayed: [] as number[], ratio: [] as number[], cpuPlain: [] as number[], cpuDelayed: [] as number[] }]));
const loads: number[] = [];
for (const k of KS) {
  await block('plain', k); // warm-up (and the delayed locks' first, unrecorded acquire)
  await block('delayed', k);
}
for (let round = 0; round < ROUNDS; round++) {
  loads.push(loadavg()[0] as number);
  for (const k of KS) {
    const order: Variant[] = round % 2 === 0 ? ['plain', 'delayed'] : ['delayed', 'plain'];
    const out = {} as Record<Variant, { rate: number; cpuUs: number }>;
    for (const variant of order) out[variant] = await block(variant, k);
    const f = figures.get(k)!;
    f.plain.push(out.plain.rate);
    f.delayed.push(out.delayed.rate);
    f.ratio.push(out.delayed.rate / out.plain.rate);
    f.cpuPlain.push(out.plain.cpuUs);
    f.cpuDelayed.push(out.delayed.cpuUs);
  }
}
console.log(`lock-delay's cost, uncontended: ${ROUNDS} rounds of ${BLOCK_MS} ms per variant and K, alternating order`);
console.log('K   plain/s  delayed/s  delayed/plain  CPU us/cycle plain  delayed');
for (const k of KS) {
  const f = figures.get(k)!;
  console.log(
    `${String(k).padEnd(3)} ${median(f.plain).toFixed(0).padStart(7)}  ${median(f.delayed).toFixed(0).padStart(9)}  ${median(f.ratio).toFixed(2).padStart(13)}  ${median(f.cpuPlain).toFixed(1).padStart(18)}  ${median(f.cpuDelayed).toFixed(1).padStart(7)}`,
  );
}
console.log(`server ${SERVER}; load average (1 min) per round: ${loads.map((l) => l.toFixed(1)).join(' ')}`);
await Promise.all(Object.values(clients).map((zk) => zk.close()));
