// How long waiters wait on one contended lock (issue #28, items 3 and 4):
// 8 contenders, each with a client of its own, take one lock 25 times each
// (200 grants), hold it 1 ms, release, and ask again at once. Printed per
// case: the wall time of the run, and the wait of each acquire (from the
// call to the grant) as p50 / p99 / max, with the count of acquires that
// waited over 500 ms. A holder that re-acquires at once competes with the
// waiter its release woke: without a handoff it usually wins (barging), and
// the woken waiter sleeps until the next wake; the tail shows it.
//   FK_REDIS=redis://127.0.0.1:6390 FK_REDLOCK=redis://127.0.0.1:6391,... npx vite-node test/bench/redis-wait-fairness.ts
// Env: FK_REDIS, FK_REDLOCK (defaults: the test servers' ports), BENCH_CASES (a comma list of
// single, single-offline, redlock, redlock-offline; default all), BENCH_TIMEOUT_MS (each
// acquire's timeoutMs, default 60000: a timed-out acquire is counted, not fatal).
// Asserts nothing; the tests assert the order (test/integration/redis/wake.test.ts).
import { performance } from 'node:perf_hooks';
import { Redis, type RedisOptions } from 'ioredis';
import { acquireLock, type RedisTarget } from '../../src/sources/redis/index.js';

const single = process.env.FK_REDIS ?? 'redis://127.0.0.1:6390';
const nodes = (process.env.FK_REDLOCK ?? [6391, 6392, 6393, 6394, 6395].map((p) => `redis://127.0.0.1:${p}`).join(',')).split(',');
const CASES = (process.env.BENCH_CASES ?? 'single,single-offline,redlock,redlock-offline').split(',');
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_MS ?? 60_000);
const CONTENDERS = 8;
const GRANTS = 25;
const TTL_MS = 5000;

async function client(url: string, extra: RedisOptions): Promise<Redis> {
  const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(url);
  if (m === null) throw new Error(`not a redis://host:port URL: ${url}`);
  const c = new Redis({ host: m[1] as string, port: Number(m[2]), ...extra });
  c.on('error', () => {});
  // enableOfflineQueue: false refuses every command until the connection is ready.
  if (c.status !== 'ready') await new Promise((resolve) => c.once('ready', resolve));
  return c;
}

const pct = (sorted: readonly number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;

async function run(kind: string): Promise<void> {
  const extra: RedisOptions = kind.endsWith('-offline') ? { enableOfflineQueue: false } : {};
  const urls = kind.startsWith('redlock') ? nodes : [single];
  const clients = await Promise.all(Array.from({ length: CONTENDERS }, () => Promise.all(urls.map((u) => client(u, extra)))));
  const targets: RedisTarget[] = clients.map((c) => (c.length === 1 ? (c[0] as Redis) : c));
  const name = `bench/fair-${process.pid}-${Date.now()}-${kind}`;
  const waits: number[] = [];
  let timeouts = 0;
  const t0 = performance.now();
  await Promise.all(
    targets.map(async (target) => {
      for (let i = 0; i < GRANTS; i++) {
        const asked = performance.now();
        const lock = await acquireLock(target, name, { ttlMs: TTL_MS, timeoutMs: TIMEOUT_MS }).catch((e: unknown) => {
          if ((e as { code?: string }).code === 'LOCK_TIMEOUT') return null;
          throw e;
        });
        waits.push(performance.now() - asked);
        if (lock === null) {
          timeouts++;
          continue;
        }
        await new Promise((r) => setTimeout(r, 1));
        await lock.release();
      }
    }),
  );
  const wall = performance.now() - t0;
  for (const c of clients.flat()) c.disconnect();
  waits.sort((a, b) => a - b);
  const f = (ms: number): string => ms.toFixed(1).padStart(8);
  console.log(
    `${kind.padEnd(16)} wall ${(wall / 1000).toFixed(2).padStart(6)} s   wait p50 ${f(pct(waits, 50))} ms  p99 ${f(pct(waits, 99))} ms  max ${f(waits.at(-1) as number)} ms` +
      `   >500 ms: ${waits.filter((w) => w > 500).length}/${waits.length}   timeouts: ${timeouts}`,
  );
}

for (const kind of CASES) await run(kind);
