// The closed loop the ZooKeeper lock benchmarks time a variant with: K loops,
// each repeating its cycle until the block's end, counted together. The
// figures are cycles/s over the block and the client's CPU per cycle
// (process.cpuUsage, user + system, in microseconds).
import { performance } from 'node:perf_hooks';

export interface LoopFigures {
  readonly rate: number;
  readonly cpuUs: number;
}

export async function closedLoop(k: number, blockMs: number, cycle: (loop: number) => Promise<void>): Promise<LoopFigures> {
  const end = performance.now() + blockMs;
  let cycles = 0;
  const cpu = process.cpuUsage();
  const start = performance.now();
  await Promise.all(
    Array.from({ length: k }, async (_, i) => {
      while (performance.now() < end) {
        await cycle(i);
        cycles++;
      }
    }),
  );
  const elapsed = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return { rate: (cycles * 1000) / elapsed, cpuUs: (used.user + used.system) / cycles };
}

export const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
