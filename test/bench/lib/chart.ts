// Benchmark charts as standalone SVG files, rendered in Node by Vega-Lite (a dev
// dependency only: nothing of it reaches the published package, which ships dist/,
// docs/ and migrations/ and never imports test/).
//
// One function per chart shape the benches need; each takes plain rows so a bench
// prints its table and writes its picture from the same numbers. Text widths are
// estimated (no canvas in Node), which is why labels are kept short.
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

/** One measured point of a line chart: `series` names the line it belongs to. */
export interface ChartPoint {
  readonly series: string;
  readonly x: number;
  readonly y: number;
}

/** What a line chart shows: axis titles, log scales, and the subtitle (command, machine, load). */
export interface LineChartOptions {
  readonly title: string;
  /** A second title line: the command, the machine and its load, so the picture carries its provenance. */
  readonly subtitle?: string | readonly string[];
  readonly xTitle: string;
  readonly yTitle: string;
  readonly xLog?: boolean;
  readonly yLog?: boolean;
  /** Start the y axis at zero (default true unless yLog). */
  readonly yZero?: boolean;
  readonly width?: number;
  readonly height?: number;
}

/** One bar of a grouped bar chart: `group` is the x category, `series` the bar inside it. */
export interface BarPoint {
  readonly group: string;
  readonly series: string;
  readonly value: number;
}

/** What a grouped bar chart shows. */
export interface BarChartOptions {
  readonly title: string;
  readonly subtitle?: string | readonly string[];
  readonly yTitle: string;
  /** A dashed horizontal rule, e.g. an aim of 0.95x. */
  readonly rule?: { readonly value: number; readonly label: string };
  readonly width?: number;
  readonly height?: number;
  /** The series in the order their bars and legend entries are drawn (default: by name). */
  readonly seriesOrder?: readonly string[];
}

/** Renders a Vega-Lite spec to an SVG string. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

function titleOf(title: string, subtitle: string | readonly string[] | undefined) {
  return subtitle === undefined ? { text: title } : { text: title, subtitle: typeof subtitle === 'string' ? subtitle : [...subtitle] };
}

/** A line chart with one line per series and a point on each measurement. */
export function lineChartSpec(points: readonly ChartPoint[], options: LineChartOptions): TopLevelSpec {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: titleOf(options.title, options.subtitle),
    width: options.width ?? 520,
    height: options.height ?? 280,
    background: 'white',
    data: { values: points.map((p) => ({ ...p })) },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 'x', type: 'quantitative', title: options.xTitle, scale: options.xLog === true ? { type: 'log' } : {} },
      y: {
        field: 'y',
        type: 'quantitative',
        title: options.yTitle,
        scale: options.yLog === true ? { type: 'log' } : { zero: options.yZero ?? true },
      },
      color: { field: 'series', type: 'nominal', title: null },
    },
  } as TopLevelSpec;
}

/** A grouped bar chart (one group per x category, one bar per series), with an optional dashed rule. */
export function barChartSpec(points: readonly BarPoint[], options: BarChartOptions): TopLevelSpec {
  const bars = {
    mark: { type: 'bar' },
    encoding: {
      x: { field: 'group', type: 'nominal', title: null, axis: { labelAngle: 0 } },
      xOffset: { field: 'series', type: 'nominal', ...(options.seriesOrder === undefined ? {} : { sort: [...options.seriesOrder] }) },
      y: { field: 'value', type: 'quantitative', title: options.yTitle },
      color: { field: 'series', type: 'nominal', title: null, legend: { labelLimit: 0 }, ...(options.seriesOrder === undefined ? {} : { sort: [...options.seriesOrder] }) },
    },
  };
  const layers: unknown[] = [bars];
  if (options.rule !== undefined) {
    layers.push({
      data: { values: [{ value: options.rule.value, label: options.rule.label }] },
      mark: { type: 'rule', strokeDash: [4, 4], color: '#444' },
      encoding: { y: { field: 'value', type: 'quantitative' } },
    });
  }
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: titleOf(options.title, options.subtitle),
    width: options.width ?? 520,
    height: options.height ?? 280,
    background: 'white',
    data: { values: points.map((p) => ({ ...p })) },
    layer: layers,
  } as TopLevelSpec;
}

/** Writes an SVG file (making its folder) and returns the path written. */
export async function writeSvg(file: string, spec: TopLevelSpec): Promise<string> {
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, await renderSvg(spec));
  return file;
}

/** The machine line a chart's subtitle carries: cores, load averages, Node version. */
export async function machineLine(): Promise<string> {
  const os = await import('node:os');
  const [l1, l5] = os.loadavg();
  return `${os.cpus().length} cores, load ${l1?.toFixed(1)}/${l5?.toFixed(1)}, Node ${process.version}`;
}
