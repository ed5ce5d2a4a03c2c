// Scenario 4: uncontended acquire latency and lock cycles per second, one
// client, one lock name, acquire then release, on the deployment of each
// source's failover scenario (the pair's primary, the five Redlock nodes,
// the 3-node etcd cluster, the 3-node ZooKeeper ensemble). Sources one
// after the other, in the same run, so the figures share the machine's load.
import { cpuUsage } from 'node:process';
import type { LockSource } from '../../src/lock-source.js';
import { uniqueLockName } from '../helpers/unique.js';

export interface Latency {
  readonly cycles: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly cyclesPerSecond: number;
  /** This process's CPU (user + system) per acquire/release cycle. */
  readonly cpuMsPerCycle: number;
  /** /proc/loadavg's 1-minute figure when the measurement ended. */
  readonly loadAverage: number;
  /** Every acquire's time (ms, 3 decimals), sorted: the HTML page's latency chart (--html) draws them. */
  readonly acquireMs?: readonly number[];
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

export async function measureLatency(source: LockSource, cycles: number, loadAverage: () => number): Promise<Latency> {
  const name = uniqueLockName(`cmp_latency_${source.kind}`);
  // Warm-up: connections, scripts loaded, sessions and leases granted.
  for (let i = 0; i < 5; i++) await (await source.acquireLock(name)).release();
  const acquires: number[] = [];
  const cpu = cpuUsage();
  const start = performance.now();
  for (let i = 0; i < cycles; i++) {
    const t0 = performance.now();
    const lock = await source.acquireLock(name);
    acquires.push(performance.now() - t0);
    await lock.release();
  }
  const seconds = (performance.now() - start) / 1000;
  const used = cpuUsage(cpu);
  acquires.sort((a, b) => a - b);
  return {
    cycles,
    p50Ms: quantile(acquires, 0.5),
    p99Ms: quantile(acquires, 0.99),
    cyclesPerSecond: cycles / seconds,
    cpuMsPerCycle: (used.user + used.system) / 1000 / cycles,
    loadAverage: loadAverage(),
    acquireMs: acquires.map((t) => Math.round(t * 1000) / 1000),
  };
}
