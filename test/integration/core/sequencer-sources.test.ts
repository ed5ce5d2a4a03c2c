// Every source's grants carry a sequencer: the kind of grant, its name, the
// source's stable identity and the token. The identity is the same from
// every client of one source, survives a reconnect (a new client), differs
// between sources, and is made once, race-free, by the first clients of a
// fresh source: ZooKeeper (a UUID in a znode, here under fresh chroots),
// etcd (the cluster id), Redis (a UUID in a key, here in spare databases
// nobody else uses) and Redlock (a UUID on every node, the majority's).
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { etcdSession, etcdSource } from '../../../src/sources/etcd/index.js';
import { acquireLock as redisAcquire, redisSource } from '../../../src/sources/redis/index.js';
import { SOURCE_ID_KEY } from '../../../src/sources/redis/source-id.js';
import type { Leadership, Lock } from '../../../src/lock.js';
import { READ_ACL_UNSAFE } from '../../../src/sources/zookeeper/protocol.js';
import { SOURCE_ID_PATH } from '../../../src/sources/zookeeper/recipes/source-id.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { testServers } from '../../helpers/servers.js';
import { SOURCES } from '../../helpers/sources.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { holdRedisFaults, hostPort } from '../redis/helpers.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const zkClients = new ClientPool();
const redisClients: Redis[] = [];
afterEach(async () => {
  await zkClients.closeAll();
  for (const c of redisClients.splice(0)) c.disconnect();
});

function redis(url: string, db = 0): Redis {
  const client = new Redis({ ...hostPort(url), db, retryStrategy: () => 50 });
  client.on('error', () => {});
  redisClients.push(client);
  return client;
}

function expectSequencer(grant: Lock | Leadership, kind: 'lock' | 'election', sourceKind: string): void {
  const token = 'token' in grant ? grant.token : grant.epoch;
  expect(grant.sequencer).toEqual({ kind, name: grant.name, source: { kind: sourceKind, id: expect.any(String) }, token });
  expect(Object.isFrozen(grant.sequencer)).toBe(true);
  // Made once: the same object every time it is read.
  expect(grant.sequencer).toBe(grant.sequencer);
}

// Redis and Redlock must stay up for the whole file: wait out the files that
// kill or pause their nodes (the Redis set's fault turn).
let giveBackRedis: (() => Promise<void>) | undefined;
beforeAll(async () => {
  giveBackRedis = await holdRedisFaults();
}, 660_000);
afterAll(async () => giveBackRedis?.(), 120_000);

describe.each(SOURCES)('$kind: sequencers', (under) => {
  it('two clients, and a new client after the first closed, see the same source id; locks and elections carry it', async () => {
    const first = await under.open();
    const second = await under.open();
    let closedFirst = false;
    try {
      const name = uniqueLockName('seq');
      const a = await first.source.acquireLock(name);
      expectSequencer(a, 'lock', under.kind);
      await a.release();
      const b = await second.source.acquireLock(name);
      expectSequencer(b, 'lock', under.kind);
      expect(b.sequencer.source).toEqual(a.sequencer.source);
      expect(b.sequencer.token > a.sequencer.token).toBe(true);
      await b.release();
      const tried = await second.source.tryAcquireLock(`${name}-try`);
      expect(tried?.sequencer.source).toEqual(a.sequencer.source);
      await tried?.release();
      if (second.source.campaign !== undefined) {
        const leader = await second.source.campaign(name);
        expectSequencer(leader, 'election', under.kind);
        expect(leader.sequencer.source).toEqual(a.sequencer.source);
        await leader.resign();
      }
      await first.close();
      closedFirst = true;
      const third = await under.open();
      try {
        const c = await third.source.acquireLock(name);
        expect(c.sequencer.source).toEqual(a.sequencer.source);
        await c.release();
      } finally {
        await third.close();
      }
    } finally {
      if (!closedFirst) await first.close();
      await second.close();
    }
  });
});

describe('ZooKeeper: the ensemble id znode', () => {
  it('is a UUID in a world-read-only znode: nobody can change it', async () => {
    const { zkStandalone } = testServers();
    const admin = await zkClients.connect(zkStandalone);
    const lock = await zookeeperSource(admin).acquireLock(uniqueLockName('zkid'));
    await lock.release();
    const { data } = await admin.getData(SOURCE_ID_PATH);
    expect(new TextDecoder().decode(data)).toBe(lock.sequencer.source.id);
    expect(lock.sequencer.source.id).toMatch(UUID);
    expect((await admin.getACL(SOURCE_ID_PATH)).acl).toEqual(READ_ACL_UNSAFE);
    // Nobody can change it.
    await expect(admin.setData(SOURCE_ID_PATH, '00000000-0000-4000-8000-000000000000')).rejects.toMatchObject({ code: 'ZK_NOAUTH' });
  });

  it('the first clients of a fresh ensemble race to make it and all read the same one', async () => {
    const { zkStandalone } = testServers();
    const admin = await zkClients.connect(zkStandalone);
    const chroot = `/fencekeeper-test/${uniqueId('chroot')}`;
    await admin.create('/fencekeeper-test', null).catch(() => undefined);
    await admin.create(chroot, null);
    const racers = await zkClients.many(4, `${zkStandalone}${chroot}`);
    // All four ask in the same turn: several creates race, one wins.
    const locks = await Promise.all(racers.map((zk, i) => zookeeperSource(zk).acquireLock(`race-${i}`)));
    const ids = new Set(locks.map((l) => l.sequencer.source.id));
    expect(ids.size).toBe(1);
    await Promise.all(locks.map((l) => l.release()));
    const { data } = await admin.getData(`${chroot}${SOURCE_ID_PATH}`);
    expect(new TextDecoder().decode(data)).toBe([...ids][0]);
    // Another chroot's locks are other locks: another source.
    const outside = await zookeeperSource(admin).acquireLock(uniqueLockName('outside'));
    expect(ids.has(outside.sequencer.source.id)).toBe(false);
    await outside.release();
  });
});

describe('etcd: the cluster id', () => {
  it('is the same from every member of a cluster and differs between clusters', async () => {
    const { etcd: single, etcdCluster } = testServers();
    const clients = [new Etcd3({ hosts: new URL(single).host }), ...etcdCluster.map((u) => new Etcd3({ hosts: new URL(u).host }))];
    try {
      const ids: string[] = [];
      for (const client of clients) {
        const lock = await etcdSource(client, { ttlSeconds: 2 }).acquireLock(uniqueLockName('etcdid'));
        ids.push(lock.sequencer.source.id);
        await lock.release();
      }
      expect(ids[0]).toMatch(/^[1-9][0-9]*$/);
      expect(new Set(ids.slice(1)).size).toBe(1);
      expect(ids[1]).not.toBe(ids[0]);
    } finally {
      for (const client of clients) {
        await etcdSession(client).close();
        client.close();
      }
    }
  });
});

// Databases 11 and 12 of the shared servers: spare keyspaces this file owns, so the
// identity key can be removed to stand for a fresh server without touching anyone's.
const SINGLE_DB = 11;
const REDLOCK_DB = 12;

describe('Redis: the identity key', () => {
  it('first clients of a fresh server race on SET NX and read the same UUID; it is a plain persistent key', async () => {
    const url = testServers().redis;
    await redis(url, SINGLE_DB).del(SOURCE_ID_KEY);
    const racers = [0, 1, 2, 3].map(() => redis(url, SINGLE_DB));
    const locks = await Promise.all(racers.map((c, i) => redisAcquire(c, uniqueLockName(`race${i}`))));
    const ids = new Set(locks.map((l) => l.sequencer.source.id));
    expect(ids.size).toBe(1);
    await Promise.all(locks.map((l) => l.release()));
    const check = redis(url, SINGLE_DB);
    expect(await check.get(SOURCE_ID_KEY)).toBe([...ids][0]);
    expect(await check.ttl(SOURCE_ID_KEY)).toBe(-1);
    // Database 0 of the same server is another keyspace, so another source.
    const other = await redisSource(redis(url)).acquireLock(uniqueLockName('db0'));
    expect(ids.has(other.sequencer.source.id)).toBe(false);
    await other.release();
  });
});

describe('Redlock: the identity on every node', () => {
  const nodes = (): Redis[] => testServers().redlock.map((u) => redis(u, REDLOCK_DB));
  const clear = async (): Promise<void> => {
    await Promise.all(nodes().map((n) => n.del(SOURCE_ID_KEY)));
  };
  const ask = async (): Promise<string> => {
    const lock = await redisSource(nodes()).acquireLock(uniqueLockName('rl'));
    await lock.release();
    return lock.sequencer.source.id;
  };

  it('four first clients of fresh nodes at once: all end on the same id, held by a majority of the nodes', async () => {
    await clear();
    const ids = await Promise.all([ask(), ask(), ask(), ask()]);
    expect(new Set(ids).size).toBe(1);
    const stored = await Promise.all(nodes().map((n) => n.get(SOURCE_ID_KEY)));
    expect(stored.filter((v) => v === ids[0]).length).toBeGreaterThanOrEqual(3);
  });

  it('a split with no majority (three values on five nodes) converges on the smallest', async () => {
    await clear();
    const [a, b, c] = ['11111111-1111-4111-8111-111111111111', '22222222-2222-4222-8222-222222222222', '33333333-3333-4333-8333-333333333333'];
    const split = [b, a, c, b, a];
    await Promise.all(nodes().map((n, i) => n.set(SOURCE_ID_KEY, split[i] as string)));
    expect(await ask()).toBe(a);
    expect(await Promise.all(nodes().map((n) => n.get(SOURCE_ID_KEY)))).toEqual([a, a, a, a, a]);
  });

  it('a node replaced by an empty one keeps the identity and is given it back; a lone different value is outvoted', async () => {
    await clear();
    const id = await ask();
    const [n0, n1] = nodes() as [Redis, Redis];
    await n0.del(SOURCE_ID_KEY); // the replaced node
    await n1.set(SOURCE_ID_KEY, '99999999-9999-4999-8999-999999999999');
    expect(await ask()).toBe(id);
    expect(await n0.get(SOURCE_ID_KEY)).toBe(id);
  });
});
