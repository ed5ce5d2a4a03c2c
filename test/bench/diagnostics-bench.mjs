// Benchmark: what the diagnostics channels cost an operation, in isolation
// (the network-bound benchmarks, express-bench.mjs and s3-bench.mjs, show it
// drowned in their noise). Imports the BUILT package, so build first:
//   npx tsc -p tsconfig.build.json && node test/bench/diagnostics-bench.mjs
//
// Cases, each awaiting an operation that resolves at once (the cheapest an
// operation can be, so the channel's share is as large as it gets):
//   direct                 await op()                                   the floor
//   traced, no subscriber  await traceS3Put(resource, token, layout, op)
//   traced, OpenTelemetry  the same, fencekeeper/opentelemetry instrumented (SDK
//                          MeterProvider + BasicTracerProvider: a span per call)
//   loop                   an empty synchronous loop: the floor of the two below
//   refusal, no subscriber publishRefused('s3', error) (synchronous)
//   refusal, OpenTelemetry the same, counted by the SDK
// BENCH_SUBSCRIBED=0 leaves the OpenTelemetry cases out: subscribing and
// unsubscribing swaps the channels' prototypes, which slows the unsubscribed
// checks of this same process, as an application that never subscribes is not.
// BENCH_OPS (per block, default 20000), BENCH_ROUNDS (default 15). Blocks of
// each case take turns; the median over rounds of this process's CPU time per
// operation (process.cpuUsage) is reported, and the difference from its floor.
// Prints figures; asserts nothing.
import { loadavg } from 'node:os';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { instrument, uninstrument } from '../../dist/adapters/opentelemetry/index.js';
import { StaleTokenError, publishRefused, traceS3Put } from '../../dist/src/index.js';

const OPS = Number(process.env.BENCH_OPS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);
const otel = {
  meterProvider: new MeterProvider({ readers: [new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), exportIntervalMillis: 3_600_000 })] }),
  tracerProvider: new BasicTracerProvider(),
};
const done = { etag: '"x"', token: 7n };
const op = () => Promise.resolve(done);
const refusal = new StaleTokenError('s3://bucket/key', 3n, 7n);

const CASES = [
  { name: 'direct', subscribed: false, run: async () => { for (let i = 0; i < OPS; i++) await op(); } },
  { name: 'traced, no subscriber', subscribed: false, run: async () => { for (let i = 0; i < OPS; i++) await traceS3Put('s3://bucket/key', 7n, 'in-place', op); } },
  { name: 'traced, OpenTelemetry', subscribed: true, run: async () => { for (let i = 0; i < OPS; i++) await traceS3Put('s3://bucket/key', 7n, 'in-place', op); } },
  { name: 'loop', subscribed: false, run: async () => { let n = 0; for (let i = 0; i < OPS; i++) n += i & 1; return n; } },
  { name: 'refusal, no subscriber', subscribed: false, run: async () => { for (let i = 0; i < OPS; i++) publishRefused('s3', refusal); } },
  { name: 'refusal, OpenTelemetry', subscribed: true, run: async () => { for (let i = 0; i < OPS; i++) publishRefused('s3', refusal); } },
];

if (process.env.BENCH_SUBSCRIBED === '0') CASES.splice(0, CASES.length, ...CASES.filter((c) => !c.subscribed));
const samples = new Map(CASES.map((c) => [c.name, []]));
for (const c of CASES) {
  if (c.subscribed) instrument(otel);
  await c.run(); // warm up
  if (c.subscribed) uninstrument();
}
for (let round = 0; round < ROUNDS; round++) {
  for (const c of round % 2 === 0 ? CASES : [...CASES].reverse()) {
    if (c.subscribed) instrument(otel);
    const before = process.cpuUsage();
    await c.run();
    const used = process.cpuUsage(before);
    if (c.subscribed) uninstrument();
    samples.get(c.name).push(((used.user + used.system) * 1000) / OPS);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const floorOf = (name) => samples.get(name.startsWith('refusal') || name === 'loop' ? 'loop' : 'direct');
console.log(`diagnostics channels: ${OPS} operations per block, ${ROUNDS} rounds, Node ${process.version}, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
console.log(`${'case'.padEnd(26)} CPU ns/op (median)  added ns/op over its floor (median of per-round differences)`);
for (const c of CASES) {
  const s = samples.get(c.name);
  const floor = floorOf(c.name);
  const added = median(s.map((x, i) => x - floor[i]));
  console.log(`${c.name.padEnd(26)} ${median(s).toFixed(1).padStart(18)}  ${added.toFixed(1).padStart(8)}`);
}
