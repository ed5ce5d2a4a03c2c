// Leader election over etcd: one leader at a time, the next one elected
// when it resigns, epochs that only grow (each the create revision of the
// leader's key), and an observer that answers from a cache its watch keeps
// fresh.
import { describe, expect, it } from 'vitest';
import { campaign, etcdSource, observeLeader } from '../../../src/sources/etcd/index.js';
import { ELECTIONS_ROOT, prefixEnd, queuePrefix } from '../../../src/sources/etcd/queue.js';
import type { LockLostError } from '../../../src/errors.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { EtcdPool, counting } from './helpers.js';

const pool = new EtcdPool();

describe('etcd election', () => {
  it('elects one candidate at a time, in order, with growing epochs equal to the leader key\'s create revision', async () => {
    const [a, b, c] = pool.many(3);
    const name = uniqueLockName('etcd_election');
    const first = await campaign(a!, name, { id: 'a' });
    const second = campaign(b!, name, { id: 'b' });
    const prefix = queuePrefix(ELECTIONS_ROOT, name);
    const keys = async (): Promise<number> => (await a!.kv.range({ key: Buffer.from(prefix), range_end: prefixEnd(prefix) })).kvs.length;
    await until(async () => (await keys()) === 2, 'b to stand');
    const third = etcdSource(c!).campaign(name, { id: 'c' });
    await until(async () => (await keys()) === 3, 'c to stand');

    const [own] = (await a!.kv.range({ key: Buffer.from(first.key) })).kvs;
    expect(BigInt(own!.create_revision)).toBe(first.epoch);
    expect(first.id).toBe('a');
    expect(first.held).toBe(true);

    const resigned = first.resign();
    expect((first.signal.reason as LockLostError).reason).toBe('released');
    await resigned;
    const b2 = await within(second, 10_000, 'b elected');
    expect(b2.epoch > first.epoch).toBe(true);
    await b2.resign();
    const c3 = await within(third, 10_000, 'c elected');
    expect(c3.id).toBe('c');
    expect(c3.epoch > b2.epoch).toBe(true);
    await c3.resign();
  });

  it('observeLeader answers from its cache until the watch says the leader changed', async () => {
    const [a, b] = pool.many(2);
    const name = uniqueLockName('etcd_observe');
    const { client, counts } = counting(pool.client());
    const observer = observeLeader(client, name);
    let changes = 0;
    observer.onChange(() => changes++);
    expect(await observer.current()).toBeNull();
    const leader = await campaign(a!, name, { id: 'first' });
    await until(() => changes === 1, 'the observer told of the first leader');
    expect(await observer.current()).toEqual({ id: 'first', epoch: leader.epoch, key: leader.key });
    const reads = counts.range;
    expect(await observer.current()).toEqual({ id: 'first', epoch: leader.epoch, key: leader.key });
    expect(counts.range).toBe(reads); // from the cache

    const next = campaign(b!, name, { id: 'second' });
    await until(() => changes === 2, 'the observer told of the new candidate');
    await leader.resign();
    const second = await within(next, 10_000, 'the second leader');
    await until(async () => (await observer.current())?.id === 'second', 'the observer to see the second leader');
    expect((await observer.current())!.epoch).toBe(second.epoch);
    observer.close();
    await second.resign();
  });
});
