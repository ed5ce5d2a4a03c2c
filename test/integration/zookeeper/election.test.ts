// Leader election on a real standalone ZooKeeper: the first candidate is
// elected, successive leaders carry larger epochs, resign hands over,
// observeLeader follows, and a leader cut off from ZooKeeper loses its signal
// by the send time of its last acknowledged request, before anyone else is
// elected.
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import { campaign, observeLeader, type ZooKeeperLeadership as Leadership } from '../../../src/sources/zookeeper/recipes/election.js';
import { LockLostError } from '../../../src/errors.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ELECTIONS, lastReplyHeldBack, queueChildren } from './lock-helpers.js';
import { until } from '../../helpers/wait.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';

const file = new StandaloneFile();
const { server, clients } = file;

describe('campaign', () => {
  it('the first candidate is elected; resign hands over to the next, with a larger epoch', async () => {
    const name = uniqueLockName('elect');
    const [a, b, c] = await clients.many(3, server);
    const first = await campaign(a!, name, { id: 'a' });
    expect(first.held).toBe(true);
    expect(first.id).toBe('a');
    expect(first.name).toBe(name);

    const elected: Leadership[] = [];
    const second = campaign(b!, name, { id: 'b' }).then((l) => (elected.push(l), l));
    await until(async () => (await queueChildren(file.admin, `${ELECTIONS}/${name}`)).length === 2, 'b queued');
    const third = campaign(c!, name, { id: 'c' }).then((l) => (elected.push(l), l));
    await until(async () => (await queueChildren(file.admin, `${ELECTIONS}/${name}`)).length === 3, 'three candidates');
    expect(elected).toEqual([]);

    const resigned = first.resign();
    expect(first.signal.aborted).toBe(true);
    expect((first.signal.reason as LockLostError).reason).toBe('released');
    expect(first.held).toBe(false);
    expect(first.resign()).toBe(resigned);
    await resigned;
    const b2 = await second;
    expect(b2.id).toBe('b');
    expect(b2.epoch > first.epoch).toBe(true);
    expect(elected.map((l) => l.id)).toEqual(['b']);
    await b2.resign();
    const c3 = await third;
    expect(c3.epoch > b2.epoch).toBe(true);
    await c3.resign();
    expect(await queueChildren(file.admin, `${ELECTIONS}/${name}`)).toEqual([]);
  });

  it('a candidate that stops campaigning leaves no node and does not break the chain', async () => {
    const name = uniqueLockName('electabort');
    const [a, b, c] = await clients.many(3, server);
    const leader = await campaign(a!, name, { id: 'a' });
    const ac = new AbortController();
    const quitter = campaign(b!, name, { id: 'b', signal: ac.signal });
    await until(async () => (await queueChildren(file.admin, `${ELECTIONS}/${name}`)).length === 2, 'b queued');
    const patient = campaign(c!, name, { id: 'c' });
    await until(async () => (await queueChildren(file.admin, `${ELECTIONS}/${name}`)).length === 3, 'three candidates');
    ac.abort();
    await expect(quitter).rejects.toMatchObject({ name: 'AbortError' });
    expect(await queueChildren(file.admin, `${ELECTIONS}/${name}`)).toHaveLength(2);
    await leader.resign();
    const next = await patient;
    expect(next.id).toBe('c');
    await next.resign();
  });
});

describe('observeLeader', () => {
  it('reports id and epoch and follows each change of leader', async () => {
    const name = uniqueLockName('observeleader');
    const [a, b] = await clients.many(2, server);
    const observer = observeLeader(file.admin, name);
    try {
      expect(await observer.current()).toBeNull();
      let changes = 0;
      observer.onChange(() => changes++);
      const la = await campaign(a!, name, { id: 'alpha' });
      await until(async () => (await observer.current())?.id === 'alpha', 'observer sees alpha');
      expect(await observer.current()).toEqual({ id: 'alpha', epoch: la.epoch, path: la.path });
      expect(changes).toBeGreaterThan(0);
      const pb = campaign(b!, name, { id: 'beta' });
      await until(async () => (await queueChildren(file.admin, `${ELECTIONS}/${name}`)).length === 2, 'beta queued');
      expect((await observer.current())?.id).toBe('alpha'); // a new candidate is not a new leader
      await la.resign();
      const lb = await pb;
      await until(async () => (await observer.current())?.id === 'beta', 'observer sees beta');
      const seen = await observer.current();
      expect(seen!.epoch).toBe(lb.epoch);
      expect(seen!.epoch > la.epoch).toBe(true);
      await lb.resign();
      await until(async () => (await observer.current()) === null, 'observer sees no leader');
    } finally {
      observer.close();
    }
  });
});

describe('a leader cut off from ZooKeeper', () => {
  // As the lock's step-down test: the reply to the leader's last
  // acknowledged request is held back for longer than the slack allowed for
  // a late timer, and the margin is larger than that slack too.
  const sessionTimeoutMs = 6000;
  const marginMs = 2000;
  const holdMs = 2500;
  const slackMs = 1500;

  it('loses its signal (deadline) at the send time of its last acknowledged request + timeout - margin, before the next candidate is elected', async () => {
    const name = uniqueLockName('electcut');
    const proxy = await TcpProxy.to(server);
    try {
      const leaderZk = await clients.connect(proxy.address, sessionTimeoutMs);
      expect(leaderZk.sessionTimeoutMs).toBe(sessionTimeoutMs);
      const other = await clients.connect(server);
      const leader = await campaign(leaderZk, name, { id: 'cut', safetyMarginMs: marginMs });
      const order: string[] = [];
      let abortAt: number | null = null;
      leader.signal.addEventListener('abort', () => {
        abortAt = performance.now();
        order.push('old leader stepped down');
      });
      const next = campaign(other, name, { id: 'next' }).then((l) => (order.push('next elected'), l));
      await until(async () => (await queueChildren(file.admin, `${ELECTIONS}/${name}`)).length === 2, 'next queued');
      const reply = await lastReplyHeldBack(proxy, leaderZk, holdMs);
      expect(reply.deliveredAt - reply.forwardedBy).toBeGreaterThan(slackMs);
      expect(leader.held).toBe(true);
      const successor = await next;
      expect(order).toEqual(['old leader stepped down', 'next elected']);
      expect((leader.signal.reason as LockLostError).reason).toBe('deadline');
      expect(leader.held).toBe(false);
      expect(abortAt).not.toBeNull();
      const at = abortAt as unknown as number;
      expect(at).toBeGreaterThanOrEqual(reply.sentAfter + sessionTimeoutMs - marginMs);
      expect(at).toBeLessThanOrEqual(reply.forwardedBy + sessionTimeoutMs - marginMs + slackMs);
      expect(successor.epoch > leader.epoch).toBe(true);
      await successor.resign();
    } finally {
      await proxy.close();
    }
  });
});
