// Benchmark: what an ACL costs an acquire + release, against the same lock without one.
//   FK_ZK_STANDALONE=127.0.0.1:2181 npx vite-node test/bench/lock-acl-throughput.ts
// Env: FK_ZK_STANDALONE (default 127.0.0.1:2181), BENCH_ROUNDS (default 5), BENCH_BLOCK_MS
// (time per variant per round and K, default 300).
//
// Two variants on one digest-authenticated session, K = 1 and 64 loops, each loop on its
// own lock name (a container that stays: a second child keeps it from being reaped):
//   open   acquireLock(zk, name)                         (OPEN_ACL_UNSAFE, no check)
//   acl    acquireLock(zk, name, { acl: CREATOR_ALL + world READ })  (checked once, then cached)
// The variants take turns in blocks of BENCH_BLOCK_MS, in alternating order, so a loaded
// machine loads both alike; medians over rounds of cycles/s and client CPU per cycle
// (process.cpuUsage), and the median of the per-round ratios. Prints figures; asserts nothing.
import { loadavg } from 'node:os';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, type ACL } from '../../src/sources/zookeeper/protocol.js';
import { acquireLock } from '../../src/sources/zookeeper/recipes/lock.js';
import { closedLoop, median, type LoopFigures } from './closed-loop.js';

const SERVER = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const BLOCK_MS = Number(process.env.BENCH_BLOCK_MS ?? 300);
const KS = [1, 64];
const ACL_: readonly ACL[] = [...CREATOR_ALL_ACL, ...READ_ACL_UNSAFE];
const tag = `aclbench_${process.pid}_${Date.now().toString(36)}`;

type Variant = 'open' | 'acl';
type Figures = LoopFigures;

function block(zk: ZooKeeperClient, variant: Variant, k: number): Promise<Figures> {
  const options = variant === 'acl' ? { acl: ACL_ } : {};
  const names = Array.from({ length: k }, (_, i) => `${tag}/${variant}-${i}`);
  return closedLoop(k, BLOCK_MS, async (i) => {
    const lock = await acquireLock(zk, names[i] as string, options);
    await lock.release();
  });
}

async function main(): Promise<void> {
  const zk = await ZooKeeperClient.connect({ connectString: SERVER, auth: [{ scheme: 'digest', credentials: 'bench:bench' }] });
  const keeps: string[] = [];
  try {
    // Containers kept alive by a 'keep' child, so every cycle is the hot path (no reap, no re-create).
    for (const variant of ['open', 'acl'] as const) {
      for (let i = 0; i < Math.max(...KS); i++) {
        const lock = await acquireLock(zk, `${tag}/${variant}-${i}`, variant === 'acl' ? { acl: ACL_ } : {});
        const keep = `${lock.path.slice(0, lock.path.lastIndexOf('/'))}/keep`;
        await zk.create(keep, null, { acl: OPEN_ACL_UNSAFE });
        keeps.push(keep);
        await lock.release();
      }
    }
    const load0 = loadavg()[0] as number;
    const rows: string[] = [];
    for (const k of KS) {
      const figures: Record<Variant, Figures[]> = { open: [], acl: [] };
      for (let round = 0; round < ROUNDS; round++) {
        const order: Variant[] = round % 2 === 0 ? ['open', 'acl'] : ['acl', 'open'];
        for (const v of order) figures[v].push(await block(zk, v, k));
      }
      const ratio = median(figures.acl.map((f, i) => f.rate / (figures.open[i] as Figures).rate));
      const cpuRatio = median(figures.acl.map((f, i) => f.cpuUs / (figures.open[i] as Figures).cpuUs));
      rows.push(
        `${String(k).padEnd(4)}${median(figures.open.map((f) => f.rate)).toFixed(0).padEnd(9)}${median(figures.acl.map((f) => f.rate)).toFixed(0).padEnd(9)}` +
          `${ratio.toFixed(2).padEnd(11)}${median(figures.open.map((f) => f.cpuUs)).toFixed(1).padEnd(10)}${median(figures.acl.map((f) => f.cpuUs)).toFixed(1).padEnd(10)}${cpuRatio.toFixed(2)}`,
      );
    }
    console.log(`\nacquire + release on one session, open vs acl (${ROUNDS} rounds of ${BLOCK_MS} ms per variant)`);
    console.log('K   open/s   acl/s    acl/open   CPU open  CPU acl   acl/open (us per cycle)');
    for (const row of rows) console.log(row);
    console.log(`server ${SERVER}; load average (1 min): ${load0.toFixed(2)} -> ${(loadavg()[0] as number).toFixed(2)}`);
  } finally {
    // Without their 'keep' child the containers are reaped: nothing stays behind.
    await Promise.allSettled(keeps.map((keep) => zk.delete(keep)));
    await zk.close();
  }
}

await main();
