// The scale bench's pictures: every family's latest results (test/bench/scale/results/
// <family>.json, written by ./run.ts) drawn as line charts with ../lib/chart.ts into
// docs/images/bench/scale-*.svg. A quick run's results (<family>.quick.json) are drawn
// into test/bench/scale/results/quick/ instead, so a quick run never replaces the
// published pictures. Each subtitle carries the command, the cores and the load of each run.
import { readdir, readFile } from 'node:fs/promises';
import { lineChartSpec, writeSvg, type ChartPoint } from '../lib/chart.js';

export const RESULTS_DIR = 'test/bench/scale/results';

export interface FamilyResults {
  family: string;
  quick: boolean;
  at: string;
  cores: number;
  loads: number[];
  seconds?: number;
  /** mode absent: a run from before the refilled mode (every point was 'rejoin'). */
  handoff: { mode?: 'refilled' | 'rejoin'; waiters: number; p50: number; p99: number; grantsPerSecond: number; rttMs: number; listMs?: number; releaseMs?: number; enterScansMs?: number; outOfOrder: number; counted?: number; partial?: boolean; load: number }[];
  contended: { processes: number; grantsPerSecond: number; perProcessMin: number; perProcessMax: number; load: number }[];
  heap: { locks: number; heldBytes: number; waitingBytes: number; serverHeldBytes: number; serverWaitingBytes: number; serverWhat: string; serverDetail: string; seconds: number; phases?: { hold: number; wait: number; drain: number }; bare?: { puts: number; watchCreates: number; deletes: number }; load: number }[];
  stores: { store: string; resources: number; admissionsPerSecond: number; floorPerSecond: number; load: number }[];
  skipped: string[];
}

/** A handoff point's series: the family and its mode (a run from before the modes was 'rejoin'). */
const handoffSeries = (family: string, mode: string | undefined): string => `${family} ${mode ?? 'rejoin'}`;

export async function loadResults(quick: boolean): Promise<FamilyResults[]> {
  const files = (await readdir(RESULTS_DIR).catch(() => [] as string[])).filter((f) => f.endsWith('.json') && f.includes('.quick.') === quick).sort();
  return Promise.all(files.map(async (f) => JSON.parse(await readFile(`${RESULTS_DIR}/${f}`, 'utf8')) as FamilyResults));
}

export async function drawCharts(quick: boolean): Promise<string[]> {
  const all = await loadResults(quick);
  const dir = quick ? `${RESULTS_DIR}/quick` : 'docs/images/bench';
  const sources = all.filter((r) => r.family !== 'stores');
  const cmd = `npm run bench:scale -- <family>${quick ? ' --quick' : ''}`;
  const loads = (rs: FamilyResults[]): string =>
    `${rs[0]?.cores ?? '?'} cores shared; load (1 min) ${rs.map((r) => `${r.family} ${Math.min(...r.loads).toFixed(1)}-${Math.max(...r.loads, ...r.handoff.map((h) => h.load), ...r.heap.map((h) => h.load), ...r.contended.map((h) => h.load), ...r.stores.map((h) => h.load)).toFixed(1)}`).join(', ')}`;
  // One subtitle line per two runs: a long line widens the picture and pushes the legend out.
  const sub = (rs: FamilyResults[]): string[] => {
    const parts = loads(rs).split(', ');
    const lines = [cmd, parts[0]!];
    for (let i = 1; i < parts.length; i += 2) lines.push(parts.slice(i, i + 2).join(', '));
    return lines;
  };
  const written: string[] = [];
  const line = async (file: string, points: ChartPoint[], o: Parameters<typeof lineChartSpec>[1]): Promise<void> => {
    if (points.length === 0) return;
    const spec = lineChartSpec(points, o) as unknown as { encoding: { x: { scale: Record<string, unknown> } } };
    // The x axis spans the measured points only (a log scale's nice domain would run to the next power of ten).
    spec.encoding.x.scale = { ...spec.encoding.x.scale, domain: [Math.min(...points.map((p) => p.x)), Math.max(...points.map((p) => p.x))], nice: false };
    written.push(await writeSvg(`${dir}/${file}`, spec as unknown as Parameters<typeof writeSvg>[1]));
  };
  await line(
    'scale-handoff.svg',
    sources.flatMap((r) => r.handoff.map((h) => ({ series: handoffSeries(r.family, h.mode), x: h.waiters, y: h.p50 }))),
    { title: 'Handoff p50 vs waiters on one lock (refilled: the handoff alone; rejoin: beside a re-join)', subtitle: sub(sources), xTitle: 'waiters on the lock (log)', yTitle: 'release -> next grant, p50 (ms, log)', xLog: true, yLog: true },
  );
  await line(
    'scale-handoff-p99.svg',
    sources.flatMap((r) => r.handoff.map((h) => ({ series: handoffSeries(r.family, h.mode), x: h.waiters, y: h.p99 }))),
    { title: 'Handoff p99 vs waiters on one lock (refilled: the handoff alone; rejoin: beside a re-join)', subtitle: sub(sources), xTitle: 'waiters on the lock (log)', yTitle: 'release -> next grant, p99 (ms, log)', xLog: true, yLog: true },
  );
  await line(
    'scale-heap.svg',
    sources.flatMap((r) => r.heap.flatMap((h) => [
      { series: `${r.family} held`, x: h.locks, y: h.heldBytes / 1024 },
      { series: `${r.family} waiting`, x: h.locks, y: h.waitingBytes / 1024 },
    ])),
    { title: 'Client heap per held lock and per waiting acquire', subtitle: sub(sources), xTitle: 'locks (one waiter each, log)', yTitle: 'KB per lock (heapUsed after GC)', xLog: true },
  );
  await line(
    'scale-server.svg',
    sources.flatMap((r) => r.heap.flatMap((h) => [
      { series: `${r.family} held`, x: h.locks, y: h.serverHeldBytes / 1024 },
      { series: `${r.family} waiting`, x: h.locks, y: h.serverWaitingBytes / 1024 },
    ])),
    { title: 'What the server holds per lock', subtitle: sub(sources), xTitle: 'locks (one waiter each, log)', yTitle: 'KB per lock (server metric delta)', xLog: true },
  );
  await line(
    'scale-contended.svg',
    sources.flatMap((r) => r.contended.map((c) => ({ series: r.family, x: c.processes, y: c.grantsPerSecond }))),
    { title: 'Contended grants/s vs processes on one lock', subtitle: sub(sources), xTitle: 'processes (log)', yTitle: 'grants/s (all processes)', xLog: true },
  );
  const stores = all.filter((r) => r.family === 'stores');
  await line(
    'scale-stores.svg',
    stores.flatMap((r) => r.stores.flatMap((s) => [
      { series: s.store, x: s.resources, y: s.admissionsPerSecond },
      ...(s.store === 'memory' ? [] : [{ series: `${s.store} floor`, x: s.resources, y: s.floorPerSecond }]),
    ])),
    { title: 'Fence stores: admissions/s vs resources', subtitle: sub(stores), xTitle: 'resources (log)', yTitle: 'admissions/s (16 loops, log)', xLog: true, yLog: true },
  );
  return written;
}
