// Spans from the tracing channels: one per traced operation, started in the
// caller's context (so it nests under the user's active span) and made the
// active span for the code the operation runs (RUN_WITHIN), so a withFence
// inside a withEffect, or a database span inside withFence's work, nests
// under it. Ended when the operation settles.
import { performance } from 'node:perf_hooks';
import { SpanKind, SpanStatusCode, context, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import {
  CHANNELS,
  RUN_WITHIN,
  formatToken,
  type AcquireTraceContext,
  type CampaignTraceContext,
  type EffectTraceContext,
  type FenceTraceContext,
  type FenceWriteTraceContext,
  type ReleaseTraceContext,
  type S3WriteTraceContext,
  type TraceContext,
} from '../../src/index.js';
import { ATTR, errorType, type MapName } from './attributes.js';
import type { Metrics } from './metrics.js';

interface Open {
  readonly span: Span;
  readonly startedAt: number;
}

/** How one channel's operation becomes a span. */
interface Operation {
  readonly span: string;
  attributes(context: TraceContext): Attributes;
  /** The attributes known once it settled; may record metrics. */
  settled(context: TraceContext, seconds: number, span: Span): void;
}

/** The tracing-channel subscriber of one channel: what diagnostics_channel.tracingChannel(name).subscribe takes. */
export interface ChannelSubscriber {
  start(message: unknown): void;
  end(message: unknown): void;
  asyncStart(message: unknown): void;
  asyncEnd(message: unknown): void;
  error(message: unknown): void;
}

export class Spans {
  readonly #tracer: Tracer;
  readonly #map: MapName;
  readonly #metrics: Metrics;
  readonly #open = new WeakMap<object, Open>();

  constructor(tracer: Tracer, map: MapName, metrics: Metrics) {
    this.#tracer = tracer;
    this.#map = map;
    this.#metrics = metrics;
  }

  subscriber(channel: string): ChannelSubscriber {
    const operation = this.#operation(channel);
    return {
      start: (message) => this.#start(operation, message as TraceContext),
      // A synchronous throw settles at `end`; a promise settles at asyncEnd.
      end: (message) => {
        if ('error' in (message as TraceContext)) this.#finish(operation, message as TraceContext);
      },
      asyncStart: () => {},
      asyncEnd: (message) => this.#finish(operation, message as TraceContext),
      error: () => {},
    };
  }

  #start(operation: Operation, ctx: TraceContext): void {
    const parent = context.active();
    const span = this.#tracer.startSpan(operation.span, { kind: SpanKind.INTERNAL, attributes: operation.attributes(ctx) }, parent);
    this.#open.set(ctx, { span, startedAt: performance.now() });
    const active = trace.setSpan(parent, span);
    ctx[RUN_WITHIN] = (fn) => context.with(active, fn);
  }

  #finish(operation: Operation, ctx: TraceContext): void {
    const open = this.#open.get(ctx);
    if (open === undefined) return;
    this.#open.delete(ctx);
    const { span, startedAt } = open;
    operation.settled(ctx, (performance.now() - startedAt) / 1000, span);
    if ('error' in ctx) {
      const error = ctx.error;
      span.setAttribute(ATTR.errorType, errorType(error));
      if (error instanceof Error) span.recordException(error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end();
  }

  #name(attributes: Attributes, key: string, name: string, kind: 'lock' | 'election' | 'resource'): Attributes {
    const mapped = this.#map(name, kind);
    if (mapped !== undefined) attributes[key] = mapped;
    return attributes;
  }

  #operation(channel: string): Operation {
    switch (channel) {
      case CHANNELS.lockAcquire:
        return {
          span: 'fencekeeper.lock.acquire',
          attributes: (c) => {
            const { source, lock, mode } = c as AcquireTraceContext;
            return this.#name({ [ATTR.source]: source, [ATTR.mode]: mode }, ATTR.lock, lock, 'lock');
          },
          settled: (c, seconds, span) => {
            const { source, lock, mode } = c as AcquireTraceContext;
            const granted = 'error' in c ? undefined : (c.result as { token?: unknown } | null | undefined);
            const outcome = 'error' in c ? 'error' : granted === null ? 'busy' : 'acquired';
            span.setAttribute('fencekeeper.lock.wait.duration', seconds);
            span.setAttribute(ATTR.outcome, outcome);
            if (outcome !== 'error') span.setAttribute(ATTR.acquired, outcome === 'acquired');
            if (typeof granted?.token === 'bigint') span.setAttribute(ATTR.token, formatToken(granted.token));
            this.#metrics.acquired({ ...this.#metrics.lockAttributes(source, lock), [ATTR.mode]: mode, [ATTR.outcome]: outcome }, seconds);
          },
        };
      case CHANNELS.lockRelease:
        return {
          span: 'fencekeeper.lock.release',
          attributes: (c) => {
            const { source, lock, token } = c as ReleaseTraceContext;
            return this.#name({ [ATTR.source]: source, [ATTR.token]: formatToken(token) }, ATTR.lock, lock, 'lock');
          },
          settled: () => {},
        };
      case CHANNELS.electionCampaign:
        return {
          span: 'fencekeeper.election.campaign',
          attributes: (c) => {
            const { source, election } = c as CampaignTraceContext;
            return this.#name({ [ATTR.source]: source }, ATTR.election, election, 'election');
          },
          settled: (c, _seconds, span) => {
            const epoch = 'error' in c ? undefined : (c.result as { epoch?: unknown } | undefined)?.epoch;
            if (typeof epoch === 'bigint') span.setAttribute(ATTR.token, formatToken(epoch));
          },
        };
      case CHANNELS.fenceAdmit:
      case CHANNELS.fenceWithFence:
      case CHANNELS.fenceWrite:
      case CHANNELS.s3Put:
      case CHANNELS.s3Delete:
        return {
          span: SPAN_NAMES[channel]!,
          attributes: (c) => {
            const { adapter, resource, token } = c as FenceTraceContext;
            const attributes: Attributes = { [ATTR.adapter]: adapter, [ATTR.token]: formatToken(token) };
            const { operation } = c as Partial<FenceWriteTraceContext>;
            if (operation !== undefined) attributes[ATTR.operation] = operation;
            const { layout } = c as Partial<S3WriteTraceContext>;
            if (layout !== undefined) attributes[ATTR.layout] = layout;
            return this.#name(attributes, ATTR.resource, resource, 'resource');
          },
          settled: (c, _seconds, span) => {
            span.setAttribute(ATTR.outcome, !('error' in c) ? 'written' : refused(c.error, span) ? 'refused' : 'error');
          },
        };
      case CHANNELS.effectRun:
        return {
          span: 'fencekeeper.effect',
          attributes: (c) => {
            const { resource, key, token } = c as EffectTraceContext;
            return this.#name({ [ATTR.effectKey]: key, [ATTR.token]: formatToken(token) }, ATTR.resource, resource, 'resource');
          },
          settled: (c, _seconds, span) => {
            if (!('error' in c)) {
              const source = (c.result as { source?: unknown } | undefined)?.source;
              span.setAttribute(ATTR.outcome, 'done');
              if (typeof source === 'string') span.setAttribute(ATTR.effectSource, source);
              return;
            }
            const kind = (c.error as { name?: unknown } | null)?.name;
            const outcome = kind === 'EffectPendingError' ? 'pending' : kind === 'EffectFailedError' ? 'failed' : refused(c.error, span) ? 'refused' : 'error';
            span.setAttribute(ATTR.outcome, outcome);
            if (outcome === 'pending') this.#metrics.effectPending((c as EffectTraceContext).resource);
          },
        };
      default:
        throw new Error(`unreachable: no span for channel ${channel}`);
    }
  }
}

/** The codes of a write the resource refused (fence:refused's `code`). */
const REFUSALS = new Set(['STALE_TOKEN', 'SEQUENCER_MISMATCH']);

/**
 * Whether `error` is a refusal by the fence; if so, records it on the span as
 * an event carrying its code under `error.type` (the span's own error.type
 * says the same; the event marks the moment and is what a trace view lists).
 */
function refused(error: unknown, span: Span): boolean {
  const code = errorType(error);
  if (!REFUSALS.has(code)) return false;
  span.addEvent(REFUSED_EVENT, { [ATTR.errorType]: code });
  return true;
}

const REFUSED_EVENT = 'fencekeeper.fence.refused';

const SPAN_NAMES: Record<string, string> = {
  [CHANNELS.fenceAdmit]: 'fencekeeper.fence.admit',
  [CHANNELS.fenceWithFence]: 'fencekeeper.fence.with_fence',
  [CHANNELS.fenceWrite]: 'fencekeeper.fence.write',
  [CHANNELS.s3Put]: 'fencekeeper.s3.put',
  [CHANNELS.s3Delete]: 'fencekeeper.s3.delete',
};
