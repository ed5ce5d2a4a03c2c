// fencekeeper/opentelemetry against the real SDK (in-memory exporters), fed
// by the publishers every source and adapter calls: spans nest under the
// user's active span and under each other, carry the documented attributes,
// and the metrics count what was published. The ZooKeeper recipes' acquire
// and session state are driven here through the same helpers they call.
import { performance } from 'node:perf_hooks';
import { trace } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ATTR, METRICS, instrument, uninstrument } from '../../adapters/opentelemetry/index.js';
import {
  publishRefused,
  publishSessionState,
  publishUnknownOutcome,
  traceAcquire,
  traceEffect,
  traceS3Put,
  traceWithFence,
} from '../../src/diagnostics.js';
import { EffectPendingError, InvalidArgumentError, LockTimeoutError, StaleTokenError } from '../../src/errors.js';
import { StepDownClock } from '../../src/step-down.js';
import { otelSdk, points, sum, type OtelSdk } from '../helpers/otel.js';

let sdk: OtelSdk;

beforeAll(() => {
  sdk = otelSdk();
});
afterEach(() => {
  uninstrument();
});
afterAll(async () => {
  await sdk.shutdown();
});

function instrumentHere(names?: Parameters<typeof instrument>[0] extends infer O ? (O extends { names?: infer N } ? N : never) : never): void {
  instrument({ tracerProvider: sdk.tracerProvider, meterProvider: sdk.meterProvider, ...(names === undefined ? {} : { names }) });
}

const lock = (token: bigint): { token: bigint } => ({ token });

describe('fencekeeper/opentelemetry', () => {
  it('spans nest under the user\'s active span, and under each other (withFence inside withEffect)', async () => {
    instrumentHere();
    const user = sdk.tracerProvider.getTracer('app');
    await user.startActiveSpan('checkout', async (parent) => {
      await traceAcquire('zookeeper', 'orders/1', 'wait', async () => lock(0x100000007n));
      await traceEffect('payments', 'charge-1', 0x100000007n, async () => {
        await traceWithFence('postgres', 'payments', 0x100000007n, async () => 'claimed');
        return { source: 'ran' };
      });
      parent.end();
    });
    const spans = sdk.spans();
    const byName = (name: string) => spans.find((s) => s.name === name)!;
    const checkout = byName('checkout');
    const acquire = byName('fencekeeper.lock.acquire');
    const effect = byName('fencekeeper.effect');
    const withFence = byName('fencekeeper.fence.with_fence');
    expect(acquire.parentSpanContext?.spanId).toBe(checkout.spanContext().spanId);
    expect(effect.parentSpanContext?.spanId).toBe(checkout.spanContext().spanId);
    expect(withFence.parentSpanContext?.spanId, 'withFence inside withEffect nests under it').toBe(effect.spanContext().spanId);
    expect(acquire.spanContext().traceId).toBe(checkout.spanContext().traceId);
    expect(acquire.attributes).toMatchObject({
      [ATTR.source]: 'zookeeper', [ATTR.lock]: 'orders/1', [ATTR.mode]: 'wait', [ATTR.token]: '4294967303', [ATTR.acquired]: true, [ATTR.outcome]: 'acquired',
    });
    expect(typeof acquire.attributes['fencekeeper.lock.wait.duration']).toBe('number');
    expect(effect.attributes).toMatchObject({ [ATTR.resource]: 'payments', [ATTR.effectKey]: 'charge-1', [ATTR.outcome]: 'done', [ATTR.effectSource]: 'ran' });
    expect(withFence.attributes).toMatchObject({ [ATTR.adapter]: 'postgres', [ATTR.resource]: 'payments', [ATTR.outcome]: 'written' });
    // After the operation the user's context is back: a span started now is a root.
    expect(trace.getActiveSpan()).toBeUndefined();
  });

  it('a refused write: the span says refused with error.type STALE_TOKEN; the refusal is counted by adapter and resource', async () => {
    instrumentHere();
    const stale = new StaleTokenError('bucket/report.json', 5n, 9n);
    await expect(traceS3Put('bucket/report.json', 5n, 'in-place', async () => {
      publishRefused('s3', stale);
      throw stale;
    })).rejects.toBe(stale);
    publishRefused('express', new StaleTokenError('orders', 5n, 9n));
    const span = sdk.spans().findLast((s) => s.name === 'fencekeeper.s3.put')!;
    expect(span.attributes).toMatchObject({ [ATTR.outcome]: 'refused', [ATTR.errorType]: 'STALE_TOKEN', [ATTR.layout]: 'in-place', [ATTR.token]: '5' });
    expect(span.status.code).toBe(2); // SpanStatusCode.ERROR
    expect(span.events.some((e) => e.name === 'exception')).toBe(true);
    const collected = await sdk.collect();
    expect(sum(collected, METRICS.refused, { [ATTR.adapter]: 's3', [ATTR.resource]: 'bucket/report.json' })).toBe(1);
    expect(sum(collected, METRICS.refused, { [ATTR.adapter]: 'express', [ATTR.resource]: 'orders' })).toBe(1);
  });

  it('acquire waits are a histogram by outcome; a try that finds the lock taken is "busy", a timeout an error', async () => {
    instrumentHere();
    const before = sum(await sdk.collect(), METRICS.waitDuration, { [ATTR.lock]: 'jobs/wait' });
    await traceAcquire('zookeeper', 'jobs/wait', 'wait', async () => lock(3n));
    await traceAcquire('zookeeper', 'jobs/wait', 'try', async () => null);
    await expect(traceAcquire('zookeeper', 'jobs/wait', 'wait', async () => {
      throw new LockTimeoutError('jobs/wait', 10);
    })).rejects.toBeInstanceOf(LockTimeoutError);
    const collected = await sdk.collect();
    expect(sum(collected, METRICS.waitDuration, { [ATTR.lock]: 'jobs/wait' }) - before).toBe(3);
    expect(sum(collected, METRICS.waitDuration, { [ATTR.lock]: 'jobs/wait', [ATTR.outcome]: 'busy', [ATTR.mode]: 'try' })).toBe(1);
    expect(sum(collected, METRICS.waitDuration, { [ATTR.lock]: 'jobs/wait', [ATTR.outcome]: 'error' })).toBe(1);
    expect(points(collected, METRICS.waitDuration)[0]).toBeDefined();
    const timedOut = sdk.spans().findLast((s) => s.name === 'fencekeeper.lock.acquire')!;
    expect(timedOut.attributes[ATTR.errorType]).toBe('LOCK_TIMEOUT');
  });

  it('held goes up and down with holdings; hold durations and losses by reason come from the step-down clock', async () => {
    instrumentHere();
    const clock = new StepDownClock({ name: 'ZooKeeper', grant: 'session', kind: 'zookeeper' });
    const acked = performance.now();
    const a = clock.hold({ lock: 'jobs/held', marginMs: 0, deadline: () => acked + 60_000, token: 1n });
    const b = clock.hold({ lock: 'jobs/held', marginMs: 0, deadline: () => acked + 60_000, token: 2n });
    let collected = await sdk.collect();
    expect(sum(collected, METRICS.held, { [ATTR.lock]: 'jobs/held' })).toBe(2);
    a.lose('released');
    b.lose('deadline');
    b.lose('session_expired'); // a second end of the same holding: not counted again
    collected = await sdk.collect();
    expect(sum(collected, METRICS.held, { [ATTR.lock]: 'jobs/held' })).toBe(0);
    expect(sum(collected, METRICS.holdDuration, { [ATTR.lock]: 'jobs/held' })).toBe(2);
    expect(sum(collected, METRICS.lost, { [ATTR.lock]: 'jobs/held' })).toBe(1);
    expect(sum(collected, METRICS.lost, { [ATTR.lock]: 'jobs/held', [ATTR.lossReason]: 'deadline', [ATTR.source]: 'zookeeper' })).toBe(1);
  });

  it('session state is a count of sessions by state; a closed session leaves it', async () => {
    instrumentHere();
    publishSessionState('zookeeper', '0xa1', null, 'connected');
    publishSessionState('zookeeper', '0xa2', null, 'connected');
    publishSessionState('zookeeper', '0xa2', 'connected', 'suspended');
    let collected = await sdk.collect();
    expect(sum(collected, METRICS.sessionState, { [ATTR.sessionState]: 'connected' })).toBe(1);
    expect(sum(collected, METRICS.sessionState, { [ATTR.sessionState]: 'suspended' })).toBe(1);
    publishSessionState('zookeeper', '0xa1', 'connected', 'closed');
    publishSessionState('zookeeper', '0xa2', 'suspended', 'closed');
    collected = await sdk.collect();
    expect(sum(collected, METRICS.sessionState, { [ATTR.source]: 'zookeeper' })).toBe(0);
  });

  it('a withEffect left pending is counted; an unknown S3 outcome by its resolution', async () => {
    instrumentHere();
    const pending = new EffectPendingError({ resource: 'payments', key: 'k', idempotencyKey: 'i', attempt: 1, token: 3n, deadline: null }, 'has an unknown outcome');
    await expect(traceEffect('payments', 'k', 3n, () => Promise.reject(pending))).rejects.toBe(pending);
    publishUnknownOutcome('bucket/key', 3n, 'superseded', 2);
    const collected = await sdk.collect();
    expect(sum(collected, METRICS.effectPending, { [ATTR.resource]: 'payments' })).toBe(1);
    expect(sum(collected, METRICS.unknownOutcome, { [ATTR.resolution]: 'superseded' })).toBe(1);
    expect(sdk.spans().findLast((s) => s.name === 'fencekeeper.effect')!.attributes[ATTR.outcome]).toBe('pending');
  });

  it('names: drop leaves lock and resource names out of spans and metrics; a function maps them', async () => {
    instrumentHere('drop');
    await traceAcquire('zookeeper', 'tenant-42/export', 'wait', async () => lock(1n));
    publishRefused('postgres', new StaleTokenError('tenant-42/rows', 1n, 2n));
    let collected = await sdk.collect();
    const span = sdk.spans().findLast((s) => s.name === 'fencekeeper.lock.acquire')!;
    expect(span.attributes[ATTR.lock]).toBeUndefined();
    expect(points(collected, METRICS.refused, { [ATTR.adapter]: 'postgres' }).every((p) => !(ATTR.resource in p.attributes))).toBe(true);

    instrumentHere((name) => (name.startsWith('tenant-') ? `tenant/${name.split('/')[1]}` : name));
    publishRefused('postgres', new StaleTokenError('tenant-42/rows', 1n, 2n));
    publishRefused('postgres', new StaleTokenError('tenant-43/rows', 1n, 2n));
    collected = await sdk.collect();
    expect(sum(collected, METRICS.refused, { [ATTR.resource]: 'tenant/rows' })).toBe(2);
  });

  it('uninstrument() stops recording; bad options are refused before anything is subscribed', async () => {
    instrumentHere();
    uninstrument();
    const spansBefore = sdk.spans().length;
    const own = Promise.resolve(lock(1n));
    expect(traceAcquire('zookeeper', 'jobs/off', 'wait', () => own), 'no subscriber left: the call goes straight through').toBe(own);
    await own;
    expect(sdk.spans().length).toBe(spansBefore);
    expect(() => instrument({ names: 'all' as never })).toThrow(InvalidArgumentError);
    expect(() => instrument({ meterProvider: {} as never })).toThrow(InvalidArgumentError);
    expect(traceAcquire('zookeeper', 'jobs/off', 'wait', () => own)).toBe(own);
  });
});
