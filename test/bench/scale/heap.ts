// Client heap per held lock and per waiting acquire, at L locks, as the ZooKeeper
// lock-throughput bench defines it: one source (session) takes L locks of distinct
// names, then a second source of the same family in the same process asks for each
// of them (one waiter per lock). heapUsed after two forced GCs (--expose-gc), before,
// with the holds and with the waiters: the deltas over L. What the server holds is
// read at the same three moments (./sources.ts readServer), its deltas over L too.
// Afterwards the holds are released, every waiter must be granted, and releases.
import { performance } from 'node:perf_hooks';
import type { Lock } from '../../../src/lock.js';
import { Etcd3 } from 'etcd3';
import { closeWatchStreamWhenIdle, watchRange, type EtcdWatch } from '../../../src/sources/etcd/watches.js';
import { HEAP_REDIS, openSource, readServer, servers, type SourceFamily } from './sources.js';

export interface HeapPoint {
  readonly locks: number;
  readonly heldBytes: number;
  readonly waitingBytes: number;
  readonly serverHeldBytes: number;
  readonly serverWaitingBytes: number;
  readonly serverWhat: string;
  readonly serverDetail: string;
  readonly seconds: number;
  /** Seconds spent taking the holds, queueing the waiters, and handing every lock on (release, grant, release). */
  readonly phases: { readonly hold: number; readonly wait: number; readonly drain: number };
  /** etcd: the same point's requests sent bare (./heap.ts etcdBare), seconds each: the floor its phases stand on. */
  readonly bare?: EtcdBare;
}

export interface EtcdBare {
  /** L put-if-absent txns with a lease, BATCH at once (a hold's or a join's write). */
  readonly puts: number;
  /** L watch creates on one etcd3 client's Watch stream, pipelined as the source sends them (src/sources/etcd/watches.ts). */
  readonly watchCreates: number;
  /** L deletes, BATCH at once (a release's write). */
  readonly deletes: number;
}

declare const gc: (() => void) | undefined;
// Holds and waiting acquires are asked in batches of BATCH at once (pipelined on the
// source's connections), the next batch once the last one answered.
const BATCH = 2000;
// Up to this many locks, every hold is released, every waiter must be granted and
// releases (the run checks the queues hand on); above it, the sources are closed:
// draining 100,000 would take a third of the point's time again.
export const DRAIN_UP_TO = 10_000;
const PG_POOL = 24;

function heapUsed(): number {
  if (typeof gc !== 'function') throw new Error('run with node --expose-gc');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function heapAt(family: SourceFamily, locks: number, o: { pgSchemaName?: string | undefined }): Promise<HeapPoint> {
  const started = performance.now();
  // PostgreSQL: every enter is a commit with synchronous_commit on (an fsync); with 3
  // query connections a batch waits on one fsync after another, with PG_POOL many
  // commits share one flush (group commit), as a busy application's pool would.
  const holder = await openSource(family, { pgSchemaName: o.pgSchemaName, pgMax: PG_POOL, redis: HEAP_REDIS });
  const waiter = await openSource(family, { pgSchemaName: o.pgSchemaName, pgMax: PG_POOL, redis: HEAP_REDIS });
  const tag = `scale/heap/${family}/${locks}/${Date.now().toString(36)}`;
  const names = Array.from({ length: locks }, (_, i) => `${tag}/${i}`);
  const held: Lock[] = [];
  const waiting: Promise<Lock>[] = [];
  try {
    // Every path once first (ZooKeeper makes the parent containers on the first acquire), then a clean take.
    await holder.source.acquireLock(`${tag}/warm`).then((l) => l.release());
    await waiter.source.acquireLock(`${tag}/warm`).then((l) => l.release());
    await sleep(100);
    const before = heapUsed();
    const s0 = await readServer(family, o.pgSchemaName);
    const t0 = performance.now();
    for (let i = 0; i < locks; i += BATCH) held.push(...(await Promise.all(names.slice(i, i + BATCH).map((n) => holder.source.acquireLock(n)))));
    await sleep(200); // follow-up requests of a grant (ZooKeeper's own-node watch) go out on a later turn
    const withHeld = heapUsed();
    const s1 = await readServer(family, o.pgSchemaName);
    const t1 = performance.now();
    for (let i = 0; i < locks; i += BATCH) {
      const batch = names.slice(i, i + BATCH);
      const asked = batch.map((n) => waiter.source.acquireLock(n));
      // Awaited below; a point given up (its session lost) must not leave unhandled rejections.
      for (const a of asked) a.catch(() => undefined);
      waiting.push(...asked);
      // Queued once the batch's last name lists a waiter (one connection sends in order):
      // the next batch goes out then, so at most one batch is in flight.
      const last = batch[batch.length - 1]!;
      for (let tries = 0; tries < 2000; tries++) {
        if ((await waiter.queued(last)) > 1) break;
        await sleep(5);
      }
    }
    await sleep(1000); // the last waiters' watches / subscriptions settle
    const withWaiters = heapUsed();
    const s2 = await readServer(family, o.pgSchemaName);
    const t2 = performance.now();
    if (locks <= DRAIN_UP_TO) {
      for (let i = 0; i < held.length; i += BATCH) await Promise.all(held.slice(i, i + BATCH).map((l) => l.release()));
      const granted = await Promise.all(waiting);
      for (let i = 0; i < granted.length; i += BATCH) await Promise.all(granted.slice(i, i + BATCH).map((l) => l.release()));
    } else {
      // Past DRAIN_UP_TO the sources are closed instead (below, the waiter's first: its
      // entries leave and the holder's close hands nothing on); the servers drop what
      // the sessions held. Its waiting acquires end with the close.
      await waiter.close();
    }
    return {
      locks,
      heldBytes: (withHeld - before) / locks,
      waitingBytes: (withWaiters - withHeld) / locks,
      serverHeldBytes: (s1.bytes - s0.bytes) / locks,
      serverWaitingBytes: (s2.bytes - s1.bytes) / locks,
      serverWhat: s2.what,
      serverDetail: `${s0.detail} -> ${s1.detail} -> ${s2.detail}`,
      seconds: (performance.now() - started) / 1000,
      phases: { hold: (t1 - t0) / 1000, wait: (t2 - t1) / 1000, drain: (performance.now() - t2) / 1000 },
      // Timed at the first size only: it projects nothing any more (run.ts), and at 10,000 its 3 x L
      // requests took 12-25 s of the heap section's budget (load 10-17), which 100,000 needs.
      ...(family === 'etcd' && locks < DRAIN_UP_TO && { bare: await etcdBare(locks) }),
    };
  } finally {
    await waiter.close().catch(() => undefined);
    await holder.close();
  }
}

/**
 * etcd's floor at L locks, the same run: the writes and watches a point makes, sent bare
 * through one etcd3 client with no source around them (the watches on the source's own
 * Watch stream multiplexer, which is what sends them). A point holds and waits for L
 * locks with 2L such puts and, once each lock is held past a turn or waited for, a watch
 * create each (the holder's on its own key, the waiter's on its predecessor); its drain
 * deletes, looks and watches again. Timed after the point, on its keys' own prefix.
 */
async function etcdBare(locks: number): Promise<EtcdBare> {
  const etcd = new Etcd3({ hosts: [...servers.etcd] });
  try {
    const lease = await etcd.leaseClient.leaseGrant({ TTL: 60 });
    const tag = `scale/bare/${locks}/${Date.now().toString(36)}/`;
    const keys = Array.from({ length: locks }, (_, i) => Buffer.from(`${tag}${i}`));
    const value = Buffer.from('{"lease":"0","join":"000000000000000000000","owner":"fencekeeper"}');
    const t0 = performance.now();
    for (let i = 0; i < locks; i += BATCH) {
      await Promise.all(
        keys.slice(i, i + BATCH).map((key) =>
          etcd.kv.txn({ compare: [{ key, target: 'Create', result: 'Equal', create_revision: '0' }], success: [{ request_put: { key, value, lease: lease.ID } }], failure: [] }),
        ),
      );
    }
    const t1 = performance.now();
    // L watches on the client's one Watch stream, as the source makes them (src/sources/etcd/watches.ts:
    // creates pipelined, each naming its id), awaited by batch.
    const watches: EtcdWatch[] = [];
    for (let i = 0; i < locks; i += BATCH) {
      await new Promise<void>((resolve, reject) => {
        const batch = keys.slice(i, i + BATCH);
        let left = batch.length;
        for (const key of batch) watches.push(watchRange(etcd, key, undefined, 1n, true, { created: () => void (--left === 0 && resolve()), lost: reject }));
      });
    }
    const t2 = performance.now();
    for (let i = 0; i < locks; i += BATCH) await Promise.all(keys.slice(i, i + BATCH).map((key) => etcd.kv.deleteRange({ key })));
    const t3 = performance.now();
    for (const watch of watches) watch.cancel();
    closeWatchStreamWhenIdle(etcd);
    await etcd.leaseClient.leaseRevoke({ ID: lease.ID }).catch(() => undefined);
    return { puts: (t1 - t0) / 1000, watchCreates: (t2 - t1) / 1000, deletes: (t3 - t2) / 1000 };
  } finally {
    etcd.close();
  }
}
