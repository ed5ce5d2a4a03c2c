// fencekeeper/opentelemetry against real servers, with the real SDK and its
// in-memory exporters: fenced writes that S3 and an HTTP service refuse are
// counted by adapter and resource, their spans nest under the user's active
// span; a ZooKeeper session expired from the server's side is one lost lock
// with the reason the holder saw, and the held gauge goes back to 0; a PUT
// whose reply is lost is counted by how its read-back settled it; a
// withEffect on PostgreSQL is a span under the user's, active for the
// effect's own code, and an effect left pending is counted. Refusals carry
// their code (error.type): a stale token and another lock's sequencer on a
// bound fence are counted apart; so are the row helpers' stale refusals.
import { trace } from '@opentelemetry/api';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ATTR, METRICS, instrument, uninstrument } from '../../../adapters/opentelemetry/index.js';
import { bindFence, fencedUpdate, fencedUpsert, withEffect, withFence } from '../../../adapters/postgres/index.js';
import { fencedPutObject } from '../../../adapters/s3/index.js';
import { EffectPendingError, SequencerMismatchError, StaleTokenError } from '../../../src/errors.js';
import { expireSession, sessionRecorder } from '../../../src/testing/expire-session.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { acquireLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { otelSdk, sum, type OtelSdk } from '../../helpers/otel.js';
import { testSource } from '../../helpers/sequencers.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { adminPool, migratedSchema, uniqueName } from '../postgres/helpers.js';
import { TestBucket, loseReplies, newClient, randomPrefix } from '../s3/helpers.js';
import { fencedPutService } from '../express/helpers.js';

const testBucket = new TestBucket('otel');
let sdk: OtelSdk;

beforeAll(async () => {
  await testBucket.create();
  sdk = otelSdk();
  instrument({ tracerProvider: sdk.tracerProvider, meterProvider: sdk.meterProvider });
});
const orders = fencedPutService(express(), 'orders');
afterAll(async () => {
  uninstrument();
  await sdk?.shutdown();
  await testBucket.remove();
});

// One migrated schema for the PostgreSQL cases (each uses resources of its own).
const { pool } = migratedSchema(adminPool(), 'fk_otel', { max: 4 });

describe('fencekeeper/opentelemetry with real servers', () => {
  it('a stale S3 put and a stale HTTP request are counted by adapter and resource; the S3 span nests under the user\'s span', async () => {
    const { client } = newClient();
    const Key = `${randomPrefix()}/report.json`;
    const user = sdk.tracerProvider.getTracer('app');
    await user.startActiveSpan('nightly-report', async (parent) => {
      await fencedPutObject(client, { Bucket: testBucket.name, Key, Body: 'by 10', token: 10n });
      await expect(fencedPutObject(client, { Bucket: testBucket.name, Key, Body: 'by 5', token: 5n })).rejects.toBeInstanceOf(StaleTokenError);
      parent.end();
    });
    client.destroy();
    expect((await fetch(orders.url, { method: 'PUT', headers: { 'fencing-token': '10' } })).status).toBe(204);
    expect((await fetch(orders.url, { method: 'PUT', headers: { 'fencing-token': '5' } })).status).toBe(409);

    const collected = await sdk.collect();
    const resource = `s3://${testBucket.name}/${Key}`;
    expect(sum(collected, METRICS.refused, { [ATTR.adapter]: 's3', [ATTR.resource]: resource })).toBe(1);
    expect(sum(collected, METRICS.refused, { [ATTR.adapter]: 'express', [ATTR.resource]: 'orders' })).toBe(1);

    const spans = sdk.spans();
    const parent = spans.find((s) => s.name === 'nightly-report')!;
    const puts = spans.filter((s) => s.name === 'fencekeeper.s3.put' && s.attributes[ATTR.resource] === resource);
    expect(puts.map((s) => s.attributes[ATTR.outcome])).toEqual(['written', 'refused']);
    for (const put of puts) expect(put.parentSpanContext?.spanId).toBe(parent.spanContext().spanId);
    const admits = spans.filter((s) => s.name === 'fencekeeper.fence.admit' && s.attributes[ATTR.resource] === 'orders');
    expect(admits.map((s) => s.attributes[ATTR.outcome])).toEqual(['written', 'refused']);
  });

  it('PostgreSQL refusals are counted and traced with their code: STALE_TOKEN, and SEQUENCER_MISMATCH on a bound fence', async () => {
    const { guard, seq } = testSource('c0ffee00-0000-4000-8000-0000000000e7');
    const resource = uniqueName('ledger');
    const lock = uniqueLockName('otel-guard');
    await bindFence(pool, resource, guard(lock));
    const noop = async (): Promise<void> => {};
    await withFence(pool, resource, seq(lock, 10n), noop);
    // The guarding lock's older holder: stale.
    await expect(withFence(pool, resource, seq(lock, 5n), noop)).rejects.toBeInstanceOf(StaleTokenError);
    // Another lock's sequencer, and a bare token, even larger: the wrong lock.
    await expect(withFence(pool, resource, seq(`${lock}-other`, 20n), noop)).rejects.toBeInstanceOf(SequencerMismatchError);
    await expect(withFence(pool, resource, 21n, noop)).rejects.toBeInstanceOf(SequencerMismatchError);

    const collected = await sdk.collect();
    const where = { [ATTR.adapter]: 'postgres', [ATTR.resource]: resource };
    expect(sum(collected, METRICS.refused, where)).toBe(3);
    expect(sum(collected, METRICS.refused, { ...where, [ATTR.errorType]: 'STALE_TOKEN' })).toBe(1);
    expect(sum(collected, METRICS.refused, { ...where, [ATTR.errorType]: 'SEQUENCER_MISMATCH' })).toBe(2);

    const spans = sdk.spans().filter((s) => s.name === 'fencekeeper.fence.with_fence' && s.attributes[ATTR.resource] === resource);
    expect(spans.map((s) => s.attributes[ATTR.outcome])).toEqual(['written', 'refused', 'refused', 'refused']);
    expect(spans.map((s) => s.attributes[ATTR.errorType])).toEqual([undefined, 'STALE_TOKEN', 'SEQUENCER_MISMATCH', 'SEQUENCER_MISMATCH']);
    const events = spans.map((s) => s.events.filter((e) => e.name === 'fencekeeper.fence.refused').map((e) => e.attributes?.[ATTR.errorType]));
    expect(events).toEqual([[], ['STALE_TOKEN'], ['SEQUENCER_MISMATCH'], ['SEQUENCER_MISMATCH']]);
  });

  it('PostgreSQL row helpers: a stale fencedUpdate and a stale fencedUpsert are counted as refusals (STALE_TOKEN) at their row', async () => {
    const table = uniqueName('otel_rows');
    await pool.query(`CREATE TABLE ${table} (id int PRIMARY KEY, body text, fencing_token bigint)`);
    expect(await fencedUpsert(pool, { table, key: ['id'], values: { id: 1, body: 'by 10' }, token: 10n })).toBe('inserted');
    await expect(fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'by 5' }, token: 5n })).rejects.toBeInstanceOf(StaleTokenError);
    await expect(fencedUpsert(pool, { table, key: ['id'], values: { id: 1, body: 'by 6' }, token: 6n })).rejects.toBeInstanceOf(StaleTokenError);
    const collected = await sdk.collect();
    const where = { [ATTR.adapter]: 'postgres', [ATTR.resource]: `${table} {"id":1}` };
    expect(sum(collected, METRICS.refused, where)).toBe(2);
    expect(sum(collected, METRICS.refused, { ...where, [ATTR.errorType]: 'STALE_TOKEN' })).toBe(2);
  });

  it('a lost reply to a conditional PUT is an unknown outcome the read-back settles: counted as landed', async () => {
    const { client } = newClient({ maxAttempts: 1 }); // no SDK retry: the adapter sees the 500 itself
    loseReplies(client, (request, n) => request.method === 'PUT' && n === 1);
    const Key = `${randomPrefix()}/lost-reply.txt`;
    await fencedPutObject(client, { Bucket: testBucket.name, Key, Body: 'once', token: 3n });
    client.destroy();
    const collected = await sdk.collect();
    expect(sum(collected, METRICS.unknownOutcome, { [ATTR.resource]: `s3://${testBucket.name}/${Key}`, [ATTR.resolution]: 'landed' })).toBe(1);
  });

  it('withEffect on PostgreSQL: its span nests under the user\'s and is the active span inside the effect; an effect left pending is counted', async () => {
    const resource = uniqueName('payments');
    const user = sdk.tracerProvider.getTracer('app');
    let activeInside: string | undefined;
    await user.startActiveSpan('checkout', async (parent) => {
      await withEffect(pool, { resource, token: 5n, key: 'charge-1' }, async () => {
        activeInside = trace.getActiveSpan()?.spanContext().spanId;
        return 'ch_1';
      });
      // A reset on the way to the outside system: the outcome is unknown, the effect stays pending.
      await expect(withEffect(pool, { resource, token: 5n, key: 'charge-2' }, async () => {
        throw new Error('socket hang up');
      })).rejects.toBeInstanceOf(EffectPendingError);
      parent.end();
    });
    const spans = sdk.spans();
    const parent = spans.find((s) => s.name === 'checkout')!;
    const effects = spans.filter((s) => s.name === 'fencekeeper.effect' && s.attributes[ATTR.resource] === resource);
    expect(effects.map((s) => s.attributes[ATTR.outcome])).toEqual(['done', 'pending']);
    for (const span of effects) expect(span.parentSpanContext?.spanId).toBe(parent.spanContext().spanId);
    expect(activeInside, 'the effect ran with its span active').toBe(effects[0]!.spanContext().spanId);
    const collected = await sdk.collect();
    expect(sum(collected, METRICS.effectPending, { [ATTR.resource]: resource })).toBe(1);
  });

  it('ZooKeeper: a session expired by the server is one lost lock with reason session_expired; held goes back to 0; a release is a hold, not a loss', async () => {
    const name = uniqueLockName('otel-lost');
    const zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 4000, connector: sessionRecorder() });
    try {
      const released = await acquireLock(zk, `${name}-released`);
      await released.release();
      const lock = await acquireLock(zk, name);
      let collected = await sdk.collect();
      expect(sum(collected, METRICS.held, { [ATTR.lock]: name, [ATTR.source]: 'zookeeper' })).toBe(1);
      await expireSession(zk);
      expect(lock.signal.aborted).toBe(true);
      collected = await sdk.collect();
      expect(sum(collected, METRICS.lost, { [ATTR.lock]: name })).toBe(1);
      expect(sum(collected, METRICS.lost, { [ATTR.lock]: name, [ATTR.lossReason]: 'session_expired' })).toBe(1);
      expect(sum(collected, METRICS.held, { [ATTR.lock]: name })).toBe(0);
      expect(sum(collected, METRICS.holdDuration, { [ATTR.lock]: name })).toBe(1);
      expect(sum(collected, METRICS.lost, { [ATTR.lock]: `${name}-released` })).toBe(0);
      expect(sum(collected, METRICS.holdDuration, { [ATTR.lock]: `${name}-released`, [ATTR.lossReason]: 'released' })).toBe(1);
    } finally {
      await zk.close();
    }
  });
});
