// Handoff latency vs the number of waiters on one lock. N+1 contenders on one lock,
// spread over a few sources (sessions) of the same family, as a few application
// processes would hold them. Timed: the holder's release() call -> the next holder's
// grant. Two ways of keeping N waiters on the lock, each its own row:
//   refilled  the handoff alone: the released contender joins again only once the
//             next grant was seen, and the new holder releases only once the queue is
//             back to N+1 (holder + N waiters, by the source's own listing) and the
//             join has settled. The queue is N deep at every timed release and
//             nothing else of the bench is in flight during it.
//   rejoin    the previous figure: every granted contender releases and joins again
//             at the tail at once, so the timed handoff runs beside that re-join
//             (on ZooKeeper a join lists the whole queue). The first N+1 grants (the
//             join storm) are not counted.
// Beside each point, figures of the same run taken while the queue is N deep (in
// refilled, between samples, never inside a timed one): the source's round trip (its
// cheapest request), the listing of the queue (ZooKeeper: getChildren of the queue
// node, what a join lists; the others: lockStatus), how long release() itself takes
// to resolve, and on PostgreSQL the enter's scans of the name's queue
// (./sources.ts enterScans), and on ZooKeeper how many listings its waiters made per
// grant outside their joins (a waiter that could not tell a release from a give-up
// without one lists the queue; one of the process's deep-queue table does not).
import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import { openSource, type Opened, type SourceFamily } from './sources.js';

export type HandoffMode = 'refilled' | 'rejoin';

export interface HandoffPoint {
  readonly mode: HandoffMode;
  readonly waiters: number;
  readonly p50: number;
  readonly p99: number;
  readonly grantsPerSecond: number;
  /** The source's cheapest request, p50 (ms). */
  readonly rttMs: number;
  /** Listing the queue at N (ms, p50): ZooKeeper getChildren, others lockStatus. */
  readonly listMs: number;
  /** release() call to its resolution (ms, p50). */
  readonly releaseMs: number;
  /** PostgreSQL: the enter's queue scans at N (ms, p50); NaN elsewhere. */
  readonly enterScansMs: number;
  /** ZooKeeper: the recipes' listings outside a join per counted grant (a waiter told its predecessor left, unsure it heads the queue); NaN elsewhere. */
  readonly waiterListsPerGrant: number;
  /** Grants that came out of join order (a FIFO queue has 0). */
  readonly outOfOrder: number;
  /** Counted grants (the target unless the point ran out of time: then it is partial). */
  readonly counted: number;
  readonly partial: boolean;
}

const quantile = (xs: readonly number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function timed(xs: number[], f: () => Promise<unknown>): Promise<void> {
  const t = performance.now();
  await f();
  xs.push(performance.now() - t);
}

export interface HandoffOptions {
  readonly pgSchemaName?: string | undefined;
  readonly sessions: number;
  readonly mode: HandoffMode;
  /** Give up at this many ms: a point with >= 20 grants counted is returned as partial, else an error says how far it got. */
  readonly deadlineMs: number;
}

export async function handoffAt(family: SourceFamily, waiters: number, handoffs: number, o: HandoffOptions): Promise<HandoffPoint> {
  const started = performance.now();
  const sessions = Math.min(o.sessions, waiters + 1);
  const opened: Opened[] = await Promise.all(Array.from({ length: sessions }, () => openSource(family, { pgSchemaName: o.pgSchemaName, pgMax: 3 })));
  const probe = opened[0]!;
  const name = `scale/handoff/${family}/${o.mode}/${waiters}/${Date.now().toString(36)}`;
  const gaps: number[] = [];
  const rtts: number[] = [];
  const lists: number[] = [];
  const releases: number[] = [];
  const scans: number[] = [];
  let granted = 0;
  let releasedAt = -1;
  let counted = 0;
  let countStart = 0;
  let outOfOrder = 0;
  // The recipes' listings outside a join (ZooKeeper), read at the first counted grant and at the end.
  const listingsNow = (): number => opened.reduce((sum, s) => sum + (s.waiterListings?.() ?? NaN), 0);
  let listingsAtStart = NaN;
  // Join order: each contender takes a ticket before it asks; FIFO grants them in ticket order.
  let nextTicket = 0;
  let lastGranted = -1;
  // refilled: the released contender's gate, opened by the next grant.
  let wakePrevious: (() => void) | undefined;
  const stop = new AbortController();
  setMaxListeners(0, stop.signal); // every waiting acquire listens to the one stop signal
  // rejoin: the join storm (everyone at once) is not counted; refilled: every sample is at depth N, a few to warm.
  const warm = o.mode === 'rejoin' ? waiters + 1 : Math.min(waiters + 1, 10);
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const deadline = setTimeout(() => done(), Math.max(0, o.deadlineMs - (performance.now() - started)));
  // The figures beside the handoff, taken with the queue at N (refilled: before a release, untimed).
  const bounds = async (): Promise<void> => {
    await timed(rtts, () => probe.ping());
    await timed(lists, () => probe.queued(name));
    if (probe.enterScans !== undefined) await timed(scans, () => probe.enterScans!(name));
  };
  try {
    for (let i = 0; i < 20; i++) await timed(rtts, () => probe.ping());
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
          if (counted === 0) {
            countStart = releasedAt;
            listingsAtStart = listingsNow();
          }
          gaps.push(now - releasedAt);
          counted++;
        }
        if (counted >= handoffs && !stop.signal.aborted) {
          stop.abort();
          done();
        }
        let gate: Promise<void> | undefined;
        if (o.mode === 'refilled' && !stop.signal.aborted) {
          // The previous holder joins again now; release once it stands in the queue.
          const wake = wakePrevious;
          wakePrevious = undefined;
          wake?.();
          for (let tries = 0; tries < 2000 && !stop.signal.aborted; tries++) {
            if ((await probe.queued(name)) >= waiters + 1) break;
            await sleep(2);
          }
          // A join's own follow-up (ZooKeeper: its listing and the watch on its predecessor) ends within a few round trips.
          await sleep(10);
          if (granted % 5 === 0) await bounds();
          gate = new Promise<void>((r) => (wakePrevious = r));
        } else if (o.mode === 'rejoin' && granted > warm && granted % 5 === 0) {
          // A listing still under way when the point ends meets a closed connection: nothing to report.
          bounds().catch(() => undefined);
        }
        releasedAt = performance.now();
        await lock.release();
        releases.push(performance.now() - releasedAt);
        if (gate !== undefined) await Promise.race([gate, new Promise((r) => stop.signal.addEventListener('abort', r, { once: true }))]);
      }
    };
    const all = Promise.all(Array.from({ length: waiters + 1 }, (_, i) => contender(i)));
    await Promise.race([finished, all]);
    stop.abort();
    const elapsed = performance.now() - countStart;
    const waiterListings = listingsNow() - listingsAtStart;
    // Waiting acquires end with the abort; a source that does not answer within 30 s is left to close().
    await Promise.race([all.catch(() => undefined), sleep(30_000)]);
    const partial = counted < handoffs;
    if (partial && counted < 20) {
      const s = (performance.now() - started) / 1000;
      throw new Error(`did not finish within ${(o.deadlineMs / 1000).toFixed(0)} s: ${granted} grants in ${s.toFixed(0)} s (${(granted / s).toFixed(1)}/s), ${counted} counted of the ${handoffs} wanted after the ${warm} warm-up grants`);
    }
    return {
      mode: o.mode,
      waiters,
      p50: quantile(gaps, 0.5),
      p99: quantile(gaps, 0.99),
      grantsPerSecond: (counted * 1000) / elapsed,
      rttMs: quantile(rtts, 0.5),
      listMs: quantile(lists, 0.5),
      releaseMs: quantile(releases, 0.5),
      enterScansMs: scans.length > 0 ? quantile(scans, 0.5) : NaN,
      waiterListsPerGrant: waiterListings / counted,
      outOfOrder,
      counted,
      partial,
    };
  } finally {
    clearTimeout(deadline);
    stop.abort();
    await Promise.all(opened.map((s) => s.close().catch(() => undefined)));
  }
}
