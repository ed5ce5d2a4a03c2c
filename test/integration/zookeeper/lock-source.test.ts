// ZooKeeper as a LockSource, used by code that knows only the core's
// contract (as the CLI, the demo and a scoped withLock will be): locks,
// try-locks, elections and the queue's status through the source, and the
// grants are the recipes' own.
import { afterEach, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError } from '../../../src/errors.js';
import type { LockSource } from '../../../src/lock-source.js';
import type { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { LOCKS, queueChildren } from './lock-helpers.js';
import { until } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { takeTurns } from '../../helpers/sources.js';

const clients = new ClientPool();
const server = (): string => testServers().zkStandalone;
afterEach(() => clients.closeAll());

/** Source-generic code: n turns each for every source, strictly one holder at a time; the tokens in grant order. */
describe('zookeeperSource', () => {
  it('names its kind and its session, and refuses anything but a client', async () => {
    const zk = await clients.connect(server());
    const source = zookeeperSource(zk);
    expect(source.kind).toBe('zookeeper');
    expect(source.description).toContain(`0x${zk.sessionId.toString(16)}`);
    expect(Object.isFrozen(source)).toBe(true);
    for (const bad of [null, undefined, {}, 'localhost:2181']) {
      expect(() => zookeeperSource(bad as unknown as ZooKeeperClient)).toThrow(InvalidArgumentError);
    }
  });

  it('code that takes any LockSource: mutual exclusion and increasing tokens across four sessions', async () => {
    const name = uniqueLockName('source');
    const zks = await clients.many(4, server());
    const sources = zks.map((zk) => zookeeperSource(zk));
    const tokens = await takeTurns(sources, name, 5);
    expect(tokens).toHaveLength(20);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    expect(await queueChildren(zks[0]!, `${LOCKS}/${name}`)).toEqual([]);
  });

  it('tryAcquireLock, lockStatus and campaign through the source are the recipes\' own', async () => {
    const name = uniqueLockName('sourcestatus');
    const [a, b] = (await clients.many(2, server())).map((zk) => zookeeperSource(zk));
    const lock = await a!.acquireLock(name, { owner: 'alpha' });
    expect(lock.path.startsWith(`${LOCKS}/${name}/`)).toBe(true);
    expect(await b!.tryAcquireLock(name)).toBeNull();
    const waiting = b!.acquireLock(name, { owner: 'beta' });
    await until(async () => (await a!.lockStatus(name)).waiters.length === 1, 'beta queued');
    const status = await b!.lockStatus(name);
    expect(status.holder).toMatchObject({ token: lock.token, owner: 'alpha', path: lock.path });
    expect(status.waiters.map((w) => w.owner)).toEqual(['beta']);
    await lock.release();
    expect((lock.signal.reason as LockLostError).reason).toBe('released');
    const second = await waiting;
    expect(second.token > lock.token).toBe(true);
    await second.release();

    const election = uniqueLockName('sourceelect');
    const leader = await a!.campaign(election, { id: 'alpha' });
    expect(leader.id).toBe('alpha');
    expect(leader.held).toBe(true);
    await leader.resign();
    expect(leader.held).toBe(false);
  });
});
