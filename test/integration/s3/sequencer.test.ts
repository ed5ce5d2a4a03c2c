// S3 keys bound to their lock, on the real S3 server, in both layouts: a key
// is bound by a fenced write of the guarding lock ({ bind }); from then on a
// sequencer of another lock, kind or source and a bare token are refused with
// SEQUENCER_MISMATCH (published on fence:refused) and change nothing (the
// object's bytes, metadata and ETag stay), even with a larger token; the
// guarding lock's larger token advances. A binding made between another
// writer's read and its conditional PUT stops that PUT (412, judged again,
// refused). Unbound keys, and keys written before sequencers existed, take
// bare tokens and sequencers alike.
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  CURRENT_LOCK, InvalidArgumentError, SequencerMismatchError, StaleTokenError, withLock,
  type FenceBinding, type Fencing,
} from '../../../src/index.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { collectGarbage, fencedDeleteObject, fencedGetObject, fencedPutObject, readFence, type ObjectLayout } from '../../../adapters/s3/index.js';
import { recordRefusals, testSource } from '../../helpers/sequencers.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { Gate, TestBucket, expectRejects, newClient, randomPrefix } from './helpers.js';

const testBucket = new TestBucket('seq');
const Bucket = testBucket.name;
beforeAll(() => testBucket.create());
afterAll(() => testBucket.remove());
const zkClients = new ClientPool();
afterEach(() => zkClients.closeAll());

const { SOURCE, guard, seq, intruders: intrudersOf } = testSource('c0ffee00-0000-4000-8000-000000000033');

describe.each(['in-place', 'pointer'] as ObjectLayout[])('bound S3 keys, %s', (layout) => {
  const options = { layout };
  const put = (Key: string, token: Fencing, Body: string, extra: { bind?: FenceBinding } = {}, client = newClient().client) =>
    fencedPutObject(client, { Bucket, Key, Body, token }, { ...options, ...extra });
  const text = async (Key: string): Promise<string | null> => {
    const got = await fencedGetObject(newClient().client, { Bucket, Key });
    return got === null ? null : got.Body!.transformToString();
  };

  it('an unbound key, and one written before sequencers existed, take bare tokens and sequencers of any lock', async () => {
    const Key = `${randomPrefix()}/open`;
    await put(Key, 5n, 'bare 5');
    await put(Key, seq('some/lock', 6n), 'seq 6');
    await put(Key, seq('other/lock', 7n, { kind: 'election' }), 'election 7');
    await put(Key, 8n, 'bare 8');
    expect(await readFence(newClient().client, { Bucket, Key })).toBe(8n);
    expect(await text(Key)).toBe('bare 8');
    // Written without the adapter at all: any fencing may take it over, as before.
    const Plain = `${randomPrefix()}/plain`;
    await testBucket.admin.send(new PutObjectCommand({ Bucket, Key: Plain, Body: 'plain' }));
    await put(Plain, seq('some/lock', 3n), 'fenced now');
    expect(await text(Plain)).toBe('fenced now');
  });

  it('a bound key refuses another lock, kind or source and a bare token, and changes nothing; its own lock advances', async () => {
    const Key = `${randomPrefix()}/bound`;
    const name = uniqueLockName('s3guard');
    await put(Key, 10n, 'before binding'); // a mark from before sequencers: kept
    await put(Key, seq(name, 11n), 'bound by 11', { bind: guard(name) });
    const before = await testBucket.raw(Key);
    const intruders = intrudersOf(name);
    const { published, stop } = recordRefusals();
    try {
      for (const [what, token] of intruders) {
        const client = newClient();
        const error = await expectRejects(put(Key, token, `by ${what}`, {}, client.client), SequencerMismatchError);
        expect(error.code, what).toBe('SEQUENCER_MISMATCH');
        expect(error.bound, what).toEqual(guard(name));
        expect(error.presented === null, what).toBe(typeof token === 'bigint');
        // Refused after the read: no PUT went out.
        expect(client.seen.filter((r) => r.method === 'PUT'), what).toEqual([]);
        await expectRejects(fencedDeleteObject(newClient().client, { Bucket, Key, token }, options), SequencerMismatchError);
      }
    } finally {
      stop();
    }
    const mine = published.filter((m) => m.resource.endsWith(Key));
    expect(mine.map((m) => [m.adapter, m.code, m.presented])).toEqual(
      intruders.flatMap(([, t]) => [['s3', 'SEQUENCER_MISMATCH', typeof t === 'bigint' ? t : t.token], ['s3', 'SEQUENCER_MISMATCH', typeof t === 'bigint' ? t : t.token]]),
    );
    expect(await testBucket.raw(Key)).toEqual(before);
    expect(await readFence(newClient().client, { Bucket, Key })).toBe(11n);
    expect(await text(Key)).toBe('bound by 11');
    // The guarding lock: a larger token advances (the binding carried along), a smaller one is stale as ever.
    await put(Key, seq(name, 12n), 'by 12');
    expect(await text(Key)).toBe('by 12');
    await expectRejects(put(Key, seq(name, 9n), 'by 9'), StaleTokenError);
    await expectRejects(put(Key, 13n, 'bare 13 after 12'), SequencerMismatchError);
    // A fenced delete of the guarding lock keeps the binding on the tombstone.
    await fencedDeleteObject(newClient().client, { Bucket, Key, token: seq(name, 14n) }, options);
    expect(await text(Key)).toBeNull();
    await expectRejects(put(Key, seq(`${name}-other`, 15n), 'over the tombstone'), SequencerMismatchError);
    await put(Key, seq(name, 15n), 'by 15');
    expect(await text(Key)).toBe('by 15');
  });

  it('a binding made between another writer\'s read and its PUT stops that PUT: 412, judged again, refused', async () => {
    const Key = `${randomPrefix()}/race`;
    const name = uniqueLockName('s3race');
    await put(Key, 1n, 'v1');
    const judged = new Gate();
    const resume = new Gate();
    const intruder = newClient();
    const writing = fencedPutObject(intruder.client, { Bucket, Key, Body: 'by the paused intruder', token: 50n }, {
      ...options,
      beforePut: async () => {
        judged.open();
        await resume.wait();
      },
    });
    await judged.wait(); // it read the key unbound and judged 50 fine
    await put(Key, seq(name, 2n), 'bound by 2', { bind: guard(name) });
    resume.open();
    await expectRejects(writing, SequencerMismatchError);
    // The race happened: its conditional PUT of the key was refused by the server, not skipped.
    const keyPuts = intruder.seen.filter((r) => r.method === 'PUT' && r.path === `/${Bucket}/${Key}`);
    expect(keyPuts.map((r) => r.status)).toEqual([412]);
    expect(await text(Key)).toBe('bound by 2');
  });

  it('the same client\'s cached fence carries the binding: another lock with the same token is still refused', async () => {
    const Key = `${randomPrefix()}/cache`;
    const name = uniqueLockName('s3cache');
    const { client } = newClient();
    await put(Key, seq(name, 20n), 'bound by 20', { bind: guard(name) }, client);
    await expectRejects(put(Key, seq(`${name}-other`, 20n), 'same number, other lock', {}, client), SequencerMismatchError);
    await put(Key, seq(name, 20n), 'again by 20', {}, client);
    expect(await text(Key)).toBe('again by 20');
  });

  it('bind needs a sequencer of the lock it binds to: refused before any request', async () => {
    const Key = `${randomPrefix()}/badbind`;
    const name = uniqueLockName('s3bad');
    for (const token of [5n, seq(`${name}-other`, 5n)] as Fencing[]) {
      const client = newClient();
      await expectRejects(put(Key, token, 'x', { bind: guard(name) }, client.client), InvalidArgumentError);
      expect(client.seen).toEqual([]);
    }
    await expectRejects(put(Key, seq(name, 5n), 'x', { bind: { kind: 'mutex', lock: name, source: SOURCE } as never }), InvalidArgumentError);
    expect(await testBucket.exists(Key)).toBe(false);
  });

  it('binding again to the same lock is a no-op; a write binding it to another lock is refused and changes nothing', async () => {
    const Key = `${randomPrefix()}/rebind`;
    const name = uniqueLockName('s3rebind');
    await put(Key, seq(name, 3n), 'v3', { bind: guard(name) });
    await put(Key, seq(name, 4n), 'v4', { bind: guard(name) });
    await expectRejects(put(Key, seq(`${name}-b`, 5n), 'v5', { bind: guard(`${name}-b`) }), SequencerMismatchError);
    expect(await text(Key)).toBe('v4');
    await expectRejects(put(Key, seq(`${name}-b`, 6n), 'v6'), SequencerMismatchError);
  });
});

describe('bound S3 keys: the collector and real locks', () => {
  it('the collector\'s pointer rewrite keeps the binding', async () => {
    const Key = `${randomPrefix()}/gc`;
    const name = uniqueLockName('s3gc');
    const client = newClient().client;
    await fencedPutObject(client, { Bucket, Key, Body: 'v1', token: seq(name, 1n) }, { layout: 'pointer', bind: guard(name) });
    await fencedPutObject(client, { Bucket, Key, Body: 'v2', token: seq(name, 2n) }, { layout: 'pointer' });
    const collected = await collectGarbage(newClient().client, { Bucket, Key }, { graceMs: 0 });
    expect(collected.generation).toBe(2); // the pointer was rewritten
    await expectRejects(fencedPutObject(newClient().client, { Bucket, Key, Body: 'v3', token: 3n }, { layout: 'pointer' }), SequencerMismatchError);
    await fencedPutObject(newClient().client, { Bucket, Key, Body: 'v3', token: seq(name, 3n) }, { layout: 'pointer' });
  });

  it('a real ZooKeeper lock through withLock and CURRENT_LOCK: its key takes it; another lock\'s larger token is refused', async () => {
    const zk = zookeeperSource(await zkClients.connect(testServers().zkStandalone));
    const name = uniqueLockName('s3real');
    const Key = `${randomPrefix()}/real`;
    await withLock(zk, name, (lock) => {
      const { kind, name: locked, source } = lock.sequencer;
      return fencedPutObject(newClient().client, { Bucket, Key, Body: `by ${lock.token}`, token: CURRENT_LOCK }, { bind: { kind, lock: locked, source } });
    });
    await expectRejects(
      withLock(zk, `${name}-other`, () => fencedPutObject(newClient().client, { Bucket, Key, Body: 'other lock', token: CURRENT_LOCK })),
      SequencerMismatchError,
    );
    const token = await withLock(zk, name, async (lock) => {
      await fencedPutObject(newClient().client, { Bucket, Key, Body: `by ${lock.token}`, token: CURRENT_LOCK });
      return lock.token;
    });
    expect(await readFence(newClient().client, { Bucket, Key })).toBe(token);
  });
});
