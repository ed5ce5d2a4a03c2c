// fencekeeper/etcd refuses bad input with InvalidArgumentError before any
// request: the client here records every call, and none may happen.
import { describe, expect, it } from 'vitest';
import type { EtcdClient } from '../../src/sources/etcd/client.js';
import { acquireLock, campaign, etcdSession, etcdSource, lockStatus, observeLeader, tryAcquireLock } from '../../src/sources/etcd/index.js';
import { prefixEnd, queuePrefix, queueRequests } from '../../src/sources/etcd/queue.js';
import { checkName } from '../../src/sources/etcd/input.js';
import { UsageError } from '../../src/cli/args.js';
import { ETCD_SERVICE } from '../../src/cli/services/etcd.js';
import { InvalidArgumentError } from '../../src/errors.js';

function recordingClient(): { client: EtcdClient; calls: string[] } {
  const calls: string[] = [];
  const refuse = (what: string) => (): never => {
    calls.push(what);
    throw new Error(`${what} called`);
  };
  const client = {
    kv: { range: refuse('range'), txn: refuse('txn'), deleteRange: refuse('deleteRange') },
    leaseClient: { leaseGrant: refuse('leaseGrant'), leaseRevoke: refuse('leaseRevoke'), leaseKeepAlive: refuse('leaseKeepAlive') },
    watchClient: { watch: refuse('watch') },
  } as unknown as EtcdClient;
  return { client, calls };
}

const BAD_NAMES: unknown[] = ['', '/', '/a', 'a/', 'a//b', 'a/./b', '.', '..', 'a/.', 'a/..', '../a', 'a#b', 'a\nb', 'x'.repeat(1025), 'a/\ud800', '\udc00', 'b\udc00\ud800', 42, null, undefined];

describe('etcd source input', () => {
  it.each(BAD_NAMES.map((n) => [n]))('refuses the name %j before any request', async (name) => {
    const { client, calls } = recordingClient();
    await expect(acquireLock(client, name as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(tryAcquireLock(client, name as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(campaign(client, name as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(lockStatus(client, name as string)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => observeLeader(client, name as string)).toThrow(InvalidArgumentError);
    expect(calls).toEqual([]);
  });

  it.each([
    ['a non-object', 'soon'],
    ['a negative timeout', { timeoutMs: -1 }],
    ['a NaN timeout', { timeoutMs: Number.NaN }],
    ['a signal that is not one', { signal: 'stop' }],
    ['an owner that is not a string', { owner: 7 }],
    ['a negative margin', { safetyMarginMs: -5 }],
    ['a margin past two thirds of the TTL', { safetyMarginMs: 7000 }],
  ])('acquireLock refuses %s before any request', async (_what, options) => {
    const { client, calls } = recordingClient();
    await expect(acquireLock(client, 'jobs/a', options as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(calls).toEqual([]);
  });

  it('tryAcquireLock takes no timeout; campaign checks its id', async () => {
    const { client, calls } = recordingClient();
    await expect(tryAcquireLock(client, 'jobs/a', { timeoutMs: 10 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(campaign(client, 'primary', { id: 3 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(calls).toEqual([]);
  });

  it('an already aborted signal rejects with its reason before any request', async () => {
    const { client, calls } = recordingClient();
    const controller = new AbortController();
    const reason = new Error('no');
    controller.abort(reason);
    await expect(acquireLock(client, 'jobs/a', { signal: controller.signal })).rejects.toBe(reason);
    expect(calls).toEqual([]);
  });

  it('refuses what is not an etcd3 client, a namespace of one, and bad session TTLs', () => {
    for (const bad of [null, undefined, {}, 'localhost:2379', { kv: {}, leaseClient: {}, watch: () => null }]) {
      expect(() => etcdSource(bad as unknown as EtcdClient)).toThrow(InvalidArgumentError);
    }
    const { client } = recordingClient();
    const namespaced = Object.assign(Object.create(client) as object, { prefix: Buffer.from('app/'), kv: client.kv, leaseClient: client.leaseClient, watchClient: client.watchClient });
    expect(() => etcdSource(namespaced as EtcdClient)).toThrow(/namespace/);
    for (const ttlSeconds of [0, -1, 1.5, Number.NaN, 86_401]) {
      expect(() => etcdSession(recordingClient().client, { ttlSeconds })).toThrow(InvalidArgumentError);
    }
    // One lease per client: a second TTL for the same open session is refused.
    etcdSession(client, { ttlSeconds: 5 });
    expect(() => etcdSession(client, { ttlSeconds: 6 })).toThrow(InvalidArgumentError);
    expect(etcdSession(client)).toBe(etcdSession(client, { ttlSeconds: 5 }));
  });

  it('one lock\'s key range covers no other lock\'s keys ("a" and "a/b")', () => {
    const a = queuePrefix('fencekeeper/locks/', 'a');
    const ab = queuePrefix('fencekeeper/locks/', 'a/b');
    const end = prefixEnd(a).toString();
    const inRange = (key: string): boolean => key >= a && key < end;
    expect(inRange(`${a}0123`)).toBe(true);
    expect(inRange(`${ab}0123`)).toBe(false);
    expect(prefixEnd('ab').toString()).toBe('ac');
  });

  it('a queue\'s shared request parts are its own, also for queues the cache let go of', () => {
    const names = Array.from({ length: 600 }, (_, i) => `cache/${i}`);
    const first = names.map((name) => queueRequests('fencekeeper/locks/', name));
    for (const [i, name] of names.entries()) {
      for (const [root, requests] of [['fencekeeper/locks/', first[i]!], ['fencekeeper/locks/', queueRequests('fencekeeper/locks/', name)], ['fencekeeper/elections/', queueRequests('fencekeeper/elections/', name)]] as const) {
        const prefix = queuePrefix(root, name);
        expect(requests.text).toBe(prefix);
        expect(requests.prefix.toString()).toBe(prefix);
        expect(requests.end.equals(prefixEnd(prefix))).toBe(true);
        expect(requests.empty).toMatchObject({ key: requests.prefix, range_end: requests.end, target: 'Create', result: 'Equal', create_revision: '0' });
        expect(requests.newest).toMatchObject({ key: requests.prefix, range_end: requests.end, limit: 2, keys_only: true });
      }
    }
    // A queue joined lately is served from the cache.
    expect(queueRequests('fencekeeper/locks/', names[599]!)).toBe(queueRequests('fencekeeper/locks/', names[599]!));
  });

  it('the CLI\'s copy of the name rule (it loads no adapter before connecting) agrees with the entry\'s', () => {
    const address = ETCD_SERVICE.address('127.0.0.1:2379', { origin: '--lock-service', fromCommandLine: true, values: {}, env: {} });
    for (const name of [...BAD_NAMES.filter((n): n is string => typeof n === 'string'), 'jobs/reindex', 'a', 'a.b/c-d_e', 'x'.repeat(1024), 'ünïcode/ok', 'jobs/\ud83d\udd12', '.x/..y', '...', 'a../.b', 'a/b/c']) {
      let entry = true;
      try {
        checkName(name);
      } catch {
        entry = false;
      }
      let cli = true;
      try {
        address.checkName('lock', name);
      } catch (error) {
        expect(error).toBeInstanceOf(UsageError);
        cli = false;
      }
      expect(cli, JSON.stringify(name)).toBe(entry);
    }
  });
});
