// Leader failover on a real 3-node ensemble: the session, its ephemeral nodes
// and its watches survive the SIGKILL of the leader.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient, type ClientState } from '../../../src/sources/zookeeper/client.js';
import type { WatchEvent } from '../../../src/sources/zookeeper/watches.js';
import { ConnectionLossError, isCode, type ErrorCode } from '../../../src/errors.js';
import { ensembleLeader, ensembleLeaderKills, testServers, useEnsembleForFaults, waitEnsembleHealthy } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { mkdirp, namespace, rmrf, watcherSpy } from './helpers.js';
import { until } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';

const servers = testServers();
const pool = new ClientPool();
const root = namespace('zkens');
const proxies: TcpProxy[] = [];
let addresses: string[];
// Other files kill leaders too: one file at a time.
useEnsembleForFaults();
const leaderKills = ensembleLeaderKills();

beforeAll(async () => {
  addresses = servers.zkEnsemble.split(',');
  expect(addresses).toHaveLength(3);
  await waitEnsembleHealthy();
  const admin = await ZooKeeperClient.connect({ connectString: servers.zkEnsemble });
  await mkdirp(admin, root);
  await admin.close();
}, 16 * 60_000);

/**
 * A write sent during a leader election: a connection loss means it may or
 * may not have landed, so it is sent again once the client has reconnected;
 * `landed` is the error the repeat gets when the first one did land.
 */
async function acrossElection(write: () => Promise<unknown>, landed?: ErrorCode): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await write();
      return;
    } catch (error) {
      if (attempt > 1 && landed !== undefined && isCode(error, landed)) return;
      if (!(error instanceof ConnectionLossError) || attempt >= 20) throw error;
    }
  }
}

afterEach(async () => {
  for (const p of proxies.splice(0)) await p.close();
  await pool.closeAll();
  await waitEnsembleHealthy();
});

afterAll(async () => {
  const admin = await ZooKeeperClient.connect({ connectString: servers.zkEnsemble });
  await rmrf(admin, root);
  await admin.close();
});

function recordStates(zk: ZooKeeperClient): ClientState[] {
  const states: ClientState[] = [];
  zk.on('state', (s) => states.push(s));
  return states;
}

describe('SIGKILL of the ensemble leader', () => {
  it('a client of the leader resumes its session on a survivor, keeps its nodes and gets the events it missed', async () => {
    const leader = await ensembleLeader();
    const leaderAddress = addresses[leader - 1] as string;
    const followerAddresses = addresses.filter((_, i) => i !== leader - 1);
    // The client reaches the followers only through proxies the test holds
    // closed during the switch, so the second client's changes happen while
    // it is certainly disconnected. Connect-string order makes it start on the leader.
    for (const f of followerAddresses) proxies.push(await TcpProxy.to(f));
    const zk = await pool.connect({
      connectString: [leaderAddress, ...proxies.map((p) => p.address)].join(','),
      sessionTimeoutMs: 10_000,
    });
    const states = recordStates(zk);
    const session = zk.sessionId;
    const base = `${root}/leader-${session.toString(16)}`;
    // The observer talks to a follower directly.
    const observer = await pool.connect({ connectString: followerAddresses.join(','), sessionTimeoutMs: 10_000 });

    await zk.create(base);
    const e1 = await zk.create(`${base}/e1`, 'one', { mode: 'ephemeral' });
    const e2 = await zk.create(`${base}/lock-`, null, { mode: 'ephemeral_sequential' });
    await zk.create(`${base}/data`, 'v0');
    const dataWatch = watcherSpy<WatchEvent>();
    const existWatch = watcherSpy<WatchEvent>();
    const childWatch = watcherSpy<WatchEvent>();
    const deleteWatch = watcherSpy<WatchEvent>();
    await zk.getData(`${base}/data`, { watch: dataWatch.fn });
    expect(await zk.exists(`${base}/later`, { watch: existWatch.fn })).toBeNull();
    await zk.getChildren(`${base}`, { watch: childWatch.fn });
    await zk.create(`${base}/doomed`);
    await zk.exists(`${base}/doomed`, { watch: deleteWatch.fn });

    for (const p of proxies) p.blackhole();
    expect(await leaderKills.kill()).toBe(leader);
    await until(() => zk.state === 'suspended', 'the client to lose the leader');

    // While the client is away, another client changes every watched node.
    // The followers drop their clients while they elect a new leader: the
    // observer's writes ride that out (each is safe to send again).
    await acrossElection(() => observer.setData(`${base}/data`, 'v1'));
    await acrossElection(() => observer.create(`${base}/later`), 'ZK_NODEEXISTS');
    await acrossElection(() => observer.delete(`${base}/doomed`), 'ZK_NONODE');
    expect(zk.state).toBe('suspended');
    expect(dataWatch.events).toEqual([]);

    for (const p of proxies) p.resume();
    await until(() => zk.state === 'connected', 'the client to resume on a survivor', zk.sessionTimeoutMs);
    expect(zk.sessionId).toBe(session);
    expect(states).toEqual(['suspended', 'connected']);

    // The re-armed watches (setWatches with the last zxid seen) fire for the missed changes.
    expect(await dataWatch.next).toEqual({ type: 'dataChanged', path: `${base}/data` });
    expect(await existWatch.next).toEqual({ type: 'created', path: `${base}/later` });
    expect(await childWatch.next).toEqual({ type: 'childrenChanged', path: base });
    expect(await deleteWatch.next).toEqual({ type: 'deleted', path: `${base}/doomed` });

    // The ephemeral nodes are still there and still this session's, seen by the other client.
    await observer.sync(base);
    expect((await observer.exists(e1.path))?.ephemeralOwner).toBe(session);
    expect((await observer.exists(e2.path))?.ephemeralOwner).toBe(session);
    // czxid keeps rising across the failover (the new epoch is in its high bits).
    const after = await zk.create(`${base}/after`, null, { mode: 'ephemeral' });
    expect(after.stat.czxid >> 32n).toBeGreaterThan(e1.stat.czxid >> 32n);
    expect(after.stat.czxid).toBeGreaterThan(e2.stat.czxid);

    // Each watch fired once.
    await zk.sync(base);
    expect([dataWatch, existWatch, childWatch, deleteWatch].map((w) => w.events.length)).toEqual([1, 1, 1, 1]);

    // Closing still removes the ephemeral nodes at once.
    await zk.close();
    await observer.sync(base);
    expect(await observer.exists(e1.path)).toBeNull();
  });

  it('a client of a follower is dropped too and resumes its session', async () => {
    const leader = await ensembleLeader();
    const followers = addresses.filter((_, i) => i !== leader - 1);
    const zk = await pool.connect({ connectString: [...followers, addresses[leader - 1]].join(','), sessionTimeoutMs: 10_000 });
    const states = recordStates(zk);
    const session = zk.sessionId;
    const node = `${root}/follower-${session.toString(16)}`;
    await zk.create(node, null, { mode: 'ephemeral' });
    const watch = watcherSpy<WatchEvent>();
    await zk.getData(node, { watch: watch.fn });

    await leaderKills.kill();
    await until(() => states.includes('suspended') && zk.state === 'connected', 'the client to be dropped and resume', 30_000);
    expect(zk.sessionId).toBe(session);
    expect(states.slice(0, 2)).toEqual(['suspended', 'connected']);

    const observer = await pool.connect({ connectString: followers.join(','), sessionTimeoutMs: 10_000 });
    await observer.sync(node);
    expect((await observer.exists(node))?.ephemeralOwner).toBe(session);
    await observer.setData(node, 'after failover');
    expect(await watch.next).toEqual({ type: 'dataChanged', path: node });
  });
});
