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

/** Per mode: tx/s, latency p50/p99 (ms), server and client CPU per operation (µs), each round's rate. */
export function summarize(totals) {
  const summary = {};
  for (const [name, total] of Object.entries(totals)) {
    const sorted = [...total.latencies].sort((a, b) => a - b);
    const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    summary[name] = {
      tps: total.ops / (total.ms / 1000), p50: at(0.5), p99: at(0.99), ops: total.ops,
      serverUs: (total.serverMs * 1000) / total.ops, clientUs: (total.clientMs * 1000) / total.ops, rounds: total.rounds,
    };
  }
  return summary;
}

const median = (values) => {
  const v = [...values].sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)];
};

/** Mode a against mode b of one summary: overall, the median of the same-round ratios, and by CPU per operation. */
export function ratioText(summary, a, b) {
  const total = summary[a].tps / summary[b].tps;
  const perRound = median(summary[a].rounds.map((r, i) => r / summary[b].rounds[i]));
  const cpu = (summary[b].serverUs + summary[b].clientUs) / (summary[a].serverUs + summary[a].clientUs);
  return `${total.toFixed(3)}x overall, ${perRound.toFixed(3)}x median per round, ${cpu.toFixed(3)}x by CPU per op`;
}
