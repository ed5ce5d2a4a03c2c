/**
 * `fencekeeper demo --metrics`: each process of the demo (the two holders
 * and the demo itself, which runs the HTTP service) records fencekeeper's
 * metrics through fencekeeper/opentelemetry into the OpenTelemetry SDK's
 * in-memory exporter, and the demo prints them at the end, per process, the
 * way an operator's dashboard would show them: the paused holder's lost lock
 * and refused writes, the service's refused request.
 *
 * The SDK is loaded only when --metrics is given: @opentelemetry/api and
 * @opentelemetry/sdk-metrics must then be installed next to fencekeeper.
 */
import type { MetricData } from '@opentelemetry/sdk-metrics';

/** One series: a counter's value, or a histogram's count and sum. */
export interface DemoSeries {
  readonly name: string;
  readonly attributes: Readonly<Record<string, string | number | boolean>>;
  readonly value: number;
  /** Histograms: the sum of the recorded values. */
  readonly sum?: number;
}

export interface DemoMetrics {
  collect(): Promise<DemoSeries[]>;
  stop(): Promise<void>;
}

export async function startDemoMetrics(): Promise<DemoMetrics> {
  let sdk: typeof import('@opentelemetry/sdk-metrics');
  try {
    sdk = await import('@opentelemetry/sdk-metrics');
  } catch (error) {
    throw new Error(`--metrics needs the OpenTelemetry SDK: npm install @opentelemetry/api @opentelemetry/sdk-metrics (${(error as Error).message})`);
  }
  const { instrument, uninstrument } = await import('../../../adapters/opentelemetry/index.js');
  const exporter = new sdk.InMemoryMetricExporter(sdk.AggregationTemporality.CUMULATIVE);
  // Exported when collect() flushes it, not on a timer.
  const reader = new sdk.PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new sdk.MeterProvider({ readers: [reader] });
  instrument({ meterProvider });
  return {
    async collect() {
      exporter.reset();
      await reader.forceFlush();
      return exporter.getMetrics().flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics.flatMap(series)));
    },
    async stop() {
      uninstrument();
      await meterProvider.shutdown();
    },
  };
}

function series(metric: MetricData): DemoSeries[] {
  return metric.dataPoints.map((point) => {
    const attributes = point.attributes as Record<string, string | number | boolean>;
    const value = point.value as number | { count: number; sum?: number };
    return typeof value === 'number'
      ? { name: metric.descriptor.name, attributes, value }
      : { name: metric.descriptor.name, attributes, value: value.count, sum: value.sum ?? 0 };
  });
}

/** `name{key="value",...} value` (Prometheus's text notation); histograms as count and sum. */
export function formatSeries(s: DemoSeries): string {
  const labels = Object.entries(s.attributes).map(([k, v]) => `${k}=${JSON.stringify(String(v))}`).join(',');
  const value = s.sum === undefined ? String(s.value) : `count=${s.value} sum=${s.sum.toFixed(3)}`;
  return `${s.name}{${labels}} ${value}`;
}
