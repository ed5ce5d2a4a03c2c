// The etcd source's watches on one Watch stream per client (src/sources/etcd/watches.ts),
// against the real single node: creates pipelined and matched by the id each names,
// cancel (a live watch's and one whose create is in flight), each deletion reaching the
// watch of its key and no other, a stream that answers nothing replaced (its watch resumed
// from its revision), and a lock's waiters on one client woken one at a time.
import { describe, expect, it } from 'vitest';
import type { EtcdClient, EtcdKeyValue } from '../../../src/sources/etcd/client.js';
import { acquireLock, etcdSession, type EtcdLock } from '../../../src/sources/etcd/index.js';
import { liveWatchCount, watchRange, type WatchLostError } from '../../../src/sources/etcd/watches.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { EtcdPool, counting, observedWatches } from './helpers.js';

const pool = new EtcdPool();

function keysUnder(prefix: string, n: number): Buffer[] {
  return Array.from({ length: n }, (_, i) => Buffer.from(`${prefix}${i}`));
}

/** A fixed shuffle (no Math.random: a failure must be repeatable). */
function shuffled(n: number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  let seed = 12345;
  for (let i = n - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    const j = seed % (i + 1);
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
}

const failOnLost = (error: WatchLostError): never => {
  throw error;
};

describe('watches on one stream', () => {
  it('creates are pipelined, each naming its id, and each deletion reaches the watch of its key only', async () => {
    const etcd = pool.client();
    const { client, log } = observedWatches(etcd);
    const prefix = `${uniqueLockName('watches')}/`;
    const n = 300;
    const keys = keysUnder(prefix, n);
    for (const key of keys) await etcd.put(key).value('x');
    const created: (bigint | undefined)[] = new Array(n);
    const deleted: string[][] = keys.map(() => []);
    let writtenAtFirstReply = -1;
    const watches = keys.map((key, i) =>
      watchRange(client, key, undefined, 1n, true, {
        created: (at) => {
          if (writtenAtFirstReply < 0) writtenAtFirstReply = log.creates.length;
          created[i] = at;
        },
        deleted: (kv: EtcdKeyValue) => deleted[i]!.push(kv.key.toString()),
        lost: failOnLost,
      }),
    );
    await until(() => created.filter((at) => at !== undefined).length === n, 'every watch created');
    // One stream, creates 1..n in order, from the present; more than one on the wire before etcd's
    // first reply came back (etcd3's own watch manager sends one, then waits for its reply).
    expect(log.streams).toBe(1);
    expect(log.creates.map((c) => c.id)).toEqual(keys.map((_, i) => i + 1));
    expect(log.creates.every((c) => c.from === null)).toBe(true);
    expect(writtenAtFirstReply).toBeGreaterThan(1);
    expect(liveWatchCount(client)).toBe(n);

    // Deleted in a shuffled order, a batch at a time: every watch sees its own key's deletion once.
    const order = shuffled(n);
    for (let i = 0; i < n; i += 50) await Promise.all(order.slice(i, i + 50).map((k) => etcd.delete().key(keys[k]!)));
    await until(() => deleted.every((d) => d.length >= 1), 'every deletion reported');
    // A write after all of them, on a watched key of its own: once its event is in, nothing earlier is still on its way.
    const sentinel = Buffer.from(`${prefix}sentinel`);
    let sentinelSeen = false;
    watchRange(client, sentinel, undefined, 1n, true, { put: () => void (sentinelSeen = true), lost: failOnLost, created: () => void etcd.put(sentinel).value('s').exec() });
    await until(() => sentinelSeen, 'the sentinel write reported');
    expect(deleted).toEqual(keys.map((key) => [key.toString()]));
    for (const watch of watches) watch.cancel();
  });

  it('cancel: a live watch is cancelled on the stream and hears nothing more; one cancelled while its create is in flight too', async () => {
    const etcd = pool.client();
    const { client, log } = observedWatches(etcd);
    const prefix = `${uniqueLockName('watch_cancel')}/`;
    const [live, inFlight, sentinel] = keysUnder(prefix, 3) as [Buffer, Buffer, Buffer];
    const heard: string[] = [];
    const listener = (name: string) => ({
      put: () => void heard.push(`${name} put`),
      deleted: () => void heard.push(`${name} deleted`),
      lost: failOnLost,
    });
    let liveCreated = false;
    const liveWatch = watchRange(client, live, undefined, 1n, true, { ...listener('live'), created: () => void (liveCreated = true) });
    await until(() => liveCreated, 'the live watch created');
    const liveId = log.creates[0]!.id;
    liveWatch.cancel();
    liveWatch.cancel(); // idempotent: one cancel request
    expect(log.cancels).toEqual([liveId]);
    await until(() => log.replies.some((r) => r.id === liveId && r.canceled && !r.created), 'etcd to confirm the cancel');

    // Cancelled in the same turn as made: its create is already written (the stream is open) ...
    let inFlightCreated = false;
    const inFlightWatch = watchRange(client, inFlight, undefined, 1n, true, { ...listener('in flight'), created: () => void (inFlightCreated = true) });
    inFlightWatch.cancel();
    const inFlightId = log.creates[1]!.id;
    expect(log.creates[1]!.key).toBe(inFlight.toString());
    // ... so it is cancelled when etcd's reply names it.
    await until(() => log.cancels.includes(inFlightId), 'the in-flight watch cancelled once created');
    await until(() => log.replies.some((r) => r.id === inFlightId && r.canceled && !r.created), 'etcd to confirm that cancel');
    expect(inFlightCreated).toBe(false);
    expect(liveWatchCount(client)).toBe(0);

    await etcd.put(live).value('x');
    await etcd.put(inFlight).value('x');
    await etcd.delete().key(live);
    await etcd.delete().key(inFlight);
    let sentinelSeen = false;
    const sentinelWatch = watchRange(client, sentinel, undefined, 1n, true, { put: () => void (sentinelSeen = true), lost: failOnLost, created: () => void etcd.put(sentinel).value('s').exec() });
    await until(() => sentinelSeen, 'the sentinel write reported');
    expect(heard).toEqual([]);
    // etcd sent the cancelled watches nothing either.
    expect(log.replies.filter((r) => (r.id === liveId || r.id === inFlightId) && r.deleted.length > 0)).toEqual([]);
    sentinelWatch.cancel();
  });

  it('a stream that answers nothing (a paused member) is given up after a progress request goes unanswered: a new stream resumes the watch and replays the deletion', async () => {
    const etcd = pool.client();
    // The first stream goes deaf on demand: its replies still come, the source no longer hears them,
    // as it would hear nothing from a member stopped without closing its connection.
    let deaf = false;
    let streams = 0;
    const creates: (string | undefined)[] = [];
    const client: EtcdClient = {
      kv: etcd.kv,
      leaseClient: etcd.leaseClient,
      watchClient: {
        watch: () =>
          etcd.watchClient.watch().then((stream) => {
            const first = ++streams === 1;
            const on = stream.on.bind(stream) as (event: string, listener: (...args: unknown[]) => void) => unknown;
            (stream as { on: unknown }).on = (event: string, listener: (...args: unknown[]) => void) =>
              on(event, event === 'data' ? (...args: unknown[]) => void (first && deaf ? undefined : listener(...args)) : listener);
            const write = stream.write.bind(stream);
            stream.write = (item) => {
              if (item.create_request !== undefined) creates.push(item.create_request.start_revision?.toString());
              write(item);
            };
            return stream as unknown as Awaited<ReturnType<EtcdClient['watchClient']['watch']>>;
          }),
      },
    };
    const key = `${uniqueLockName('watch_deaf')}/k`;
    await etcd.put(key).value('x');
    const heard: string[] = [];
    let created = false;
    const watch = watchRange(client, Buffer.from(key), undefined, 1n, true, {
      created: () => void (created = true),
      deleted: () => void heard.push('deleted'),
      disconnected: (error) => void heard.push(`disconnected: ${error.message}`),
      resumed: () => void heard.push('resumed'),
      lost: failOnLost,
    });
    await until(() => created, 'the watch created');
    deaf = true;
    await etcd.delete().key(key);
    await until(() => heard.includes('deleted'), 'the deletion reported on a new stream', 30_000);
    expect(streams).toBe(2);
    // Created again from a revision, not from the present (which is past the deletion).
    expect(creates.length).toBe(2);
    expect(creates[0]).toBeUndefined();
    expect(creates[1]).toMatch(/^[0-9]+$/);
    expect(heard).toEqual([expect.stringMatching(/^disconnected: etcd answered nothing on the watch stream for [0-9]+ ms$/), 'resumed', 'deleted']);
    watch.cancel();
  }, 40_000);

  it("a lock's waiters on one client (one stream): each release wakes the next waiter only", async () => {
    const etcd = pool.client();
    const { client, counts } = counting(etcd);
    etcdSession(client);
    const name = uniqueLockName('watch_one_stream');
    const holder = await acquireLock(client, name);
    const granted: number[] = [];
    const waits: Promise<EtcdLock>[] = [];
    // Joined one after the other (the queue's order is the joins'), each watching its predecessor
    // on the client's one stream before the next joins.
    await until(() => counts.watchesCreated === 1, "the holder's watch on its own key");
    for (let i = 0; i < 5; i++) {
      const wait = acquireLock(client, name, { owner: `waiter ${i}` }).then((lock) => {
        granted.push(i);
        return lock;
      });
      wait.catch(() => undefined);
      waits.push(wait);
      await until(() => counts.watchesCreated === i + 2, `waiter ${i} watching`);
    }
    let previous: EtcdLock = holder;
    for (let i = 0; i < 5; i++) {
      const deletesBefore = counts.deletesDelivered;
      await previous.release();
      previous = await within(waits[i]!, 10_000, `waiter ${i} granted`);
      expect(granted).toEqual(Array.from({ length: i + 1 }, (_, k) => k));
      // One deletion delivered: to the waiter behind the released key, not to the others.
      await until(() => counts.deletesDelivered > deletesBefore, 'the deletion delivered');
      expect(counts.deletesDelivered - deletesBefore).toBe(1);
    }
    await previous.release();
  });
});
