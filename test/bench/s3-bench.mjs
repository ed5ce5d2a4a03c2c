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
// The modes are interleaved run by run and the median run is reported. Prints figures; asserts nothing.
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

const modes = {
  async plain(run) {
    const { client, counter } = countingClient();
    const Key = `plain-${run}`;
    await client.send(new PutObjectCommand({ Bucket, Key, Body: BODY })); // warm the connection
    counter.requests = 0;
    const t0 = performance.now();
    for (let i = 0; i < WRITES; i += 1) await client.send(new PutObjectCommand({ Bucket, Key, Body: BODY }));
    return finish(client, counter, t0);
  },
  async cold(run) {
    // Keys written once, unfenced, by another client: this client has no cached fence for any of them.
    for (let i = 0; i < WRITES; i += 1) await admin.send(new PutObjectCommand({ Bucket, Key: `cold-${run}-${i}`, Body: BODY }));
    const { client, counter } = countingClient();
    await fencedPutObject(client, { Bucket, Key: `cold-${run}-warm`, Body: BODY, token: 1n });
    counter.requests = 0;
    const t0 = performance.now();
    for (let i = 0; i < WRITES; i += 1) await fencedPutObject(client, { Bucket, Key: `cold-${run}-${i}`, Body: BODY, token: 1n });
    return finish(client, counter, t0);
  },
  async steady(run) {
    const { client, counter } = countingClient();
    const Key = `steady-${run}`;
    await fencedPutObject(client, { Bucket, Key, Body: BODY, token: 1n }); // the holder's first write: cold
    counter.requests = 0;
    const t0 = performance.now();
    for (let i = 0; i < WRITES; i += 1) await fencedPutObject(client, { Bucket, Key, Body: BODY, token: 1n });
    return finish(client, counter, t0);
  },
};

function finish(client, counter, t0) {
  const seconds = (performance.now() - t0) / 1000;
  client.destroy();
  return { perSecond: WRITES / seconds, requestsPerWrite: counter.requests / WRITES };
}

const results = { plain: [], cold: [], steady: [] };
for (let run = 0; run < RUNS; run += 1) {
  for (const name of Object.keys(modes)) results[name].push(await modes[name](run));
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
