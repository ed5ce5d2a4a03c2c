// npm run compare -- --html FILE: the same report as the text table, as one
// self-contained HTML page (inline CSS, inline SVG, nothing fetched): the
// seeds' table, one section per source with its table, its faults and its
// verdict, and a latency chart per source (every acquire's time by percentile)
// beside one chart with every source's curve. The tables are table.ts's own
// rows (seedsTable, rowsOf), so the page has whatever rows and columns the text
// table has. The charts are Vega-Lite, rendered to SVG in Node by the bench
// charts' helper (test/bench/lib/chart.ts), which stays out of the package.
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { TopLevelSpec } from 'vega-lite';
import { lineChartSpec, renderSvg, type ChartPoint } from '../bench/lib/chart.js';
import type { CompareReport, SourceReport } from './compare.js';
import { runFailures } from './evidence.js';
import { TITLE, rowsOf, seedsTable } from './table.js';

const escape = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A source's title; a source the titles do not know yet shows by its kind. */
const titleOf = (s: SourceReport): string => (TITLE as Partial<Record<string, string>>)[s.source] ?? s.source;

/** Every acquire by percentile: (k + 0.5) / n of the sorted samples, so n samples spread evenly over 0-100. */
function percentilePoints(series: string, sorted: readonly number[]): ChartPoint[] {
  return sorted.map((y, k) => ({ series, x: ((k + 0.5) / sorted.length) * 100, y }));
}

const MS = (x: number): string => (x < 10 ? x.toFixed(2) : x.toFixed(1));

/** One source's latency chart: its acquires by percentile (log ms), the p50 and p99 marked and labelled. */
export function latencySpec(s: SourceReport): TopLevelSpec {
  const l = s.latency;
  const samples = l.acquireMs ?? [];
  const marks = [
    { label: `p50 ${MS(l.p50Ms)} ms`, x: 50, y: l.p50Ms },
    { label: `p99 ${MS(l.p99Ms)} ms`, x: 99, y: l.p99Ms },
  ];
  const layers: unknown[] = [];
  if (samples.length > 0) {
    layers.push({
      data: { values: percentilePoints(titleOf(s), samples) },
      mark: { type: 'line', color: '#1f6fb2', strokeWidth: 2, interpolate: 'step-after' },
      encoding: {
        x: { field: 'x', type: 'quantitative', title: 'percentile of acquires', scale: { domain: [0, 100] } },
        y: { field: 'y', type: 'quantitative', title: 'acquire (ms, log)', scale: { type: 'log' } },
      },
    });
  }
  layers.push(
    {
      data: { values: marks },
      mark: { type: 'point', filled: true, size: 70, color: '#c0392b' },
      encoding: {
        x: { field: 'x', type: 'quantitative', title: 'percentile of acquires', scale: { domain: [0, 100] } },
        y: { field: 'y', type: 'quantitative', title: 'acquire (ms, log)', scale: { type: 'log' } },
      },
    },
    {
      data: { values: marks },
      // Left of its point, above the curve: the p99 sits at the right edge.
      mark: { type: 'text', align: 'right', dx: -8, dy: -10, fontSize: 12, color: '#222' },
      encoding: {
        x: { field: 'x', type: 'quantitative' },
        y: { field: 'y', type: 'quantitative', scale: { type: 'log' } },
        text: { field: 'label' },
      },
    },
  );
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: `${titleOf(s)}: uncontended acquire`, subtitle: `${l.cycles} acquire/release cycles, ${l.cyclesPerSecond.toFixed(0)} cycles/s, load ${l.loadAverage}` },
    width: 420,
    height: 220,
    background: 'white',
    layer: layers,
  } as TopLevelSpec;
}

/** Every source's acquires by percentile on one chart (log ms). */
export function latencyOverviewSpec(report: CompareReport): TopLevelSpec | null {
  const points = report.sources.flatMap((s) => percentilePoints(titleOf(s), s.latency.acquireMs ?? []));
  if (points.length === 0) return null;
  const spec = lineChartSpec(points, {
    title: 'Uncontended acquire, every source',
    subtitle: 'each acquire of the run by percentile; the sources one after the other on the same machine',
    xTitle: 'percentile of acquires',
    yTitle: 'acquire (ms, log)',
    yLog: true,
    width: 700,
    height: 300,
  }) as TopLevelSpec & { mark: unknown; encoding: { color: Record<string, unknown> } };
  // Hundreds of acquires per curve: a line without a symbol on each, the legend in
  // the table's column order, its titles whole (Vega cuts labels at 160 px).
  return {
    ...spec,
    mark: { type: 'line', strokeWidth: 2, interpolate: 'step-after' },
    encoding: { ...spec.encoding, color: { ...spec.encoding.color, sort: report.sources.map(titleOf), legend: { labelLimit: 400, labelFontSize: 12, symbolType: 'stroke', symbolStrokeWidth: 3 } } },
  } as TopLevelSpec;
}

function table(rows: readonly (readonly string[])[], numericFrom: number): string {
  const [head, ...body] = rows;
  const th = (head ?? []).map((c) => `<th>${escape(c)}</th>`).join('');
  const tr = body.map((r) => `<tr>${r.map((c, i) => (i < numericFrom ? `<td>${escape(c)}</td>` : `<td class="n">${escape(c)}</td>`)).join('')}</tr>`).join('\n');
  return `<table>\n<thead><tr>${th}</tr></thead>\n<tbody>\n${tr}\n</tbody>\n</table>`;
}

const CSS = `
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1a1a1a; margin: 24px auto; max-width: 1100px; padding: 0 16px; }
h1 { font-size: 24px; margin-bottom: 4px; }
h2 { font-size: 19px; margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 12px 0; font-size: 14px; }
th, td { border: 1px solid #d0d0d0; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f2f4f7; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafafa; }
.chart { margin: 12px 0; }
.chart svg { max-width: 100%; height: auto; }
.notes { color: #333; max-width: 900px; }
.failure { color: #a00; font-weight: 600; }
`;

/** The whole page: one self-contained HTML document (no script, no link, no fetch). */
export async function renderHtml(report: CompareReport): Promise<string> {
  const parts: string[] = [];
  // Inline SVG as Vega writes it: these charts have no clip paths or gradients, so no ids to collide on one page.
  const chart = async (spec: TopLevelSpec): Promise<string> => `<div class="chart">${await renderSvg(spec)}</div>`;
  parts.push(
    '<h1>npm run compare</h1>',
    `<p class="meta">${report.trials} trials per fault scenario and source; ${report.machine.cores} cores, load ${escape(report.machine.loadBefore)} before and ${escape(report.machine.loadAfter)} after; ${report.seconds.toFixed(0)} s.</p>`,
    '<h2>The seeds\u2019 table, measured</h2>',
    '<p class="notes">Counts out of trials; write rows out of trials \u00d7 3 resources (PostgreSQL, S3, HTTP).</p>',
    table(seedsTable(report), 1),
  );
  for (const failure of runFailures(report)) parts.push(`<p class="failure">${escape(failure)}</p>`);
  const overview = latencyOverviewSpec(report);
  if (overview !== null) parts.push(await chart(overview));
  for (const s of report.sources) {
    parts.push(`<h2 id="${escape(s.source)}">${escape(titleOf(s))}</h2>`, `<p class="meta">${escape(s.deployment)}</p>`);
    parts.push(table([['scenario', 'row', 'count', 'trials'], ...rowsOf(s)], 2));
    const notes = [`failover: ${s.failover.fault}`, ...(s.clock === undefined ? [] : [`clock: ${s.clock.fault}`]), `paused: ${s.paused.fault}`, `verdict: ${s.verdict.line}`];
    parts.push(`<ul class="notes">${notes.map((n) => `<li>${escape(n)}</li>`).join('')}</ul>`);
    parts.push(await chart(latencySpec(s)));
  }
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>npm run compare</title>
<style>${CSS}</style>
</head>
<body>
${parts.join('\n')}
</body>
</html>
`;
}

/** Writes the page (making its folder) and returns the path written. */
export async function writeHtml(file: string, report: CompareReport): Promise<string> {
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, await renderHtml(report));
  return file;
}
