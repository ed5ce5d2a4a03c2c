// The latency bench's pictures: per path, fenced / baseline (ops/s) against the added
// round trip, one line per concurrency, the aim as a dashed rule. Written from the
// points a run saved (run.ts), so a chart can be drawn again without measuring again
// (redraw.ts).
import { fileURLToPath } from 'node:url';
import type { TopLevelSpec } from 'vega-lite';
import { writeSvg } from '../lib/chart.js';

export interface LatencyPoint {
  readonly path: string;
  readonly rttMs: number;
  readonly concurrency: number;
  readonly ratio: number;
  readonly aim: number;
}

export interface LatencyCharts {
  readonly subtitle: string;
  readonly points: readonly LatencyPoint[];
}

const CHART_DIR = fileURLToPath(new URL('../../../docs/images/bench/', import.meta.url));

export const slugOf = (path: string): string => path.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');

export async function writeLatencyCharts(charts: LatencyCharts, dir = CHART_DIR): Promise<string[]> {
  const written: string[] = [];
  for (const path of new Set(charts.points.map((p) => p.path))) {
    const mine = charts.points.filter((p) => p.path === path);
    const aim = mine[0]!.aim;
    const top = Math.max(1.2, ...mine.map((p) => p.ratio));
    const spec = {
      $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
      title: { text: `${path}: fenced / baseline vs round trip`, subtitle: charts.subtitle },
      width: 440,
      height: 240,
      background: 'white',
      padding: 12,
      layer: [
        {
          data: { values: mine.map((p) => ({ series: `c=${p.concurrency}`, x: p.rttMs, y: p.ratio })) },
          mark: { type: 'line', point: true },
          encoding: {
            x: { field: 'x', type: 'quantitative', title: 'added round trip (ms)' },
            y: { field: 'y', type: 'quantitative', title: 'fenced / baseline (ops/s)', scale: { domain: [0, Math.ceil(top * 10) / 10] } },
            color: { field: 'series', type: 'nominal', title: 'concurrency' },
          },
        },
        {
          data: { values: [{ y: aim, label: `aim ${aim}x (0.5 ms, c=1)` }] },
          layer: [
            { mark: { type: 'rule', strokeDash: [4, 4], color: '#444' }, encoding: { y: { field: 'y', type: 'quantitative' } } },
            { mark: { type: 'text', align: 'left', dx: 4, dy: -6, color: '#444' }, encoding: { y: { field: 'y', type: 'quantitative' }, x: { datum: 0 }, text: { field: 'label' } } },
          ],
        },
      ],
    } as unknown as TopLevelSpec;
    written.push(await writeSvg(`${dir}latency-${slugOf(path)}.svg`, spec));
  }
  return written;
}
