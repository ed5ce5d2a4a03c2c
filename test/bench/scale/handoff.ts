// Handoff latency vs the number of waiters on one lock: N+1 contenders loop on one
// lock (acquire, release, acquire again at the tail), so at every handoff N acquires
// wait. Timed: the holder's release() call -> the next holder's grant. The first N+1
// grants (the join storm: everyone arriving at once) are not counted; then `handoffs`
// grants are. The contenders are spread over a few sources (sessions) of the same
// family, as a few application processes would hold them. Beside each: the p50 at 1
// waiter of the same run (the flat-curve baseline) and the source's round trip
// (its cheapest request, measured between the N's: the bound a handoff takes at
// least one of).
import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import { openSource, type Opened, type SourceFamily } from './sources.js';

export interface HandoffPoint {
  readonly waiters: number;
  readonly p50: number;
  readonly p99: number;
  readonly grantsPerSecond: number;
  readonly rttMs: number;
  /** Grants that came out of join order (a FIFO queue has 0). */
  readonly outOfOrder: number;
}

const quantile = (xs: readonly number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};

async function rtt(opened: Opened): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    await opened.ping();
    xs.push(performance.now() - t);
  }
  return quantile(xs, 0.5);
}

export async function handoffAt(family: SourceFamily, waiters: number, handoffs: number, o: { pgSchemaName?: string | undefined; sessions: number }): Promise<HandoffPoint> {
  const sessions = Math.min(o.sessions, waiters + 1);
  const opened = await Promise.all(Array.from({ length: sessions }, () => openSource(family, { pgSchemaName: o.pgSchemaName, pgMax: 3 })));
  const name = `scale/handoff/${family}/${waiters}/${Date.now().toString(36)}`;
  const gaps: number[] = [];
  let granted = 0;
  let releasedAt = -1;
  let counted = 0;
  let countStart = 0;
  let outOfOrder = 0;
  // Join order: each contender takes a ticket before it asks; FIFO grants them in ticket order.
  let nextTicket = 0;
  let lastGranted = -1;
  const stop = new AbortController();
  setMaxListeners(0, stop.signal); // every waiting acquire listens to the one stop signal
  const warm = waiters + 1;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  try {
    const bound = await rtt(opened[0]!);
    const contender = async (i: number): Promise<void> => {
      const source = opened[i % sessions]!.source;
      while (!stop.signal.aborted) {
        const ticket = nextTicket++;
        let lock;
        try {
          lock = await source.acquireLock(name, { signal: stop.signal });
        } catch (e) {
          if (stop.signal.aborted) return;
          throw e;
        }
        const now = performance.now();
        granted++;
        if (ticket < lastGranted) outOfOrder++;
        lastGranted = ticket;
        if (granted > warm && releasedAt >= 0) {
          if (counted === 0) countStart = releasedAt;
          gaps.push(now - releasedAt);
          counted++;
        }
        if (counted >= handoffs && !stop.signal.aborted) {
          stop.abort();
          done();
        }
        releasedAt = performance.now();
        await lock.release();
      }
    };
    const all = Promise.all(Array.from({ length: waiters + 1 }, (_, i) => contender(i)));
    await Promise.race([finished, all]);
    const elapsed = performance.now() - countStart;
    await all;
    return { waiters, p50: quantile(gaps, 0.5), p99: quantile(gaps, 0.99), grantsPerSecond: (counted * 1000) / elapsed, rttMs: bound, outOfOrder };
  } finally {
    await Promise.all(opened.map((s) => s.close()));
  }
}
