// The etcd source's Watch stream (src/sources/etcd/watches.ts) when it breaks, on the
// 3-node cluster: a waiter's stream is on a member that is SIGKILLed, its predecessor is
// deleted while the stream is down, and the waiter is still granted once the stream is
// back (the watch created again from the revision it had reached: etcd replays the
// deletion); the same with the history compacted past that revision meanwhile (the
// watch is lost with ETCD_WATCH_COMPACTED and the waiter reads its place instead); and a
// watch asked for from a compacted revision. The file takes the cluster's fault turn
// for its run and heals the cluster after.
import { describe, expect, it } from 'vitest';
import { Etcd3 } from 'etcd3';
import { acquireLock, etcdSession, lockStatus } from '../../../src/sources/etcd/index.js';
import { watchRange, type WatchLostError } from '../../../src/sources/etcd/watches.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { EtcdPool, clusterHosts, etcdCtl as ctl, holdEtcdFaultsForFile, observedWatches } from './helpers.js';

const pool = new EtcdPool();

holdEtcdFaultsForFile();

/** Compact the cluster's history up to the store's revision now (after one more write, so it passes every earlier one). */
async function compactNow(etcd: Etcd3, key: string): Promise<bigint> {
  await etcd.put(key).value('bump');
  const revision = BigInt((await etcd.kv.range({ key: Buffer.from(key) })).header.revision);
  await etcd.kv.compact({ revision: revision.toString(), physical: true });
  return revision;
}

/**
 * A lock held through the surviving members, and one waiter whose client knows only
 * member `index`: its Watch stream (and lease) can only be on that member.
 */
async function waiterOnMember(index: number, name: string) {
  const others = clusterHosts().filter((_, i) => i !== index - 1);
  const holderEtcd = pool.client(others);
  const admin = pool.client(others);
  const { client: waiterClient, log } = observedWatches(pool.client([clusterHosts()[index - 1]!]));
  // A lease that outlives the member's restart and etcd3's circuit breaker (5 s open after three failures).
  etcdSession(waiterClient, { ttlSeconds: 30 });
  const holder = await acquireLock(holderEtcd, name, { owner: 'holder' });
  const wait = acquireLock(waiterClient, name, { owner: 'waiter' });
  wait.catch(() => undefined);
  await until(async () => (await lockStatus(admin, name)).waiters.length === 1, 'the waiter queued');
  await until(() => log.replies.some((r) => r.created && !r.canceled), 'the waiter watching its predecessor');
  return { holder, wait, admin, log, closeWaiter: () => etcdSession(waiterClient).close() };
}

describe('the Watch stream across member failures', () => {
  it("a waiter's member is SIGKILLed, the holder releases while it is down: once the member is back, the watch resumes from its revision and the waiter is granted", async () => {
    const index = 3;
    const name = uniqueLockName('watch_restart');
    const { holder, wait, log, closeWaiter } = await waiterOnMember(index, name);
    const watched = log.creates.at(-1)!;
    await ctl('kill', String(index));
    await holder.release();
    await ctl('restart', String(index));
    const lock = await within(wait, 30_000, 'the waiter granted after its member came back');
    expect(lock.held).toBe(true);
    // The predecessor's watch was created again on a new stream, from a revision (not the present),
    // and etcd replayed the deletion that happened while the stream was down.
    expect(log.streams).toBeGreaterThanOrEqual(2);
    const again = log.creates.find((c) => c.key === watched.key && c !== watched);
    expect(again, 'the watch created again').toBeDefined();
    expect(again!.from).not.toBeNull();
    expect(log.replies.some((r) => r.deleted.includes(watched.key))).toBe(true);
    await lock.release();
    await closeWaiter();
  }, 90_000);

  it('the same with the history compacted past the watch meanwhile: the watch is lost (compacted) and the waiter reads its place', async () => {
    const index = 2;
    const name = uniqueLockName('watch_compacted');
    const { holder, wait, admin, log, closeWaiter } = await waiterOnMember(index, name);
    await ctl('kill', String(index));
    await holder.release();
    const compacted = await compactNow(admin, `${name}-bump`);
    await ctl('restart', String(index));
    const lock = await within(wait, 30_000, 'the waiter granted after its member came back');
    expect(lock.held).toBe(true);
    // etcd said the watch's revision was compacted, not that the key was deleted.
    expect(log.replies.some((r) => r.canceled && r.compactRevision >= compacted)).toBe(true);
    await lock.release();
    await closeWaiter();
  }, 90_000);

  it('a watch from a compacted revision ends with ETCD_WATCH_COMPACTED and the revision etcd keeps', async () => {
    const etcd = pool.client(clusterHosts());
    const key = `${uniqueLockName('watch_old')}/k`;
    await etcd.put(key).value('a');
    const old = BigInt((await etcd.kv.range({ key: Buffer.from(key) })).kvs[0]!.mod_revision);
    const compacted = await compactNow(etcd, `${key}-bump`);
    const lost = await new Promise<WatchLostError>((resolve) => {
      watchRange(etcd, Buffer.from(key), undefined, old, false, { lost: resolve, put: () => resolve(new Error('an event from a compacted revision') as WatchLostError) });
    });
    expect(lost.code).toBe('ETCD_WATCH_COMPACTED');
    expect(lost.compactRevision).toBe(compacted);
  });
});
