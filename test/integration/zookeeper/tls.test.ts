// ZooKeeper over TLS, against the secure client ports of the test servers
// (test/servers/zk-standalone.sh and zk-ensemble.sh, certificates from
// zk-certs.sh): the client's requests and watches, a lock contended by
// several clients, and the SIGKILL of the ensemble's leader with a lock
// holder on it, all over TLS.
import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { acquireLock, lockStatus, type ZooKeeperLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import type { WatchEvent } from '../../../src/sources/zookeeper/watches.js';
import { ensembleLeader, ensembleLeaderKills, testServers, useEnsembleForFaults, waitEnsembleHealthy } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { mkdirp, namespace, rmrf, watcherSpy } from './helpers.js';

const servers = testServers();
const pool = new ClientPool();
const root = namespace('zktls');
let ca: Buffer;
// The leader kill below: one fault-injecting file at a time on the ensemble.
useEnsembleForFaults();
const leaderKills = ensembleLeaderKills();

function tlsClient(connectString: string, sessionTimeoutMs = 10_000): Promise<ZooKeeperClient> {
  return pool.connect({ connectString, sessionTimeoutMs, tls: { ca } });
}

beforeAll(async () => {
  ca = readFileSync(servers.zkTlsCa);
  const admin = await ZooKeeperClient.connect({ connectString: servers.zkStandaloneTls, tls: { ca } });
  await mkdirp(admin, root);
  await admin.close();
  const ensembleAdmin = await ZooKeeperClient.connect({ connectString: servers.zkEnsembleTls, tls: { ca } });
  await mkdirp(ensembleAdmin, root);
  await ensembleAdmin.close();
}, 16 * 60_000);

afterEach(() => pool.closeAll());

afterAll(async () => {
  for (const where of [servers.zkStandaloneTls, servers.zkEnsembleTls]) {
    const admin = await ZooKeeperClient.connect({ connectString: where, tls: { ca } });
    await rmrf(admin, root);
    await admin.close();
  }
});

describe('the client over TLS (standalone secure port)', () => {
  it('creates, reads, writes, lists, deletes and runs a multi; watches fire; an ephemeral node goes with its session', async () => {
    const zk = await tlsClient(servers.zkStandaloneTls);
    const other = await tlsClient(servers.zkStandaloneTls);
    const base = `${root}/ops-${zk.sessionId.toString(16)}`;

    const created = await zk.create(base, 'v0');
    expect(created.path).toBe(base);
    expect(created.stat.czxid).toBeGreaterThan(0n);
    expect(Buffer.from((await zk.getData(base)).data).toString()).toBe('v0');

    const dataWatch = watcherSpy<WatchEvent>();
    const childWatch = watcherSpy<WatchEvent>();
    await zk.getData(base, { watch: dataWatch.fn });
    expect(await zk.getChildren(base, { watch: childWatch.fn })).toEqual([]);

    await other.setData(base, 'v1');
    expect(await dataWatch.next).toEqual({ type: 'dataChanged', path: base });
    const eph = await other.create(`${base}/eph`, null, { mode: 'ephemeral' });
    expect(await childWatch.next).toEqual({ type: 'childrenChanged', path: base });
    expect((await zk.exists(eph.path))?.ephemeralOwner).toBe(other.sessionId);

    const results = await zk.multi([
      { op: 'create', path: `${base}/a`, data: 'A' },
      { op: 'setData', path: base, data: 'v2' },
    ]);
    expect(results).toHaveLength(2);
    expect(Buffer.from((await zk.getData(base)).data).toString()).toBe('v2');
    expect((await zk.getChildren(base)).sort()).toEqual(['a', 'eph']);

    // A large value crosses several TLS records both ways.
    const big = Buffer.alloc(512 * 1024, 7);
    await zk.setData(`${base}/a`, big);
    expect(Buffer.from((await other.getData(`${base}/a`)).data).equals(big)).toBe(true);

    await other.close();
    expect(await zk.exists(eph.path)).toBeNull();
    await zk.delete(`${base}/a`);
    await zk.delete(base);
    expect(await zk.exists(base)).toBeNull();
  });

  it('a lock contended by five clients over TLS: one holder at a time, each grant with a larger token', async () => {
    const name = uniqueLockName('tls_contended');
    const clients = await Promise.all(Array.from({ length: 5 }, () => tlsClient(servers.zkStandaloneTls)));
    const rounds = 3;
    let inside = 0;
    let maxInside = 0;
    const tokens: bigint[] = [];
    await Promise.all(
      clients.map(async (zk) => {
        for (let i = 0; i < rounds; i++) {
          const lock = await acquireLock(zk, name);
          inside++;
          maxInside = Math.max(maxInside, inside);
          tokens.push(lock.token);
          // Let the others queue up behind this holder before it lets go.
          await new Promise((r) => setTimeout(r, 5));
          expect(lock.held).toBe(true);
          inside--;
          await lock.release();
        }
      }),
    );
    expect(maxInside).toBe(1);
    expect(tokens).toHaveLength(clients.length * rounds);
    // Grant order is token order: every token is larger than the one before.
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    expect((await lockStatus(clients[0]!, name)).holder).toBeNull();
  });
});

describe('a TLS ensemble loses its leader', () => {
  it('the lock holder on the leader resumes its session on a survivor over TLS and keeps the lock; the waiter gets it after the release', async () => {
    const tlsAddresses = servers.zkEnsembleTls.split(',');
    expect(tlsAddresses).toHaveLength(3);
    await waitEnsembleHealthy();
    const leader = await ensembleLeader();
    // Node n's secure port is the n-th address; the holder starts on the leader.
    const ordered = [tlsAddresses[leader - 1]!, ...tlsAddresses.filter((_, i) => i !== leader - 1)];
    const holderZk = await tlsClient(ordered.join(','));
    const waiterZk = await tlsClient(ordered.slice(1).join(','));
    const session = holderZk.sessionId;
    const name = uniqueLockName('tls_failover');

    const held: ZooKeeperLock = await acquireLock(holderZk, name);
    const waiting = acquireLock(waiterZk, name);
    await until(async () => (await lockStatus(waiterZk, name)).waiters.length === 1, 'the waiter to queue');

    const states: string[] = [];
    holderZk.on('state', (s) => states.push(s));
    expect(await leaderKills.kill()).toBe(leader);
    // The fault happened: the holder lost its server, then came back on a survivor.
    await until(() => states.includes('suspended'), 'the holder to lose the leader', 20_000);
    await until(() => holderZk.state === 'connected', 'the holder to resume over TLS on a survivor', 20_000);
    expect(holderZk.sessionId).toBe(session);
    expect(states).toEqual(['suspended', 'connected']);

    // The lock stayed with the holder through the failover; the waiter still waits.
    expect(held.held).toBe(true);
    await holderZk.sync('/');
    const status = await lockStatus(holderZk, name);
    expect(status.holder?.token).toBe(held.token);
    expect(status.waiters).toHaveLength(1);

    // Requests over the new TLS connection are answered.
    expect(await holderZk.exists(held.path)).not.toBeNull();
    await held.release();
    const next = await within(waiting, 20_000, 'the waiter to be granted the lock');
    expect(next.token).toBeGreaterThan(held.token);
    await next.release();
  });
});
