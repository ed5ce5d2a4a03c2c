// Benchmark: a fenced Redis write against the same write unfenced, on one
// server in one run, taking turns in blocks so that load on the machine falls
// on every mode alike:
//   fencedSet   fencekeeper/redis's fencedSet (EVALSHA of the compare-and-write script)
//   hset        the same hash write unfenced: HSET key value V token T
//   set         a plain SET key V (what an unfenced key would be)
//   lua-hset    the same HSET inside a minimal Lua script by EVALSHA, no
//               compare: the floor of any write done as a script, to tell
//               the script's own cost from fencekeeper's
// Each block runs one mode for BENCH_SECONDS with BENCH_CONCURRENCY writes in
// flight on one connection (each write waits for its reply before the next
// starts: a closed loop), over 64 keys, every write with a larger token.
// Printed: the median writes/s per mode and the ratios; nothing asserts on time.
//
//   npm run build && FK_REDIS=redis://127.0.0.1:6390 node test/bench/redis-fence-bench.mjs
//
// Env: FK_REDIS (default redis://127.0.0.1:6379), BENCH_SECONDS (per block,
// default 2), BENCH_ROUNDS (default 5), BENCH_CONCURRENCY (comma list,
// default 1,32). FK_DIST: the build to load (default ../../dist).
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';

const dist = process.env.FK_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
const { fencedSet } = await import(`${dist}/adapters/redis/index.js`);
const url = new URL(process.env.FK_REDIS ?? 'redis://127.0.0.1:6379');
const seconds = Number(process.env.BENCH_SECONDS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const levels = (process.env.BENCH_CONCURRENCY ?? '1,32').split(',').map(Number);
const KEYS = 64;
const prefix = `fk-bench:${randomBytes(4).toString('hex')}`;
const value = 'x'.repeat(100);
const redis = new Redis({ host: url.hostname, port: Number(url.port || 6379) });

let token = 0n;
const LUA_HSET = "return redis.call('HSET', KEYS[1], 'value', ARGV[1], 'token', ARGV[2])";
const luaSha = await redis.call('script', 'load', LUA_HSET);
const MODES = {
  fencedSet: (key) => fencedSet(redis, `${key}:f`, value, ++token),
  hset: (key) => redis.call('hset', `${key}:h`, 'value', value, 'token', String(++token)),
  set: (key) => redis.call('set', `${key}:s`, value),
  'lua-hset': (key) => redis.call('evalsha', luaSha, 1, `${key}:l`, value, String(++token)),
};

async function block(mode, concurrency) {
  const write = MODES[mode];
  const end = performance.now() + seconds * 1000;
  let done = 0;
  const worker = async (w) => {
    for (let i = w; performance.now() < end; i += concurrency) {
      await write(`${prefix}:${i % KEYS}`);
      done++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return done / ((performance.now() - started) / 1000);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

console.log(`redis ${url.host}, ${rounds} rounds of ${seconds} s blocks, modes taking turns; load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
// Warm up: the script loaded (EVALSHA finds it), the connection and JIT warm.
for (const mode of Object.keys(MODES)) for (let i = 0; i < 500; i++) await MODES[mode](`${prefix}:warm`);
for (const concurrency of levels) {
  const rates = Object.fromEntries(Object.keys(MODES).map((m) => [m, []]));
  for (let r = 0; r < rounds; r++) {
    // Alternate the order each round, so no mode always runs first.
    const order = r % 2 === 0 ? Object.keys(MODES) : Object.keys(MODES).reverse();
    for (const mode of order) rates[mode].push(await block(mode, concurrency));
  }
  const m = Object.fromEntries(Object.entries(rates).map(([k, v]) => [k, median(v)]));
  console.log(`concurrency ${concurrency}:`);
  for (const [mode, rate] of Object.entries(m)) console.log(`  ${mode.padEnd(10)} ${rate.toFixed(0).padStart(7)} writes/s (median; blocks ${rates[mode].map((x) => x.toFixed(0)).join(' ')})`);
  console.log(`  fencedSet / hset ${(m.fencedSet / m.hset).toFixed(2)}x, fencedSet / set ${(m.fencedSet / m.set).toFixed(2)}x, fencedSet / lua-hset ${(m.fencedSet / m['lua-hset']).toFixed(2)}x`);
}
console.log(`load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
// The bench's keys go (no fence left behind to refuse a later run: it starts its tokens from 1 again).
const keys = await redis.keys(`${prefix}:*`);
for (let i = 0; i < keys.length; i += 500) await redis.del(...keys.slice(i, i + 500));
redis.disconnect();
