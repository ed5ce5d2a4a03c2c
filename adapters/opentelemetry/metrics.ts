// The metrics, made on the user's meter and fed from the plain channels (and
// from the acquire and withEffect spans' ends, through spans.ts). Durations
// are in seconds (unit 's'), as OpenTelemetry's conventions ask; through
// the Prometheus exporter the names read fencekeeper_lock_wait_duration
// (a histogram: _bucket, _sum, _count) and the counters end in _total.
import type { Attributes, Counter, Histogram, Meter, ObservableResult, ObservableUpDownCounter, UpDownCounter } from '@opentelemetry/api';
import type { FenceRefusedMessage, LockEndedMessage, LockHeldMessage, SessionStateMessage, SourceActivityMessage, UnknownOutcomeMessage } from '../../src/index.js';
import { ATTR, type MapName } from './attributes.js';

/** Lock waits and holds run from milliseconds (uncontended) to minutes (a queue, a long job). */
const SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

/** The names of the metrics instrument() records (fencekeeper.lock.wait.duration, fencekeeper.fence.refused, ...). */
export const METRICS = Object.freeze({
  waitDuration: 'fencekeeper.lock.wait.duration',
  holdDuration: 'fencekeeper.lock.hold.duration',
  held: 'fencekeeper.lock.held',
  lost: 'fencekeeper.lock.lost',
  refused: 'fencekeeper.fence.refused',
  sessionState: 'fencekeeper.session.state',
  sourceActivity: 'fencekeeper.source.activity',
  effectPending: 'fencekeeper.effect.pending',
  unknownOutcome: 'fencekeeper.s3.unknown_outcome',
} as const);

export class Metrics {
  readonly #map: MapName;
  readonly #wait: Histogram;
  readonly #hold: Histogram;
  readonly #held: UpDownCounter;
  readonly #lost: Counter;
  readonly #refused: Counter;
  readonly #effectPending: Counter;
  readonly #unknownOutcome: Counter;
  readonly #activity: Counter;
  readonly #sessionState: ObservableUpDownCounter;
  /** Holdings this instrumentation saw begin, per source and lock: an end it never saw begin does not take the gauge below zero. */
  readonly #holding = new Map<string, number>();
  /** The last state of every session not yet closed. */
  readonly #sessions = new Map<string, { source: string; state: string }>();
  readonly #sessionCounts = new Map<string, { source: string; state: string; count: number }>();

  constructor(meter: Meter, map: MapName) {
    this.#map = map;
    this.#wait = meter.createHistogram(METRICS.waitDuration, {
      description: 'Time from asking for a lock to being granted it (or refused, or giving up)',
      unit: 's',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
    this.#hold = meter.createHistogram(METRICS.holdDuration, {
      description: 'Time a lock or leadership was held, from its grant to its release or loss',
      unit: 's',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
    this.#held = meter.createUpDownCounter(METRICS.held, { description: 'Locks and leaderships held by this process', unit: '{lock}' });
    this.#lost = meter.createCounter(METRICS.lost, { description: 'Grants that ended other than by release, by reason', unit: '{lock}' });
    this.#refused = meter.createCounter(METRICS.refused, { description: 'Writes refused where the resource lives (a stale fencing token, or a sequencer of another lock on a bound fence), by adapter, resource and error.type', unit: '{write}' });
    this.#effectPending = meter.createCounter(METRICS.effectPending, { description: 'withEffect calls that left their effect pending: its outcome is unknown until reconciled', unit: '{effect}' });
    this.#unknownOutcome = meter.createCounter(METRICS.unknownOutcome, { description: 'S3 conditional PUTs whose outcome was lost, by how the read-back settled them', unit: '{write}' });
    this.#activity = meter.createCounter(METRICS.sourceActivity, {
      description: 'Work a lock source\'s session did for its queues, by source and kind of activity: lease renewals acknowledged, waiters woken, head waiters\' looks at a lease end, entries of expired sessions reaped',
      unit: '{event}',
    });
    this.#sessionState = meter.createObservableUpDownCounter(METRICS.sessionState, { description: 'Sessions, leases and clients of the lock sources, by state', unit: '{session}' });
    this.#sessionState.addCallback(this.#observeSessions);
  }

  stop(): void {
    this.#sessionState.removeCallback(this.#observeSessions);
  }

  lockAttributes(source: string, lock: string): Attributes {
    const name = this.#map(lock, 'lock');
    return name === undefined ? { [ATTR.source]: source } : { [ATTR.source]: source, [ATTR.lock]: name };
  }

  acquired(attributes: Attributes, seconds: number): void {
    this.#wait.record(seconds, attributes);
  }

  effectPending(resource: string): void {
    const name = this.#map(resource, 'resource');
    this.#effectPending.add(1, name === undefined ? {} : { [ATTR.resource]: name });
  }

  readonly onHeld = (message: unknown): void => {
    const { source, lock } = message as LockHeldMessage;
    const key = `${source}\u0000${lock}`;
    this.#holding.set(key, (this.#holding.get(key) ?? 0) + 1);
    this.#held.add(1, this.lockAttributes(source, lock));
  };

  readonly onEnded = (message: unknown): void => {
    const { source, lock, reason, heldMs } = message as LockEndedMessage;
    const attributes = this.lockAttributes(source, lock);
    const key = `${source}\u0000${lock}`;
    const count = this.#holding.get(key) ?? 0;
    if (count > 0) {
      if (count === 1) this.#holding.delete(key);
      else this.#holding.set(key, count - 1);
      this.#held.add(-1, attributes);
    }
    this.#hold.record(heldMs / 1000, { ...attributes, [ATTR.lossReason]: reason });
    if (reason !== 'released') this.#lost.add(1, { ...attributes, [ATTR.lossReason]: reason });
  };

  readonly onRefused = (message: unknown): void => {
    const { adapter, resource, code } = message as FenceRefusedMessage;
    // Why it was refused, under OpenTelemetry's `error.type` (the error's
    // stable code, as on the spans): STALE_TOKEN and SEQUENCER_MISMATCH are
    // different faults (a holder that lost its lock, a writer holding the
    // wrong lock) and an alert wants them apart. Two values: a bounded series.
    const name = this.#map(resource, 'resource');
    const where: Attributes = name === undefined ? { [ATTR.adapter]: adapter } : { [ATTR.adapter]: adapter, [ATTR.resource]: name };
    this.#refused.add(1, { ...where, [ATTR.errorType]: code });
  };

  readonly onUnknownOutcome = (message: unknown): void => {
    const { resource, resolution } = message as UnknownOutcomeMessage;
    const name = this.#map(resource, 'resource');
    this.#unknownOutcome.add(1, name === undefined ? { [ATTR.resolution]: resolution } : { [ATTR.resolution]: resolution, [ATTR.resource]: name });
  };

  readonly onSourceActivity = (message: unknown): void => {
    const { source, activity, count } = message as SourceActivityMessage;
    this.#activity.add(count, { [ATTR.source]: source, [ATTR.activity]: activity });
  };

  readonly onSessionState = (message: unknown): void => {
    const { source, session, state } = message as SessionStateMessage;
    const key = `${source}\u0000${session}`;
    if (state === 'closed') this.#sessions.delete(key);
    else this.#sessions.set(key, { source, state });
  };

  readonly #observeSessions = (result: ObservableResult): void => {
    // A state once reported stays in the series at 0 when no session is in
    // it (an exporter would otherwise repeat its last count).
    for (const entry of this.#sessionCounts.values()) entry.count = 0;
    for (const { source, state } of this.#sessions.values()) {
      const key = `${source}\u0000${state}`;
      const entry = this.#sessionCounts.get(key);
      if (entry === undefined) this.#sessionCounts.set(key, { source, state, count: 1 });
      else entry.count += 1;
    }
    for (const { source, state, count } of this.#sessionCounts.values()) result.observe(count, { [ATTR.source]: source, [ATTR.sessionState]: state });
  };
}
