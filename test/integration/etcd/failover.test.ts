// The etcd source across a leader failover on the 3-node cluster: the etcd
// leader is SIGKILLed while a lock is held and three clients wait for it.
// The lease survives (a keepalive sent after the kill is acknowledged, by
// the new leader, before the lease could expire, and the holding never steps
// down), the queue keeps its order, and tokens keep increasing across the
// failover. The file takes the cluster's fault turn for its run and heals
// the cluster after.
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { Etcd3 } from 'etcd3';
import type { EtcdClient } from '../../../src/sources/etcd/client.js';
import { acquireLock, etcdSession, lockStatus, type EtcdLock } from '../../../src/sources/etcd/index.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { watchedKeepalives } from '../../fixtures/etcd-keepalives.mjs';
import { EtcdPool, clusterHosts, etcdCtl as ctl, holdEtcdFaultsForFile } from './helpers.js';

const pool = new EtcdPool();

/** `etcd` with its keepalive streams observed: how many were opened, and which member answered the last keepalive. */
function observedKeepalives(etcd: Etcd3): { client: EtcdClient; streams: () => number; member: () => string | null } {
  let streams = 0;
  let member: string | null = null;
  const client = watchedKeepalives(etcd, (stream) => {
    streams++;
    stream.on('data', (response) => {
      member = response.header.member_id;
    });
  });
  return { client, streams: () => streams, member: () => member };
}

interface Member {
  readonly index: number;
  readonly host: string;
  readonly id: string;
  readonly leader: string;
}

async function members(): Promise<Member[]> {
  return Promise.all(
    clusterHosts().map(async (host, i) => {
      const etcd = new Etcd3({ hosts: [host] });
      try {
        const status = await etcd.maintenance.status();
        return { index: i + 1, host, id: status.header.member_id, leader: status.leader };
      } finally {
        etcd.close();
      }
    }),
  );
}

/** Make the member with `id` the leader (etcd's MoveLeader, sent to the current leader). */
async function moveLeaderTo(target: Member): Promise<void> {
  const all = await members();
  const leader = all.find((m) => m.id === m.leader);
  if (leader === undefined || leader.id === target.id) return;
  const etcd = new Etcd3({ hosts: [leader.host] });
  try {
    await etcd.maintenance.moveLeader({ targetID: target.id });
  } finally {
    etcd.close();
  }
}

holdEtcdFaultsForFile();

describe('etcd leader failover', () => {
  it('SIGKILL of the etcd leader while a lock is held and waited for: the lease survives, the order is kept, tokens keep increasing', async () => {
    const name = uniqueLockName('etcd_failover');
    const [holderEtcd, ...waiterClients] = pool.many(4, clusterHosts());
    const observed = observedKeepalives(holderEtcd!);
    const holderClient = observed.client;
    for (const etcd of [holderClient, ...waiterClients]) etcdSession(etcd, { ttlSeconds: 5 });
    const holder = await acquireLock(holderClient, name, { owner: 'holder' });
    const order: number[] = [];
    const tokens: bigint[] = [holder.token];
    const waits: Promise<EtcdLock>[] = [];
    for (const [i, etcd] of waiterClients.entries()) {
      waits.push(
        acquireLock(etcd, name, { owner: `waiter ${i}` }).then((lock) => {
          order.push(i);
          return lock;
        }),
      );
      waits[i]!.catch(() => undefined); // awaited below; a failed wait must not go unhandled meanwhile
      await until(async () => (await lockStatus(holderClient, name)).waiters.length === i + 1, `waiter ${i} queued`);
    }

    // The leader to be killed is the member the holder's keepalives go to: its stream breaks with it.
    const session = etcdSession(holderClient);
    await until(() => observed.member() !== null, 'a keepalive answered', 30_000);
    const serving = (await members()).find((m) => m.id === observed.member());
    expect(serving, `the member ${observed.member()} that answers the holder's keepalives`).toBeDefined();
    await moveLeaderTo(serving!);
    await until(async () => (await ctl('leader')) === String(serving!.index), `member ${serving!.index} to lead`, 30_000);
    const streamsBefore = observed.streams();
    const killedAt = performance.now();
    const killed = await ctl('kill-leader');
    expect(killed).toBe(String(serving!.index));
    await ctl('wait-healthy', '60');
    expect(await ctl('leader')).not.toBe(killed);
    // A keepalive sent after the kill was acknowledged: the lease lives on with the new leader.
    await until(() => session.deadline! - session.ttlMs! > killedAt, 'a keepalive sent after the kill to be acknowledged', 30_000);
    expect(holder.held).toBe(true);
    expect(holder.signal.aborted).toBe(false);
    // ... over a keepalive stream opened after the kill, to a surviving member.
    expect(observed.streams()).toBeGreaterThan(streamsBefore);
    expect(observed.member()).not.toBe(serving!.id);

    await holder.release();
    for (const [i, wait] of waits.entries()) {
      const lock = await within(wait, 30_000, `waiter ${i} to be granted`);
      expect(lock.held).toBe(true);
      tokens.push(lock.token);
      await lock.release();
    }
    // Tokens granted after the failover are larger than those before it, in grant order.
    const after = await acquireLock(holderClient, name);
    tokens.push(after.token);
    await after.release();
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `grant ${i}`).toBe(true);
    expect(order).toEqual([0, 1, 2]);
  });
});
