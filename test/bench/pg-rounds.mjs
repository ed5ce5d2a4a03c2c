// The measuring loop of the PostgreSQL benches (postgres-bench.mjs,
// pg-rows-bench.mjs): every mode runs `connections` closed loops for a block
// of time; the modes take turns, the starting one rotating each round, so a
// drifting load falls on all alike. Per mode: operations, time, latencies,
// the pool's backends' CPU and this process's CPU, and each round's rate.
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { backendCpuMs } from './server-cpu.mjs';

/** modes: name -> (id, body) => Promise. Answers { totals, loadBefore } (load average before the measured rounds). */
export async function measureModes(pool, { modes, connections, rounds, seconds, randomId }) {
  const serverMs = await backendCpuMs(pool, connections);
  const totals = Object.fromEntries(Object.keys(modes).map((name) => [name, { ops: 0, ms: 0, latencies: [], serverMs: 0, clientMs: 0, rounds: [] }]));
  const block = async (name, ms, record) => {
    const op = modes[name];
    const deadline = performance.now() + ms;
    const server0 = serverMs();
    const cpu0 = process.cpuUsage();
    const start = performance.now();
    let ops = 0;
    const latencies = [];
    await Promise.all(Array.from({ length: connections }, async () => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        await op(randomId(), `b${ops}`);
        latencies.push(performance.now() - t0);
        ops += 1;
      }
    }));
    if (!record) return;
    const elapsed = performance.now() - start;
    const cpu = process.cpuUsage(cpu0);
    const total = totals[name];
    total.ops += ops;
    total.ms += elapsed;
    total.serverMs += serverMs() - server0;
    total.clientMs += (cpu.user + cpu.system) / 1000;
    total.rounds.push(ops / elapsed);
    for (const latency of latencies) total.latencies.push(latency);
  };
  const names = Object.keys(modes);
  for (const name of names) await block(name, 500, false); // warm up: connections, plans, caches
  const loadBefore = loadavg();
  for (let round = 0; round < rounds; round += 1) {
    for (let i = 0; i < names.length; i += 1) await block(names[(i + round) % names.length], seconds * 1000, true);
  }
  return { totals, loadBefore };
}
