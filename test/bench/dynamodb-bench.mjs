// Benchmark: what fencing costs a DynamoDB write, against the same plain
// write on the same server in the same run. Imports the BUILT adapter:
//   npm run build && FK_DYNAMODB=http://127.0.0.1:8011 node test/bench/dynamodb-bench.mjs
// (bash test/servers/dynalite.sh start serves dynalite on 8011.)
// Env: FK_DYNAMODB (default http://127.0.0.1:8011), BENCH_WRITES (writes per mode, default 2000),
// BENCH_BLOCK (writes per turn, default 20), BENCH_BODY_BYTES (default 256).
//
// Modes, each sequential (one write in flight), one client for all, one key per mode:
//   put          PutItem of { pk, body, fencing_token }, no condition (the floor)
//   put-condition PutItem of the same item with the fence's condition written by hand:
//                the server's share of the cost, without fencekeeper's code
//   fenced-put   fencedPutItem of { pk, body } with a growing token: the same item, the
//                condition (attribute_not_exists(#t) OR (attribute_type(#t, :n) AND #t <= :t))
//                AND attribute_not_exists(#l) (a bare token: the item must not be bound to a lock)
//   update       UpdateItem SET body = :b, fencing_token = :t, no condition
//   fenced-update fencedUpdateItem SET body = :b (the fence joins its SET and REMOVE)
// The modes take turns in blocks (put, fenced-put, update, fenced-update, again), so load
// on the machine falls on all of them alike. Per mode: the median latency of its writes
// and the throughput over its blocks; the ratio is plain / fenced throughput (1.0 = free).
// Prints figures; asserts nothing.
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { CreateTableCommand, DeleteTableCommand, DynamoDBClient, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { fencedPutItem, fencedUpdateItem } from '../../dist/adapters/dynamodb/index.js';

const WRITES = Number(process.env.BENCH_WRITES ?? 2000);
const BLOCK = Number(process.env.BENCH_BLOCK ?? 20);
const body = randomBytes(Math.max(16, Number(process.env.BENCH_BODY_BYTES ?? 256))).toString('base64');
const client = new DynamoDBClient({
  endpoint: process.env.FK_DYNAMODB ?? 'http://127.0.0.1:8011',
  region: 'us-east-1',
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  maxAttempts: 1,
});
const TableName = `bench_${randomBytes(4).toString('hex')}`;
await client.send(new CreateTableCommand({
  TableName,
  KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
  AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
  BillingMode: 'PAY_PER_REQUEST',
}));

let token = 0n;
const MODES = {
  put: (i) => client.send(new PutItemCommand({ TableName, Item: { pk: { S: 'put' }, body: { S: body }, fencing_token: { N: String(i + 1) } } })),
  // The fence's condition sent by hand, no fencekeeper code: what the server's evaluation costs.
  'put-condition': (i) => client.send(new PutItemCommand({
    TableName, Item: { pk: { S: 'put-condition' }, body: { S: body }, fencing_token: { N: String(i + 1) } },
    ConditionExpression: '(attribute_not_exists(#t) OR (attribute_type(#t, :n) AND #t <= :t)) AND attribute_not_exists(#l)',
    ExpressionAttributeNames: { '#t': 'fencing_token', '#l': 'fencing_lock' }, ExpressionAttributeValues: { ':t': { N: String(i + 1) }, ':n': { S: 'N' } },
  })),
  'fenced-put': () => fencedPutItem(client, { TableName, Item: { pk: { S: 'fenced-put' }, body: { S: body } }, token: ++token }),
  update: (i) => client.send(new UpdateItemCommand({
    TableName, Key: { pk: { S: 'update' } }, UpdateExpression: 'SET body = :b, fencing_token = :t',
    ExpressionAttributeValues: { ':b': { S: body }, ':t': { N: String(i + 1) } },
  })),
  'fenced-update': () => fencedUpdateItem(client, {
    TableName, Key: { pk: { S: 'fenced-update' } }, UpdateExpression: 'SET body = :b',
    ExpressionAttributeValues: { ':b': { S: body } }, token: ++token,
  }),
};
const names = Object.keys(MODES);
const latencies = Object.fromEntries(names.map((n) => [n, []]));
const busyMs = Object.fromEntries(names.map((n) => [n, 0]));
const counts = Object.fromEntries(names.map((n) => [n, 0]));
// Each mode's write number, warm-up included: the hand-written condition needs a token that never goes down.
const seq = Object.fromEntries(names.map((n) => [n, 0]));

// Warm up: connections, the key schema the fenced put caches, the JIT.
for (const name of names) for (let i = 0; i < 50; i++) await MODES[name](seq[name]++);

for (let done = 0; done < WRITES; done += BLOCK) {
  for (const name of names) {
    const started = performance.now();
    for (let i = 0; i < BLOCK; i++) {
      const t0 = performance.now();
      await MODES[name](seq[name]++);
      counts[name]++;
      latencies[name].push(performance.now() - t0);
    }
    busyMs[name] += performance.now() - started;
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};
const rate = (name) => (counts[name] * 1000) / busyMs[name];
console.log(`dynamodb bench: ${WRITES} writes per mode in blocks of ${BLOCK}, ${body.length}-byte body, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
for (const name of names) {
  console.log(`  ${name.padEnd(14)} median ${median(latencies[name]).toFixed(3)} ms   ${rate(name).toFixed(0)} writes/s`);
}
console.log(`  fenced-put / put        ${(rate('fenced-put') / rate('put')).toFixed(3)}x throughput, median latency ${(median(latencies.put) / median(latencies['fenced-put'])).toFixed(3)}x`);
console.log(`  put-condition / put     ${(rate('put-condition') / rate('put')).toFixed(3)}x throughput, median latency ${(median(latencies.put) / median(latencies['put-condition'])).toFixed(3)}x`);
console.log(`  fenced-update / update  ${(rate('fenced-update') / rate('update')).toFixed(3)}x throughput, median latency ${(median(latencies.update) / median(latencies['fenced-update'])).toFixed(3)}x`);

await client.send(new DeleteTableCommand({ TableName })).catch(() => undefined);
client.destroy();
