// A join whose create lost its reply is "uncertain": in an ensemble the lost
// create can commit after the join listed, adopted nothing and created again,
// leaving a second node of ours that would block the lock once ours is gone.
// These tests plant such a stray (same guid, same session) on a real server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/index.js';
import { LOCKS_ROOT } from '../../../src/sources/zookeeper/recipes/lock.js';
import { leaveQueue, withoutStrays, type QueueNode } from '../../../src/sources/zookeeper/recipes/queue.js';
import { queueParent } from '../../../src/sources/zookeeper/recipes/queue-order.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';

describe('stray nodes of an uncertain join', () => {
  let zk: ZooKeeperClient;
  beforeAll(async () => {
    zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 4000 });
  });
  afterAll(async () => {
    await zk.close();
  });

  async function plant(uncertain: boolean): Promise<{ node: QueueNode; stray: string; parent: string }> {
    const parent = queueParent(LOCKS_ROOT, uniqueLockName('strays'));
    let path = '';
    for (const segment of parent.split('/').slice(1)) {
      path += `/${segment}`;
      await zk.create(path).catch(() => undefined);
    }
    const guid = 'feedfacecafe0001';
    const ours = await zk.create(`${parent}/${guid}-lock-`, null, { mode: 'ephemeral_sequential' });
    const stray = await zk.create(`${parent}/${guid}-lock-`, null, { mode: 'ephemeral_sequential' });
    const child = ours.path.slice(parent.length + 1);
    return { node: { path: ours.path, parent, child, token: ours.stat.czxid, guid, uncertain }, stray: stray.path.slice(parent.length + 1), parent };
  }

  it('leaving removes every node carrying the guid, so nothing of ours blocks the lock', async () => {
    const { node, parent } = await plant(true);
    expect(await zk.getChildren(parent)).toHaveLength(2);
    await leaveQueue(zk, node);
    expect(await zk.getChildren(parent)).toEqual([]);
  });

  it('waiting ignores (and deletes) a stray instead of queueing behind it', async () => {
    const { node, stray, parent } = await plant(true);
    const listing = await zk.getChildren(parent);
    expect(withoutStrays(zk, node, listing)).toEqual([node.child]);
    for (let i = 0; i < 100 && (await zk.getChildren(parent)).includes(stray); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await zk.getChildren(parent)).toEqual([node.child]);
    await leaveQueue(zk, node);
  });

  it('a certain join pays nothing: its listing is untouched and leaving deletes only its node', async () => {
    const { node, stray, parent } = await plant(false);
    const listing = await zk.getChildren(parent);
    expect(withoutStrays(zk, node, listing)).toBe(listing);
    await leaveQueue(zk, node);
    expect(await zk.getChildren(parent)).toEqual([stray]);
    await zk.delete(`${parent}/${stray}`);
  });
});
