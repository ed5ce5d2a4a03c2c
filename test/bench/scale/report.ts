// The scale bench's latest full results (test/bench/scale/results/<family>.json) as
// Markdown tables, for docs/benchmarks.md "At scale": the same numbers the runs
// printed and the charts show, with the load beside each.
//   node dist/test/bench/scale/report.js       (after bash test/bench/scale.sh has transpiled it)
import { loadResults } from './charts.js';

const all = await loadResults(false);
const kb = (b: number): string => (b / 1024).toFixed(2);
const out: string[] = [];
const sources = all.filter((r) => r.family !== 'stores');

out.push(
  'Handoff (release() -> next grant), ms. refilled: the handoff alone, the queue N deep at every timed release; rejoin: every granted contender joins again at once, beside the handoff. Ratio: p50 against the same mode\'s p50 at 1 waiter, same run. Beside it, same point: rtt (the source\'s cheapest request), list (ZooKeeper getChildren of the queue, Redis EXISTS + ZCARD, etcd and PostgreSQL lockStatus), release() (the call to its resolution), and PostgreSQL\'s enter scans (reap, holder_ms, is_head of the last entry, rolled back); grants/s: counted grants over their time (refilled: with the waits for the queue to refill between them).',
  '',
);
out.push('| source | mode | waiters | p50 | p99 | p50 / 1 waiter | rtt | list | release() | enter scans | grants/s | load |', '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
// NaN (no such figure) is written to the JSON as null.
const ms = (x: number | null | undefined): string => (x === undefined || x === null || Number.isNaN(x) ? '-' : x.toFixed(2));
for (const r of sources) {
  for (const mode of ['refilled', 'rejoin'] as const) {
    const rows = r.handoff.filter((h) => (h.mode ?? 'rejoin') === mode);
    const base = rows.find((h) => h.waiters === 1)?.p50 ?? NaN;
    for (const h of rows) {
      out.push(
        `| ${r.family} | ${mode} | ${h.waiters} | ${h.p50.toFixed(1)} | ${h.p99.toFixed(1)} | ${Number.isNaN(base) ? '- (no 1-waiter point)' : `${(h.p50 / base).toFixed(2)}x`} | ${ms(h.rttMs)} | ${ms(h.listMs)} | ${ms(h.releaseMs)} | ${ms(h.enterScansMs)} | ${h.grantsPerSecond.toFixed(0)}${h.partial === true ? ` (partial: ${h.counted} grants)` : ''} | ${h.load.toFixed(1)} |`,
      );
    }
  }
}
out.push('', 'Contended grants/s, P processes looping on one lock; ratio against 1 process, same run.', '');
out.push('| source | processes | grants/s | / 1 process | grants per process (min..max) | load |', '|---|---:|---:|---:|---|---:|');
for (const r of sources) {
  const base = r.contended[0]?.grantsPerSecond ?? NaN;
  for (const c of r.contended) out.push(`| ${r.family} | ${c.processes} | ${c.grantsPerSecond.toFixed(0)} | ${(c.grantsPerSecond / base).toFixed(2)}x | ${c.perProcessMin}..${c.perProcessMax} | ${c.load.toFixed(1)} |`);
}
out.push('', 'Heap per lock (KB, heapUsed after GC) and what the server holds per lock (KB, delta of the metric named).', '');
out.push('| source | locks | client per held | client per waiting | server per held | server per waiting | server metric | seconds (hold/wait/drain) | load |', '|---|---:|---:|---:|---:|---:|---|---|---:|');
for (const r of sources) {
  for (const h of r.heap) {
    const phases = h.phases === undefined ? '' : ` (${h.phases.hold.toFixed(0)}/${h.phases.wait.toFixed(0)}/${h.phases.drain.toFixed(0)})`;
    out.push(`| ${r.family} | ${h.locks} | ${kb(h.heldBytes)} | ${kb(h.waitingBytes)} | ${kb(h.serverHeldBytes)} | ${kb(h.serverWaitingBytes)} | ${h.serverWhat} | ${h.seconds.toFixed(0)}${phases} | ${h.load.toFixed(1)} |`);
  }
}
const stores = all.filter((r) => r.family === 'stores');
if (stores.length > 0) {
  out.push('', 'Fence stores, admissions/s with 16 loops; floor: the same loops doing one round trip with no work (memory: an awaited no-op).', '');
  out.push('| store | resources | admissions/s | floor/s | store / floor | / 1 resource | load |', '|---|---:|---:|---:|---:|---:|---:|');
  for (const r of stores) {
    for (const s of r.stores) {
      const one = r.stores.find((x) => x.store === s.store)!.admissionsPerSecond;
      out.push(`| ${s.store} | ${s.resources} | ${s.admissionsPerSecond.toFixed(0)} | ${s.floorPerSecond.toFixed(0)} | ${(s.admissionsPerSecond / s.floorPerSecond).toFixed(2)} | ${(s.admissionsPerSecond / one).toFixed(2)}x | ${s.load.toFixed(1)} |`);
    }
  }
}
const skipped = all.flatMap((r) => r.skipped.map((s) => `- ${r.family}, ${s}`));
if (skipped.length > 0) out.push('', 'Not measured, as the runs printed:', '', ...skipped);
out.push('', `Runs: ${all.map((r) => `${r.family} ${r.at} (${r.seconds ?? '?'} s, load ${Math.min(...r.loads).toFixed(1)}-${Math.max(...r.loads).toFixed(1)})`).join('; ')}.`);
console.log(out.join('\n'));
