// instrument() / uninstrument(): subscribe to fencekeeper's diagnostics
// channels and turn them into spans and metrics, through the tracer and
// meter of the providers given (default: the global ones the OpenTelemetry
// SDK registered). One instrumentation per process at a time: instrument()
// again replaces the previous one.
import diagnostics from 'node:diagnostics_channel';
import { metrics, trace, type MeterProvider, type TracerProvider } from '@opentelemetry/api';
import { CHANNELS, InvalidArgumentError, TRACING_CHANNELS } from '../../src/index.js';
import { nameMapper, type NameMapping } from './attributes.js';
import { Metrics } from './metrics.js';
import { Spans } from './spans.js';

/** The instrumentation scope spans and metrics are recorded under. */
export const SCOPE = 'fencekeeper';

/**
 * instrument()'s options: the tracer and meter providers (default: the global
 * ones), and `names` to keep, drop or map lock and resource names in metrics.
 */
export interface InstrumentOptions {
  /** Default: the global tracer provider (trace.getTracerProvider()). */
  readonly tracerProvider?: TracerProvider;
  /** Default: the global meter provider (metrics.getMeterProvider()). */
  readonly meterProvider?: MeterProvider;
  /**
   * Lock, election and resource names in attributes: 'keep' (default),
   * 'drop', or a function mapping each name (undefined drops it). Applies to
   * spans and metrics alike; use it where names are unbounded (a lock per
   * customer, a resource per row).
   */
  readonly names?: NameMapping;
}

let current: (() => void) | null = null;

/** Start recording (replacing an earlier instrument()). Options are checked before anything is subscribed. */
export function instrument(options: InstrumentOptions = {}): void {
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('instrument(): options must be an object');
  const map = nameMapper(options.names);
  const tracerProvider = options.tracerProvider ?? trace.getTracerProvider();
  const meterProvider = options.meterProvider ?? metrics.getMeterProvider();
  if (typeof tracerProvider?.getTracer !== 'function') throw new InvalidArgumentError('instrument(): tracerProvider must be an OpenTelemetry TracerProvider');
  if (typeof meterProvider?.getMeter !== 'function') throw new InvalidArgumentError('instrument(): meterProvider must be an OpenTelemetry MeterProvider');

  uninstrument();
  const recorded = new Metrics(meterProvider.getMeter(SCOPE), map);
  const spans = new Spans(tracerProvider.getTracer(SCOPE), map, recorded);
  const undo: (() => void)[] = [() => recorded.stop()];
  for (const name of TRACING_CHANNELS) {
    const channel = diagnostics.tracingChannel(name);
    const subscriber = spans.subscriber(name);
    channel.subscribe(subscriber);
    undo.push(() => channel.unsubscribe(subscriber));
  }
  const plain: [string, (message: unknown) => void][] = [
    [CHANNELS.lockHeld, recorded.onHeld],
    [CHANNELS.lockLost, recorded.onEnded],
    [CHANNELS.lockReleased, recorded.onEnded],
    [CHANNELS.fenceRefused, recorded.onRefused],
    [CHANNELS.sessionState, recorded.onSessionState],
    [CHANNELS.sourceActivity, recorded.onSourceActivity],
    [CHANNELS.s3UnknownOutcome, recorded.onUnknownOutcome],
  ];
  for (const [name, onMessage] of plain) {
    diagnostics.subscribe(name, onMessage);
    undo.push(() => diagnostics.unsubscribe(name, onMessage));
  }
  current = () => {
    for (const step of undo) step();
  };
}

/** Stop recording: every subscription is removed (operations then cost nothing again). Idempotent. */
export function uninstrument(): void {
  const stop = current;
  current = null;
  stop?.();
}
