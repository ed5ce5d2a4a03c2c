// etcd lock kinds benchmark: a read lock, a write lock and a permit beside
// the plain lock, same etcd, same run, medians reported.
//
//   FK_ETCD=http://127.0.0.1:2389 node node_modules/vite-node/vite-node.mjs test/bench/etcd-kinds-bench.ts
//   env: BENCH_REPS (5), BENCH_SECONDS (2 per subject and rep)
//
// One client per subject (all opened first, each with its lease granted
// before timing), one name each, acquire then release in a loop,
// uncontended. Within a rep the subjects take turns in blocks of 25 cycles,
// a different one first each block, until each has run BENCH_SECONDS: a
// machine whose load drifts loads all of them alike, and the per-rep ratios
// compare like with like. Printed: each rep's cycles/s and ratio to the
// plain lock, then the medians, and the requests per cycle counted exactly
// at the client the source is given (every unary call it makes: range, txn,
// deleteRange, lease grant/revoke; and every watch it opens, which etcd
// answers on the watch stream before the source goes on). Each unary call
// is one round trip; the lease's keepalives run on their own stream, apart
// from the cycles, and are not counted. Figures only, no assertions.
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Etcd3 } from 'etcd3';
import { acquireLock, acquirePermit, acquireReadLock, acquireWriteLock, etcdSession } from '../../src/sources/etcd/index.js';
import type { EtcdClient } from '../../src/sources/etcd/client.js';

const host = new URL(process.env.FK_ETCD ?? 'http://127.0.0.1:2389').host;
const REPS = Number(process.env.BENCH_REPS ?? 5);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const BLOCK = 25;
const tag = `bench_kinds_${process.pid}_${Date.now().toString(36)}`;

interface Subject {
  readonly name: string;
  readonly cycle: (etcd: EtcdClient) => Promise<void>;
}

const SUBJECTS: readonly Subject[] = [
  { name: 'plain lock', cycle: async (etcd) => (await acquireLock(etcd, `${tag}/plain`)).release() },
  { name: 'read lock', cycle: async (etcd) => (await acquireReadLock(etcd, `${tag}/rw-read`)).release() },
  { name: 'write lock', cycle: async (etcd) => (await acquireWriteLock(etcd, `${tag}/rw-write`)).release() },
  { name: 'permit (of 4)', cycle: async (etcd) => (await acquirePermit(etcd, `${tag}/permit`, { permits: 4 })).release() },
];

interface Requests {
  range: number;
  txn: number;
  deleteRange: number;
  lease: number;
  watches: number;
}

const total = (r: Requests): number => r.range + r.txn + r.deleteRange + r.lease + r.watches;

/** `etcd` as the source sees it, counting every request the source makes. */
function counting(etcd: Etcd3): { client: EtcdClient; requests: Requests } {
  const requests: Requests = { range: 0, txn: 0, deleteRange: 0, lease: 0, watches: 0 };
  const client: EtcdClient = {
    kv: {
      range: (r) => (requests.range++, etcd.kv.range(r)),
      txn: (r) => (requests.txn++, etcd.kv.txn(r)),
      deleteRange: (r) => (requests.deleteRange++, etcd.kv.deleteRange(r)),
    },
    leaseClient: {
      leaseGrant: (r) => (requests.lease++, etcd.leaseClient.leaseGrant(r)),
      leaseRevoke: (r) => (requests.lease++, etcd.leaseClient.leaseRevoke(r)),
      leaseKeepAlive: () => etcd.leaseClient.leaseKeepAlive(),
    },
    // The source's watch creates, counted as they are written to its Watch stream.
    watchClient: {
      watch: () =>
        etcd.watchClient.watch().then((stream) => {
          const write = stream.write.bind(stream);
          stream.write = (item) => {
            if (item.create_request !== undefined) requests.watches++;
            write(item);
          };
          return stream;
        }),
    },
  };
  return { client, requests };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const snapshot = (r: Requests): Requests => ({ ...r });
const minus = (a: Requests, b: Requests): Requests => ({
  range: a.range - b.range,
  txn: a.txn - b.txn,
  deleteRange: a.deleteRange - b.deleteRange,
  lease: a.lease - b.lease,
  watches: a.watches - b.watches,
});

async function main(): Promise<void> {
  const raws = SUBJECTS.map(() => new Etcd3({ hosts: [host] }));
  const wires = raws.map((etcd) => counting(etcd));
  try {
    // Warm: each client's lease granted, each name's path taken once.
    for (let i = 0; i < SUBJECTS.length; i++) {
      await etcdSession(wires[i]!.client, { ttlSeconds: 10 }).lease();
      for (let k = 0; k < 50; k++) await SUBJECTS[i]!.cycle(wires[i]!.client);
    }
    const rates: number[][] = SUBJECTS.map(() => []);
    const perCycle: Requests[][] = SUBJECTS.map(() => []);
    console.log(`etcd at ${host}; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}; ${REPS} reps of ${SECONDS} s per subject, in turns of ${BLOCK} cycles`);
    for (let rep = 0; rep < REPS; rep++) {
      const time = SUBJECTS.map(() => 0);
      const cycles = SUBJECTS.map(() => 0);
      const sent = SUBJECTS.map<Requests>(() => ({ range: 0, txn: 0, deleteRange: 0, lease: 0, watches: 0 }));
      for (let block = 0; time.some((t) => t < SECONDS * 1000); block++) {
        for (let j = 0; j < SUBJECTS.length; j++) {
          const i = (block + j + rep) % SUBJECTS.length;
          if (time[i]! >= SECONDS * 1000) continue;
          const before = snapshot(wires[i]!.requests);
          const t0 = performance.now();
          for (let k = 0; k < BLOCK; k++) await SUBJECTS[i]!.cycle(wires[i]!.client);
          time[i]! += performance.now() - t0;
          cycles[i]! += BLOCK;
          const d = minus(wires[i]!.requests, before);
          for (const key of Object.keys(d) as (keyof Requests)[]) sent[i]![key] += d[key];
        }
      }
      const rate = SUBJECTS.map((_, i) => (cycles[i]! / time[i]!) * 1000);
      SUBJECTS.forEach((_, i) => {
        rates[i]!.push(rate[i]!);
        const s = sent[i]!;
        const n = cycles[i]!;
        perCycle[i]!.push({ range: s.range / n, txn: s.txn / n, deleteRange: s.deleteRange / n, lease: s.lease / n, watches: s.watches / n });
      });
      console.log(
        `rep ${rep + 1}: ${SUBJECTS.map((s, i) => `${s.name} ${rate[i]!.toFixed(0)}/s (${(rate[i]! / rate[0]!).toFixed(2)}x)`).join(', ')}; load ${loadavg()[0]!.toFixed(2)}`,
      );
    }
    console.log('\nmedians | cycles/s | vs plain lock (median of per-rep ratios) | requests per cycle (txn + range + deleteRange + lease + watches)');
    for (let i = 0; i < SUBJECTS.length; i++) {
      const ratios = rates[i]!.map((r, rep) => r / rates[0]![rep]!);
      const req = perCycle[i]!;
      const m = (key: keyof Requests): number => median(req.map((r) => r[key]));
      const line = `${m('txn').toFixed(2)} + ${m('range').toFixed(2)} + ${m('deleteRange').toFixed(2)} + ${m('lease').toFixed(2)} + ${m('watches').toFixed(2)}`;
      console.log(`${SUBJECTS[i]!.name.padEnd(14)} | ${median(rates[i]!).toFixed(0).padStart(6)} | ${median(ratios).toFixed(2)}x | ${median(req.map(total)).toFixed(2)} = ${line}`);
    }
    console.log(`load average after ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  } finally {
    for (let i = 0; i < SUBJECTS.length; i++) {
      await etcdSession(wires[i]!.client).close().catch(() => undefined);
      raws[i]!.close();
    }
  }
}

await main();
