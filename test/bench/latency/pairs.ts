// A fenced path and its unfenced baseline, measured side by side through the
// delay proxy: the two sides take turns in blocks (the order alternating by
// round, so load from elsewhere on the machine falls on both alike), each block
// a closed loop of `concurrency` workers. Per side: the median ops/s over the
// rounds and its interquartile range; the ratio: the median of the per-round
// ratios (fenced / baseline, each round's blocks back to back) with its IQR.
// Round trips are counted, not timed: a few operations of each side alone,
// one at a time, with the proxy's flight counters read before and after. A
// flight is counted per connection, so a client talking to several servers in
// parallel (Redlock's five nodes) shows the sum over its connections, not the
// round trips it waits for in sequence.
import { performance } from 'node:perf_hooks';
import { median, quantile, type DelayProxy } from './proxy.js';

/** One side of a pair: `op(worker)` is one operation of worker `worker` (0-based; workers never share a key). */
export interface Side {
  readonly name: string;
  op(worker: number): Promise<unknown>;
}

export interface PathPair {
  /** Short, for tables and chart file names. */
  readonly path: string;
  readonly fenced: Side;
  readonly baseline: Side;
  /** The aim for fenced / baseline at 0.5 ms RTT and concurrency 1. */
  readonly aim: number;
  /** The concurrency this path's bench usually runs at. */
  readonly usual: number;
  close(): Promise<void>;
}

export interface PairResult {
  readonly path: string;
  readonly rttMs: number;
  readonly concurrency: number;
  readonly fencedOps: readonly number[];
  readonly baselineOps: readonly number[];
  readonly ratios: readonly number[];
  /** Client flights (round trips) per operation, from the proxy, counted at concurrency 1. */
  readonly fencedTrips?: number;
  readonly baselineTrips?: number;
  /** The proxy's CPU per operation carried, microseconds (both sides' blocks together). */
  readonly proxyCpuUsPerOp: number;
  readonly load: number;
}

export interface Timing {
  readonly rounds: number;
  readonly blockMs: number;
}

async function block(side: Side, concurrency: number, ms: number): Promise<number> {
  let ops = 0;
  const t0 = performance.now();
  const until = t0 + ms;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (performance.now() < until) {
        await side.op(worker);
        ops += 1;
      }
    }),
  );
  return ops / ((performance.now() - t0) / 1000);
}

/**
 * Round trips per operation of `side` (one at a time, after a warm-up), from the proxy's counters.
 * The warm-up is several operations: a pool may open a second connection in its first few
 * (PostgresFenceStore does), whose handshake is not the steady state.
 */
export async function countTrips(proxy: DelayProxy, side: Side, count = 20): Promise<number> {
  for (let i = 0; i < 5; i += 1) await side.op(0);
  const before = await proxy.stats();
  for (let i = 0; i < count; i += 1) await side.op(0);
  const after = await proxy.stats();
  return (after.flightsC2s - before.flightsC2s) / count;
}

export async function measurePair(proxy: DelayProxy, pair: PathPair, rttMs: number, concurrency: number, timing: Timing, count: boolean): Promise<PairResult> {
  const fencedTrips = count ? await countTrips(proxy, pair.fenced) : undefined;
  const baselineTrips = count ? await countTrips(proxy, pair.baseline) : undefined;
  // Warm every worker's connection and key on both sides.
  await block(pair.baseline, concurrency, Math.min(200, timing.blockMs));
  await block(pair.fenced, concurrency, Math.min(200, timing.blockMs));
  const fencedOps: number[] = [];
  const baselineOps: number[] = [];
  const ratios: number[] = [];
  const cpu0 = await proxy.stats();
  let totalOps = 0;
  for (let round = 0; round < timing.rounds; round += 1) {
    let f: number;
    let b: number;
    if (round % 2 === 0) {
      b = await block(pair.baseline, concurrency, timing.blockMs);
      f = await block(pair.fenced, concurrency, timing.blockMs);
    } else {
      f = await block(pair.fenced, concurrency, timing.blockMs);
      b = await block(pair.baseline, concurrency, timing.blockMs);
    }
    fencedOps.push(f);
    baselineOps.push(b);
    ratios.push(f / b);
    totalOps += ((f + b) * timing.blockMs) / 1000;
  }
  const cpu1 = await proxy.stats();
  const { loadavg } = await import('node:os');
  return {
    path: pair.path,
    rttMs,
    concurrency,
    fencedOps,
    baselineOps,
    ratios,
    ...(fencedTrips === undefined ? {} : { fencedTrips }),
    ...(baselineTrips === undefined ? {} : { baselineTrips }),
    proxyCpuUsPerOp: (cpu1.cpuUs - cpu0.cpuUs) / Math.max(1, totalOps),
    load: loadavg()[0] ?? Number.NaN,
  };
}

const iqr = (xs: readonly number[]): string => `${quantile(xs, 0.25).toFixed(0)}-${quantile(xs, 0.75).toFixed(0)}`;
const iqrRatio = (xs: readonly number[]): string => `${quantile(xs, 0.25).toFixed(2)}-${quantile(xs, 0.75).toFixed(2)}`;

export const HEADER = `${'path'.padEnd(26)}${'RTT'.padStart(5)}${'c'.padStart(4)}  ${'fenced ops/s (IQR)'.padEnd(22)}${'baseline ops/s (IQR)'.padEnd(22)}${'ratio (IQR)'.padEnd(18)}${'trips f/b'.padEnd(11)}${'proxy us/op'.padEnd(12)}load`;

export function row(r: PairResult, pair: Pick<PathPair, 'aim'>): string {
  const ratio = median(r.ratios);
  const trips = r.fencedTrips === undefined ? '' : `${fmtTrips(r.fencedTrips)}/${fmtTrips(r.baselineTrips!)}`;
  let note = '';
  if (r.rttMs === 0.5 && r.concurrency === 1) {
    note = ratio >= pair.aim ? `  aim >= ${pair.aim}: met` : `  aim >= ${pair.aim}: not met${r.fencedTrips !== undefined && r.fencedTrips > r.baselineTrips! ? ` (${fmtTrips(r.fencedTrips - r.baselineTrips!)} round trip(s) more than the baseline: bound ${(r.baselineTrips! / r.fencedTrips).toFixed(2)}x at RTT-bound speed)` : ' (same round trips as the baseline: the rest is CPU, server or client)'}`;
  }
  return (
    `${r.path.padEnd(26)}${r.rttMs.toFixed(1).padStart(5)}${String(r.concurrency).padStart(4)}  ` +
    `${`${median(r.fencedOps).toFixed(0)} (${iqr(r.fencedOps)})`.padEnd(22)}${`${median(r.baselineOps).toFixed(0)} (${iqr(r.baselineOps)})`.padEnd(22)}` +
    `${`${ratio.toFixed(2)}x (${iqrRatio(r.ratios)})`.padEnd(18)}${trips.padEnd(11)}${r.proxyCpuUsPerOp.toFixed(0).padEnd(12)}${r.load.toFixed(1)}${note}`
  );
}

const fmtTrips = (t: number): string => (Number.isInteger(t) ? String(t) : t.toFixed(1));
