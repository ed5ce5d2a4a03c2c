// The scale bench (issue #35): how each token source's cost grows with the work.
//   npm run bench:scale -- <family> [--quick]      family: zookeeper etcd redis redlock postgres stores
// (bash test/bench/scale.sh: builds, transpiles this folder into dist/test/bench/, runs it
// under plain Node with --expose-gc; it starts the family's own servers and stops them
// after, see its header). Servers from the environment it sets (. /work/srv/env style):
// FK_ZK_ENSEMBLE, FK_ETCD_CLUSTER, FK_REDIS, FK_REDLOCK, DATABASE_URL.
//
// A source family prints, each figure beside its baseline or bound of the same run and
// the machine's load (1-minute average) when it was taken:
//   handoff    p50/p99 of release() -> next grant vs waiters on one lock (1, 10, 100,
//              1,000), against the 1-waiter p50 (the aim: flat within 1.5x) and the
//              source's round trip (./handoff.ts)
//   contended  grants/s vs processes looping on one lock (1..32), against 1 process (./contended.ts)
//   heap       client heap per held lock and per waiting acquire at 1,000 / 10,000 /
//              100,000 locks, and what the server holds per lock (./heap.ts); a size
//              whose projected time would take the family past its 10-minute budget is
//              skipped, saying so
// `stores` prints admissions/s vs resources (1..10,000) for MemoryFenceStore,
// PostgresFenceStore and RedisFenceStore, each beside its one-round-trip floor (./stores.ts).
// --quick: fewer and smaller points (a minute or two). Each run writes its figures to
// test/bench/scale/results/<family>.json and redraws docs/images/bench/scale-*.svg from
// every family's latest results (./charts.ts). Asserts nothing.
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { FAMILIES, DEPLOYMENT, pgSchema, type SourceFamily } from './sources.js';
import { handoffAt, type HandoffMode } from './handoff.js';
import { heapAt, DRAIN_UP_TO } from './heap.js';
import { contendedAt, pgFreeConnections, PG_CHILD_POOL } from './contended.js';
import { openStore, storeAt, STORES, type StorePoint } from './stores.js';
import { drawCharts, RESULTS_DIR, type FamilyResults } from './charts.js';

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const family = args.find((a) => !a.startsWith('--')) ?? '';
const only = new Set((args.find((a) => a.startsWith('--sections='))?.slice(11) ?? 'handoff,contended,heap').split(','));
// The family's 10 minutes: the heap section goes first and may spend HEAP_BUDGET_S (its
// 100,000 point is the one that takes time), the handoff and contended points what is left
// of BUDGET_S; a point that would start past it is skipped, saying so.
const BUDGET_S = Number(process.env['SCALE_BUDGET_S'] ?? 570);
const HEAP_BUDGET_S = Number(process.env['SCALE_HEAP_BUDGET_S'] ?? 420);
const POINT_TIMEOUT_S = Number(process.env['SCALE_POINT_TIMEOUT_S'] ?? 180);
const started = performance.now();
const elapsedS = (): number => (performance.now() - started) / 1000;
const load = (): number => Number(loadavg()[0]!.toFixed(2));
const f = (x: number | undefined, d = 2): string => (x === undefined || Number.isNaN(x) ? '-' : Number.isFinite(x) ? x.toFixed(d) : String(x));
const kb = (b: number): string => `${(b / 1024).toFixed(2)} KB`;

if (![...FAMILIES, 'stores'].includes(family)) {
  console.error(`usage: npm run bench:scale -- <${[...FAMILIES, 'stores'].join('|')}> [--quick] [--sections=handoff,contended,heap]`);
  process.exit(64);
}

// A point given up (see point()) may still reject later, its session lost: logged, not fatal.
process.on('unhandledRejection', (e) => console.error(`(after a point was given up) ${String(e)}`));
const results: FamilyResults = { family, quick, at: new Date().toISOString(), cores: cpus().length, loads: [load()], handoff: [], contended: [], heap: [], stores: [], skipped: [] };

/** One measured point; a failure (a server timing out under the machine's load) is printed and recorded, and the run goes on. */
async function point<T>(what: string, run: () => Promise<T>, timeoutS = Math.min(POINT_TIMEOUT_S, Math.max(30, BUDGET_S + 20 - elapsedS()))): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  if (elapsedS() > BUDGET_S) {
    const why = `skipped: the family's ${BUDGET_S} s budget was spent (${elapsedS().toFixed(0)} s elapsed)`;
    results.skipped.push(`${what}: ${why}`);
    console.log(`${what} ${why}`);
    return undefined;
  }
  try {
    // A point that hangs (a server stalled under the machine's load) is given up after POINT_TIMEOUT_S, said so, and the run goes on.
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`did not finish within ${timeoutS.toFixed(0)} s`)), timeoutS * 1000);
    });
    return await Promise.race([run(), timeout]);
  } catch (e) {
    const why = `failed: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)} (load ${load()})`;
    results.skipped.push(`${what}: ${why}`);
    console.log(`${what} ${why}`);
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

async function sourceFamily(fam: SourceFamily): Promise<void> {
  console.log(`scale: ${fam}, ${DEPLOYMENT[fam]}${quick ? ' (quick)' : ''}; ${cpus().length} cores, load ${load()}`);
  const pg = fam === 'postgres' ? await pgSchema() : undefined;
  const o = { pgSchemaName: pg?.schema };
  try {
    if (only.has('heap')) {
      const ls = process.env['SCALE_HEAP_SIZES']?.split(',').map(Number) ?? (quick ? [1000] : [1000, 10_000, 100_000]);
      console.log('\nheap: L locks held by one source, then one waiting acquire per lock from a second source in the same process (heapUsed after GC)');
      console.log('locks    per held   per waiting  server/held  server/waiting  seconds (hold/wait/drain)  load   server read');
      let lastSeconds = 0;
      let lastDrain = 0;
      let lastL = 0;
      for (const l of ls) {
        // Time grows about linearly with L: skip a size whose projection passes the budget.
        // Above DRAIN_UP_TO a point is not drained: its projection leaves the drain out.
        const linear = lastL === 0 ? 0 : ((l > DRAIN_UP_TO ? lastSeconds - lastDrain : lastSeconds) * l) / lastL;
        // etcd: its watches are pipelined on one Watch stream per client, and a point's own time grows
        // about linearly with L (1,000 -> 10,000: hold 1 -> 8 s, wait 2 -> 14 s, load 5-11). The bare
        // requests printed below (./heap.ts etcdBare), timed after the point under whatever load there is
        // then, are no floor to project from: 10,000 bare puts took 11.7 s where the point's 10,000 puts
        // and 10,000 watch creates took 8 s. (With etcd3's watch manager, which sent one create at a time
        // and grew faster than L, they were.)
        const projected = linear;
        if (elapsedS() + projected > HEAP_BUDGET_S) {
          const why =
            lastL === 0
              ? `the heap section's ${HEAP_BUDGET_S} s budget was spent (${elapsedS().toFixed(0)} s elapsed) before this size`
              : `projected ${projected.toFixed(0)} s (${lastSeconds.toFixed(0)} s at ${lastL} x ${l / lastL}) would pass the heap section's ${HEAP_BUDGET_S} s budget at ${elapsedS().toFixed(0)} s elapsed`;
          results.skipped.push(`heap ${l}: ${why}`);
          console.log(`${String(l).padEnd(9)}skipped: ${why}`);
          continue;
        }
        const p = await point(`heap ${l}`, () => heapAt(fam, l, o), Math.max(30, HEAP_BUDGET_S - elapsedS() + 60));
        if (p === undefined) continue;
        results.heap.push({ ...p, load: load() });
        lastSeconds = p.seconds;
        lastDrain = p.phases.drain;
        lastL = l;
        console.log(
          `${String(l).padEnd(9)}${kb(p.heldBytes).padEnd(11)}${kb(p.waitingBytes).padEnd(13)}${kb(p.serverHeldBytes).padEnd(13)}${kb(p.serverWaitingBytes).padEnd(16)}${`${f(p.seconds, 0)} (${f(p.phases.hold, 0)}/${f(p.phases.wait, 0)}/${f(p.phases.drain, 0)})`.padEnd(26)}${String(load()).padEnd(7)}${p.serverWhat} (${p.serverDetail})`,
        );
      }
      for (const h of results.heap) {
        if (h.bare !== undefined) console.log(`  floor at ${h.locks} (same run, bare etcd3, no source): ${h.locks} put-if-absent txns with a lease ${f(h.bare.puts, 1)} s, ${h.locks} watch creates ${f(h.bare.watchCreates, 1)} s (pipelined on one Watch stream), ${h.locks} deletes ${f(h.bare.deletes, 1)} s; the point: ${f(h.seconds, 0)} s`);
      }
      if (fam === 'zookeeper') {
        const top = results.heap[results.heap.length - 1];
        if (top !== undefined) console.log(`  aims at 100,000 (ZooKeeper): <= 2 KB per waiting acquire, <= 0.75 KB per held lock; at ${top.locks}: ${kb(top.waitingBytes)}, ${kb(top.heldBytes)}`);
      }
    }
    if (only.has('handoff')) {
      const ns = process.env['SCALE_HANDOFF_WAITERS']?.split(',').map(Number) ?? (quick ? [1, 10, 100] : [1, 10, 100, 1000]);
      const handoffs = quick ? 100 : 200;
      console.log(`\nhandoff: N waiters on one lock (N+1 contenders over up to 8 sessions), release() -> next grant, ${handoffs} grants per point`);
      console.log('  refilled: the released contender joins again only after the next grant, the next release waits until the queue is N deep again (the handoff alone)');
      console.log('  rejoin:   every granted contender releases and joins again at once (the handoff beside a concurrent re-join; the first N+1 grants not counted)');
      console.log('  beside each, same point, queue N deep: rtt (cheapest request), list (ZooKeeper getChildren of the queue, others lockStatus), release() call, PostgreSQL enter scans');
      console.log('  lists/grant (ZooKeeper): the waiters\' listings outside their joins per grant (a waiter unsure its predecessor\'s deletion was a release lists the queue)');
      console.log('mode      waiters  p50 ms   p99 ms   p50/p50(1)  rtt ms  list ms  lists/grant  release ms  enter-scans ms  grants/s  out-of-order  load');
      for (const [k, n] of ns.entries()) {
        // Alternating which mode goes first, so a burst of load elsewhere falls on both alike.
        const modes: HandoffMode[] = k % 2 === 0 ? ['refilled', 'rejoin'] : ['rejoin', 'refilled'];
        for (const mode of modes) {
          const p = await point(`handoff ${mode} ${n}`, () => handoffAt(fam, n, handoffs, { pgSchemaName: o.pgSchemaName, sessions: 8, mode, deadlineMs: (Math.min(POINT_TIMEOUT_S, Math.max(30, BUDGET_S + 20 - elapsedS())) - 10) * 1000 }));
          if (p === undefined) continue;
          results.handoff.push({ ...p, load: load() });
          const base = results.handoff.find((h) => (h.mode ?? 'rejoin') === mode && h.waiters === ns[0])?.p50 ?? NaN;
          console.log(
            `${mode.padEnd(10)}${String(n).padEnd(9)}${f(p.p50, 3).padEnd(9)}${f(p.p99, 3).padEnd(9)}${f(p.p50 / base).padEnd(12)}${f(p.rttMs, 3).padEnd(8)}${f(p.listMs, 2).padEnd(9)}${f(p.waiterListsPerGrant, 2).padEnd(13)}${f(p.releaseMs, 2).padEnd(12)}${f(p.enterScansMs, 2).padEnd(16)}${f(p.grantsPerSecond, 0).padEnd(10)}${String(p.outOfOrder).padEnd(14)}${load()}${p.partial ? `  (partial: ${p.counted} of ${handoffs} grants before the point's deadline)` : ''}`,
          );
        }
      }
      for (const mode of ['refilled', 'rejoin'] as const) {
        const rows = results.handoff.filter((h) => h.mode === mode);
        const first = rows.find((h) => h.waiters === ns[0]);
        const last = rows[rows.length - 1];
        if (first !== undefined && last !== undefined && last !== first) {
          const r = last.p50 / first.p50;
          console.log(
            `  aim (queueing sources), ${mode}: p50 at ${last.waiters} waiters within 1.5x of ${first.waiters}: ${f(r)}x${r > 1.5 ? ` (not met; at ${last.waiters}: p50 - p50(1) = ${f(last.p50 - first.p50, 1)} ms beside list ${f(last.listMs, 1)} ms vs ${f(first.listMs, 1)}, release() ${f(last.releaseMs, 1)} ms vs ${f(first.releaseMs, 1)}${Number.isFinite(last.enterScansMs) ? `, enter scans ${f(last.enterScansMs, 1)} ms vs ${f(first.enterScansMs, 1)}` : ''}, rtt ${f(last.rttMs, 2)} ms)` : ''}`,
          );
        }
      }
      console.log('  out-of-order: grants whose join ticket (taken just before acquireLock) is older than the previous grant\'s; joins sent on several sessions at once may reach the server in another order, so a FIFO source shows a few, never many');
    }
    if (only.has('contended')) {
      const ps = quick ? [1, 2, 4] : [1, 2, 4, 8, 16, 32];
      const runMs = quick ? 1500 : 3000;
      console.log(`\ncontended: P processes (own source each) looping acquire+release on one lock for ${runMs} ms`);
      console.log('procs  grants/s  vs 1 proc  per-process min..max grants  load');
      for (const n of ps) {
        if (fam === 'postgres') {
          const c = await pgFreeConnections();
          // Each child holds its pool (PG_CHILD_POOL) at most; keep 10 free for everyone else on the machine.
          if (n * PG_CHILD_POOL > c.free - 10) {
            const why = `${n} processes x ${PG_CHILD_POOL} connections > ${c.free} free of max_connections ${c.max} (${c.open} open) minus 10 kept free`;
            results.skipped.push(`contended ${n}: ${why}`);
            console.log(`${String(n).padEnd(7)}skipped: ${why}`);
            continue;
          }
        }
        const p = await point(`contended ${n}`, () => contendedAt(fam, n, runMs, o));
        if (p === undefined) continue;
        results.contended.push({ ...p, load: load() });
        console.log(`${String(n).padEnd(7)}${f(p.grantsPerSecond, 0).padEnd(10)}${f(p.grantsPerSecond / results.contended[0]!.grantsPerSecond).padEnd(11)}${`${p.perProcessMin}..${p.perProcessMax}`.padEnd(29)}${load()}`);
      }
    }
  } finally {
    await pg?.drop();
  }
}

async function storesFamily(): Promise<void> {
  const rs = quick ? [1, 100] : [1, 10, 100, 1000, 10_000];
  const concurrency = 16;
  const blockMs = quick ? 500 : 1000;
  const rounds = quick ? 1 : 3;
  console.log(`scale: fence stores, ${concurrency} loops admitting token 1 to one of R resources at random and committing (${rounds} x ${blockMs} ms, median); ${cpus().length} cores, load ${load()}`);
  console.log('store      resources  admissions/s  floor/s  store/floor  vs R=1  load    (floor: memory an awaited no-op, postgres SELECT 1, redis PING)');
  const pg = await pgSchema();
  try {
    for (const name of STORES) {
      const opened = openStore(name, pg.schema, concurrency);
      try {
        for (const r of rs) {
          const p: StorePoint = await storeAt(opened, name, r, { concurrency, blockMs, rounds, tag: `scale/${Date.now().toString(36)}` });
          results.stores.push({ ...p, load: load() });
          const one = results.stores.find((s) => s.store === name && s.resources === rs[0])!;
          console.log(`${name.padEnd(11)}${String(r).padEnd(11)}${f(p.admissionsPerSecond, 0).padEnd(14)}${f(p.floorPerSecond, 0).padEnd(9)}${f(p.admissionsPerSecond / p.floorPerSecond).padEnd(13)}${f(p.admissionsPerSecond / one.admissionsPerSecond).padEnd(8)}${load()}`);
        }
      } finally {
        await opened.close();
      }
    }
  } finally {
    await pg.drop();
  }
}

if (family === 'stores') await storesFamily();
else await sourceFamily(family as SourceFamily);
results.loads.push(load());
results.seconds = Math.round(elapsedS());
const file = fileURLToPath(new URL(`${RESULTS_DIR}/${family}${quick ? '.quick' : ''}.json`, `file://${process.cwd()}/`));
await mkdir(fileURLToPath(new URL(`${RESULTS_DIR}/`, `file://${process.cwd()}/`)), { recursive: true });
// A run of some sections only (--sections=heap) keeps the other sections of the family's last results.
if (args.some((a) => a.startsWith('--sections='))) {
  const previous = (await readFile(file, 'utf8').then((t) => JSON.parse(t) as FamilyResults).catch(() => undefined));
  if (previous !== undefined) {
    for (const section of ['handoff', 'contended', 'heap'] as const) if (!only.has(section)) (results[section] as unknown[]) = previous[section];
    results.skipped = [...previous.skipped.filter((s) => !only.has(s.split(' ')[0]!)), ...results.skipped];
    results.loads = [...previous.loads, ...results.loads];
    results.at = `${previous.at}; ${[...only].join(',')} ${results.at}`;
  }
}
await writeFile(file, JSON.stringify(results, null, 1) + '\n');
const charts = await drawCharts(quick);
console.log(`\n${family}: ${results.seconds} s, load ${results.loads.join(' -> ')} on ${cpus().length} cores; results ${file.replace(process.cwd() + '/', '')}; charts ${charts.join(' ')}`);
// A point given up may leave its sources' sockets open: they must not keep the process.
process.exit(0);
