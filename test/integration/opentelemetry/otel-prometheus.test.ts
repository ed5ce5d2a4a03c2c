// What an operator's Prometheus scrapes: fencekeeper's metrics through
// OpenTelemetry's Prometheus exporter, served over HTTP and read as
// Prometheus text, after real operations (a ZooKeeper lock held and
// released, a stale S3 write refused, a stale HTTP request refused).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { instrument, uninstrument } from '../../../adapters/opentelemetry/index.js';
import { fencedPutObject } from '../../../adapters/s3/index.js';
import { StaleTokenError } from '../../../src/errors.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { acquireLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { TestBucket, newClient, randomPrefix } from '../s3/helpers.js';
import { fencedPutService, serve, type Served } from '../express/helpers.js';

const testBucket = new TestBucket('prom');
let exporter: PrometheusExporter;
let meterProvider: MeterProvider;
let metricsServer: Served | undefined;
let scrapeUrl: string;

beforeAll(async () => {
  await testBucket.create();
  // The exporter's handler on a server of our own (port 0), instead of its fixed 9464.
  exporter = new PrometheusExporter({ preventServerStart: true });
  meterProvider = new MeterProvider({ readers: [exporter] });
  instrument({ meterProvider });
  metricsServer = await serve((req: IncomingMessage, res: ServerResponse) => exporter.getMetricsRequestHandler(req, res));
  scrapeUrl = `http://127.0.0.1:${metricsServer.port}/metrics`;
});
const jobs = fencedPutService(express(), 'jobs');
afterAll(async () => {
  uninstrument();
  await metricsServer?.close();
  await meterProvider?.shutdown();
  await testBucket.remove();
});

describe('Prometheus scrape', () => {
  it('serves fencekeeper\'s counters, gauges and histograms in Prometheus text format over HTTP', async () => {
    const lockName = uniqueLockName('prom');
    const zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone });
    try {
      const lock = await acquireLock(zk, lockName);
      await lock.release();
    } finally {
      await zk.close();
    }
    const { client } = newClient();
    const Key = `${randomPrefix()}/index.json`;
    await fencedPutObject(client, { Bucket: testBucket.name, Key, Body: 'by 8', token: 8n });
    await expect(fencedPutObject(client, { Bucket: testBucket.name, Key, Body: 'by 7', token: 7n })).rejects.toBeInstanceOf(StaleTokenError);
    client.destroy();
    expect((await fetch(jobs.url, { method: 'PUT', headers: { 'fencing-token': '8' } })).status).toBe(204);
    expect((await fetch(jobs.url, { method: 'PUT', headers: { 'fencing-token': '7' } })).status).toBe(409);

    const response = await fetch(scrapeUrl);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
    const text = await response.text();
    const resource = `s3://${testBucket.name}/${Key}`;
    expect(text).toContain('# TYPE fencekeeper_fence_refused_total counter');
    expect(text).toContain(`fencekeeper_fence_refused_total{fencekeeper_adapter="s3",fencekeeper_resource="${resource}",error_type="STALE_TOKEN",otel_scope_name="fencekeeper"} 1`);
    expect(text).toContain('fencekeeper_fence_refused_total{fencekeeper_adapter="express",fencekeeper_resource="jobs",error_type="STALE_TOKEN",otel_scope_name="fencekeeper"} 1');
    expect(text).toContain('# TYPE fencekeeper_lock_hold_duration histogram');
    expect(text).toMatch(new RegExp(`fencekeeper_lock_hold_duration_count\\{fencekeeper_lock_source="zookeeper",fencekeeper_lock_name="${lockName}",fencekeeper_lock_loss_reason="released",otel_scope_name="fencekeeper"\\} 1`));
    expect(text).toMatch(new RegExp(`fencekeeper_lock_held\\{fencekeeper_lock_source="zookeeper",fencekeeper_lock_name="${lockName}",otel_scope_name="fencekeeper"\\} 0`));
  });
});
