// Profile one lock implementation's uncontended cycle alone: K loops on one session, each on its own lock.
//   FK_ZK_STANDALONE=127.0.0.1:2181 node --cpu-prof --cpu-prof-dir=/tmp/fk-prof node_modules/vite-node/vite-node.mjs test/bench/lock-profile.ts
// Env: BENCH_K (default 1), BENCH_MS (default 5000), BENCH_IMPL (fencekeeper | client: the same requests on our client without the recipe | floor;
// default fencekeeper).
// BENCH_SIGNAL=1: every holder reads lock.signal (the step-down holding is made).
// Prints cycles/s and CPU per cycle (user and system).
import { performance } from 'node:perf_hooks';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { acquireLock } from '../../src/sources/zookeeper/recipes/lock.js';
import { RawSession, rawCycle } from './raw-zk.js';

const K = Number(process.env.BENCH_K ?? 1);
const MS = Number(process.env.BENCH_MS ?? 5000);
const IMPL = process.env.BENCH_IMPL ?? 'fencekeeper';
const SIGNAL = process.env.BENCH_SIGNAL === '1';
const SERVER = process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181';
const zk = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 10_000 });
const raw = await RawSession.connect(SERVER);
const tag = `prof_${process.pid}`;
if (IMPL === 'floor' || IMPL === 'client') {
  for (const path of ['/' + tag, ...Array.from({ length: K }, (_, i) => `/${tag}/${i}`)]) await zk.create(path);
}
let cycles = 0;
const cpu = process.cpuUsage();
const start = performance.now();
await Promise.all(
  Array.from({ length: K }, async (_, i) => {
    while (performance.now() - start < MS) {
      if (IMPL === 'floor') {
        await rawCycle(raw, `/${tag}/${i}`);
      } else if (IMPL === 'client') {
        const parent = `/${tag}/${i}`;
        const created = zk.create(`${parent}/x-lock-`, null, { mode: 'ephemeral_sequential' });
        const listed = zk.getChildren(parent);
        const { path } = await created;
        await listed;
        await zk.delete(path);
      } else {
        const lock = await acquireLock(zk, `${tag}/${i}`);
        if (SIGNAL) void lock.signal; // a holder that hands its signal to its work
        await lock.release();
      }
      cycles++;
    }
  }),
);
const used = process.cpuUsage(cpu);
console.log(
  `${IMPL} K=${K}: ${((cycles * 1000) / (performance.now() - start)).toFixed(0)} cycles/s, ${((used.user + used.system) / cycles).toFixed(1)} us CPU/cycle ` +
    `(user ${(used.user / cycles).toFixed(1)}, system ${(used.system / cycles).toFixed(1)})`,
);
if (IMPL === 'floor' || IMPL === 'client') {
  for (let i = 0; i < K; i++) await zk.delete(`/${tag}/${i}`);
  await zk.delete(`/${tag}`);
}
raw.close();
await zk.close();
