// Profile this client's hot path alone (pipelined exists):
//   NODE_OPTIONS='--cpu-prof --cpu-prof-dir=/tmp/fk-prof' FK_ZK_STANDALONE=127.0.0.1:2181 npx vite-node test/bench/zk-bench-profile.ts
import { performance } from 'node:perf_hooks';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';

const zk = await ZooKeeperClient.connect({ connectString: process.env.FK_ZK_STANDALONE ?? '127.0.0.1:2181', sessionTimeoutMs: 30_000 });
const total = Number(process.env.BENCH_PIPELINED ?? 200_000);
const window = 1000;
let issued = 0;
let done = 0;
const start = performance.now();
await new Promise<void>((resolve, reject) => {
  const next = (): void => {
    issued++;
    zk.exists('/zookeeper').then(() => {
      if (++done === total) resolve();
      else if (issued < total) next();
    }, reject);
  };
  for (let i = 0; i < window; i++) next();
});
console.log(`${((total * 1000) / (performance.now() - start)).toFixed(0)} exists/s`);
await zk.close();
