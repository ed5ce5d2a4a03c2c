// The real OpenTelemetry SDK with in-memory exporters, as a test (or a test's
// child process) sets it up: an AsyncLocalStorage context manager (so an
// active span is inherited across awaits, as under NodeSDK), a tracer
// provider exporting finished spans to memory, a meter provider whose reader
// exports to memory when flushed. `sum` and `points` read the last export.
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type DataPoint,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';

export interface OtelSdk {
  readonly tracerProvider: BasicTracerProvider;
  readonly meterProvider: MeterProvider;
  spans(): ReadableSpan[];
  /** Collect now; the metrics as of this moment. */
  collect(): Promise<MetricData[]>;
  shutdown(): Promise<void>;
}

export function otelSdk(): OtelSdk {
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.disable();
  context.setGlobalContextManager(contextManager);
  const spanExporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  // Exports only when flushed: the interval is longer than any test.
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    tracerProvider,
    meterProvider,
    spans: () => spanExporter.getFinishedSpans(),
    async collect() {
      metricExporter.reset();
      await reader.forceFlush();
      const exported = metricExporter.getMetrics();
      return exported.flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics));
    },
    async shutdown() {
      await meterProvider.shutdown();
      await tracerProvider.shutdown();
      context.disable();
    },
  };
}

/** The data points of one metric whose attributes include `where`. */
export function points(collected: readonly MetricData[], name: string, where: Record<string, unknown> = {}): DataPoint<unknown>[] {
  const metric = collected.find((m) => m.descriptor.name === name);
  if (metric === undefined) return [];
  return (metric.dataPoints as DataPoint<unknown>[]).filter((p) => Object.entries(where).every(([k, v]) => p.attributes[k] === v));
}

/** A counter's or up-down counter's total over the points matching `where` (a histogram's: its count). */
export function sum(collected: readonly MetricData[], name: string, where: Record<string, unknown> = {}): number {
  let total = 0;
  for (const p of points(collected, name, where)) {
    const value = p.value as number | { count: number };
    total += typeof value === 'number' ? value : value.count;
  }
  return total;
}
