// Benchmark: what fencing costs an S3 write, in place and through a pointer.
// Imports the BUILT adapter, so build first:
//   npx tsc -p tsconfig.build.json && node test/bench/s3-bench.mjs
// Env: S3_ENDPOINT (default http://127.0.0.1:7480), S3_ACCESS_KEY, S3_SECRET_KEY,
// S3_REGION, BENCH_WRITES (writes per mode and run, default 300), BENCH_RUNS (default 3),
// BENCH_BODY_BYTES (default 1024).
//
// Modes, each sequential (one write in flight), on one client per mode, against the same server:
//   plain           PutObject, no condition (the floor)
//   cold            fencedPutObject in place, on a key this process never wrote: HEAD + conditional PUT
//   steady          fencedPutObject in place, rewriting the key this client wrote last: one conditional PUT
//   pointer-cold    fencedPutObject { layout: 'pointer' } on a key this process never wrote:
//                   HEAD + data object (If-None-Match) + pointer (If-Match)
//   pointer-steady  the pointer layout, rewriting the key this client wrote last: data object + pointer
// In place, a body equal to the current one is refused, so every mode writes
// the same random bytes with a per-write counter in front (same size everywhere).
// Requests are counted by a middleware on the client, the way a user would.
//   steady-otel     steady, with fencekeeper/opentelemetry instrumented for the mode's blocks
//                   (SDK MeterProvider + BasicTracerProvider): the cost with a subscriber
//   steady-baseline steady, through another build's adapter (BENCH_BASELINE_DIST=<its dist/>,
//                   say one from before the diagnostics channels): the cost of none
// The modes take turns in blocks of 10 writes; the median run is reported, with
// this process's CPU time per write (process.cpuUsage). Prints figures; asserts nothing.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadavg } from 'node:os';
import { fencedPutObject } from '../../dist/adapters/s3/index.js';
import { instrument, uninstrument } from '../../dist/adapters/opentelemetry/index.js';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';

const BASELINE = process.env.BENCH_BASELINE_DIST;
const baselinePut = BASELINE === undefined ? undefined : (await import(pathToFileURL(resolve(BASELINE, 'adapters/s3/index.js')).href)).fencedPutObject;
const otel = {
  meterProvider: new MeterProvider({ readers: [new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), exportIntervalMillis: 3_600_000 })] }),
  tracerProvider: new BasicTracerProvider(),
};

const WRITES = Number(process.env.BENCH_WRITES ?? 300);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const BODY = randomBytes(Math.max(16, Number(process.env.BENCH_BODY_BYTES ?? 1024)));
const config = {
  endpoint: process.env.S3_ENDPOINT ?? 'http://127.0.0.1:7480',
  region: process.env.S3_REGION ?? 'us-east-1',
  forcePathStyle: true,
  credentials: {
    accessKeyId: process.env.S3_ACCESS_KEY ?? 'test',
    secretAccessKey: process.env.S3_SECRET_KEY ?? 'testsecret',
  },
};
const MODES = ['plain', 'cold', 'steady', 'pointer-cold', 'pointer-steady', 'steady-otel', ...(BASELINE === undefined ? [] : ['steady-baseline'])];
/** Modes whose blocks run with a subscriber. */
const SUBSCRIBED = new Set(['steady-otel']);
const POINTER = { layout: 'pointer' };

let counter = 0;
/** The body of one write: unique per write, the same size in every mode. */
function body() {
  counter += 1;
  return Buffer.concat([Buffer.from(String(counter).padStart(12, '0')), BODY.subarray(12)]);
}

function countingClient() {
  const client = new S3Client(config);
  const counter = { requests: 0 };
  client.middlewareStack.add(
    (next) => async (args) => {
      counter.requests += 1;
      return next(args);
    },
    { step: 'finalizeRequest', name: 'benchCounter' },
  );
  return { client, counter };
}

const Bucket = `fk-bench-${randomBytes(4).toString('hex')}`;
const admin = new S3Client(config);
await admin.send(new CreateBucketCommand({ Bucket }));

// Each mode gets its own client; a write is one call of its `write(i)`.
async function prepare(run) {
  const c = Object.fromEntries(MODES.map((name) => [name, countingClient()]));
  // Cold keys exist (written unfenced by another client), but no mode's client has a cached fence for any of them.
  for (let i = 0; i < WRITES; i += 1) {
    await admin.send(new PutObjectCommand({ Bucket, Key: `cold-${run}-${i}`, Body: BODY }));
    await admin.send(new PutObjectCommand({ Bucket, Key: `pointer-cold-${run}-${i}`, Body: BODY }));
  }
  const fenced = (name, Key, options) => fencedPutObject(c[name].client, { Bucket, Key, Body: body(), token: 1n }, options);
  const writers = {
    plain: () => c.plain.client.send(new PutObjectCommand({ Bucket, Key: `plain-${run}`, Body: body() })),
    cold: (i) => fenced('cold', `cold-${run}-${i}`),
    steady: () => fenced('steady', `steady-${run}`),
    'pointer-cold': (i) => fenced('pointer-cold', `pointer-cold-${run}-${i}`, POINTER),
    'pointer-steady': () => fenced('pointer-steady', `pointer-steady-${run}`, POINTER),
    'steady-otel': () => fenced('steady-otel', `steady-otel-${run}`),
    'steady-baseline': () => baselinePut(c['steady-baseline'].client, { Bucket, Key: `steady-baseline-${run}`, Body: body(), token: 1n }),
  };
  // Warm every connection (and each steady holder's first, cold, write) before counting.
  await writers.plain();
  await fenced('cold', `cold-${run}-warm`);
  await writers.steady();
  await fenced('pointer-cold', `pointer-cold-${run}-warm`, POINTER);
  await writers['pointer-steady']();
  await writers['steady-otel']();
  if (BASELINE !== undefined) await writers['steady-baseline']();
  for (const m of Object.values(c)) m.counter.requests = 0;
  return Object.fromEntries(MODES.map((name) => [name, { ...c[name], write: writers[name] }]));
}

// The modes take turns in blocks of BLOCK writes, so a change in the machine's
// load (other processes on two cores) falls on all of them alike.
const BLOCK = 10;
const results = Object.fromEntries(MODES.map((name) => [name, []]));
for (let run = 0; run < RUNS; run += 1) {
  const modes = await prepare(run);
  const seconds = Object.fromEntries(MODES.map((name) => [name, 0]));
  const cpu = Object.fromEntries(MODES.map((name) => [name, 0]));
  const order = Object.entries(modes);
  for (let first = 0; first < WRITES; first += BLOCK) {
    order.push(order.shift()); // rotate, so no mode always follows the same one
    for (const [name, mode] of order) {
      if (SUBSCRIBED.has(name)) instrument(otel);
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      for (let i = first; i < Math.min(first + BLOCK, WRITES); i += 1) await mode.write(i);
      const used = process.cpuUsage(c0);
      seconds[name] += (performance.now() - t0) / 1000;
      cpu[name] += used.user + used.system;
      if (SUBSCRIBED.has(name)) uninstrument();
    }
  }
  for (const [name, mode] of Object.entries(modes)) {
    results[name].push({ perSecond: WRITES / seconds[name], requestsPerWrite: mode.counter.requests / WRITES, cpuPerWrite: cpu[name] / WRITES });
    mode.client.destroy();
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const summary = Object.fromEntries(
  Object.entries(results).map(([name, runs]) => [
    name,
    { perSecond: median(runs.map((r) => r.perSecond)), requestsPerWrite: median(runs.map((r) => r.requestsPerWrite)), cpuPerWrite: median(runs.map((r) => r.cpuPerWrite)), all: runs.map((r) => r.perSecond) },
  ]),
);

console.log(`S3 fenced-write benchmark: ${config.endpoint}, ${WRITES} sequential writes x ${RUNS} runs per mode, ${BODY.length} B body, Node ${process.version}`);
console.log(`load average ${loadavg().map((l) => l.toFixed(2)).join(' ')} (at the end)`);
console.log('mode             requests/write  writes/s (median)  vs plain  client CPU µs/write   runs');
for (const [name, s] of Object.entries(summary)) {
  const ratio = s.perSecond / summary.plain.perSecond;
  console.log(
    `${name.padEnd(16)} ${s.requestsPerWrite.toFixed(2).padStart(14)}  ${s.perSecond.toFixed(0).padStart(17)}  ${ratio.toFixed(3).padStart(8)}  ${s.cpuPerWrite.toFixed(0).padStart(19)}   ${s.all.map((x) => x.toFixed(0)).join(' ')}`,
  );
}
const cpuRatio = (a, b) => `${(summary[a].cpuPerWrite / summary[b].cpuPerWrite).toFixed(3)}x`;
console.log(`steady with a subscriber vs without: writes/s ${(summary['steady-otel'].perSecond / summary.steady.perSecond).toFixed(3)}x, CPU/write ${cpuRatio('steady-otel', 'steady')}`);
if (BASELINE !== undefined) {
  console.log(`steady without a subscriber vs the baseline build: writes/s ${(summary.steady.perSecond / summary['steady-baseline'].perSecond).toFixed(3)}x, CPU/write ${cpuRatio('steady', 'steady-baseline')}`);
}
const ratio = (a, b) => `${(summary[a].perSecond / summary[b].perSecond).toFixed(3)}x`;
console.log(`pointer vs in place: steady ${ratio('pointer-steady', 'steady')}, cold ${ratio('pointer-cold', 'cold')}`);

// Clean up.
let ContinuationToken;
do {
  const page = await admin.send(new ListObjectsV2Command({ Bucket, ...(ContinuationToken ? { ContinuationToken } : {}) }));
  for (const o of page.Contents ?? []) await admin.send(new DeleteObjectCommand({ Bucket, Key: o.Key }));
  ContinuationToken = page.NextContinuationToken;
} while (ContinuationToken !== undefined);
await admin.send(new DeleteBucketCommand({ Bucket }));
admin.destroy();
