// Benchmark: what fencing costs an S3 write. Imports the BUILT adapter, so build first:
//   npx tsc -p tsconfig.build.json && node test/bench/s3-bench.mjs
// Env: S3_ENDPOINT (default http://127.0.0.1:7480), S3_ACCESS_KEY, S3_SECRET_KEY,
// S3_REGION, BENCH_WRITES (writes per mode and run, default 300), BENCH_RUNS (default 3),
// BENCH_BODY_BYTES (default 1024).
//
// Modes, each sequential (one write in flight), on one client per mode, against the same server:
//   plain    PutObject, no condition (the floor)
//   cold     fencedPutObject on a key this process never wrote: HEAD + conditional PUT
//   steady   fencedPutObject rewriting the key this client wrote last: one conditional PUT
// Requests are counted by a middleware on the client, the way a user would.
// The modes take turns in blocks of 10 writes; the median run is reported. Prints figures; asserts nothing.
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
import { fencedPutObject } from '../../dist/adapters/s3/index.js';

const WRITES = Number(process.env.BENCH_WRITES ?? 300);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const BODY = randomBytes(Number(process.env.BENCH_BODY_BYTES ?? 1024));
const config = {
  endpoint: process.env.S3_ENDPOINT ?? 'http://127.0.0.1:7480',
  region: process.env.S3_REGION ?? 'us-east-1',
  forcePathStyle: true,
  credentials: {
    accessKeyId: process.env.S3_ACCESS_KEY ?? 'test',
    secretAccessKey: process.env.S3_SECRET_KEY ?? 'testsecret',
  },
};

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
  const plain = countingClient();
  const cold = countingClient();
  const steady = countingClient();
  // Cold keys exist (written unfenced by another client), but this client has no cached fence for any of them.
  for (let i = 0; i < WRITES; i += 1) await admin.send(new PutObjectCommand({ Bucket, Key: `cold-${run}-${i}`, Body: BODY }));
  // Warm every connection (and the steady holder's first, cold, write) before counting.
  await plain.client.send(new PutObjectCommand({ Bucket, Key: `plain-${run}`, Body: BODY }));
  await fencedPutObject(cold.client, { Bucket, Key: `cold-${run}-warm`, Body: BODY, token: 1n });
  await fencedPutObject(steady.client, { Bucket, Key: `steady-${run}`, Body: BODY, token: 1n });
  for (const m of [plain, cold, steady]) m.counter.requests = 0;
  return {
    plain: { ...plain, write: (i) => plain.client.send(new PutObjectCommand({ Bucket, Key: `plain-${run}`, Body: BODY })) },
    cold: { ...cold, write: (i) => fencedPutObject(cold.client, { Bucket, Key: `cold-${run}-${i}`, Body: BODY, token: 1n }) },
    steady: { ...steady, write: (i) => fencedPutObject(steady.client, { Bucket, Key: `steady-${run}`, Body: BODY, token: 1n }) },
  };
}

// The modes take turns in blocks of BLOCK writes, so a change in the machine's
// load (other processes on two cores) falls on all of them alike.
const BLOCK = 10;
const results = { plain: [], cold: [], steady: [] };
for (let run = 0; run < RUNS; run += 1) {
  const modes = await prepare(run);
  const seconds = { plain: 0, cold: 0, steady: 0 };
  const order = Object.entries(modes);
  for (let first = 0; first < WRITES; first += BLOCK) {
    order.push(order.shift()); // rotate, so no mode always follows the same one
    for (const [name, mode] of order) {
      const t0 = performance.now();
      for (let i = first; i < Math.min(first + BLOCK, WRITES); i += 1) await mode.write(i);
      seconds[name] += (performance.now() - t0) / 1000;
    }
  }
  for (const [name, mode] of Object.entries(modes)) {
    results[name].push({ perSecond: WRITES / seconds[name], requestsPerWrite: mode.counter.requests / WRITES });
    mode.client.destroy();
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const summary = Object.fromEntries(
  Object.entries(results).map(([name, runs]) => [
    name,
    { perSecond: median(runs.map((r) => r.perSecond)), requestsPerWrite: median(runs.map((r) => r.requestsPerWrite)), all: runs.map((r) => r.perSecond) },
  ]),
);

console.log(`S3 fenced-write benchmark: ${config.endpoint}, ${WRITES} sequential writes x ${RUNS} runs per mode, ${BODY.length} B body, Node ${process.version}`);
console.log('mode     requests/write  writes/s (median)  vs plain   runs');
for (const [name, s] of Object.entries(summary)) {
  const ratio = s.perSecond / summary.plain.perSecond;
  console.log(
    `${name.padEnd(8)} ${s.requestsPerWrite.toFixed(2).padStart(14)}  ${s.perSecond.toFixed(0).padStart(17)}  ${ratio.toFixed(3).padStart(8)}   ${s.all.map((x) => x.toFixed(0)).join(' ')}`,
  );
}
console.log(`steady state costs ${((1 - summary.steady.perSecond / summary.plain.perSecond) * 100).toFixed(1)}% of plain PutObject throughput; cold ${((1 - summary.cold.perSecond / summary.plain.perSecond) * 100).toFixed(1)}%`);

// Clean up.
let ContinuationToken;
do {
  const page = await admin.send(new ListObjectsV2Command({ Bucket, ...(ContinuationToken ? { ContinuationToken } : {}) }));
  for (const o of page.Contents ?? []) await admin.send(new DeleteObjectCommand({ Bucket, Key: o.Key }));
  ContinuationToken = page.NextContinuationToken;
} while (ContinuationToken !== undefined);
await admin.send(new DeleteBucketCommand({ Bucket }));
admin.destroy();
