// SourceIdentityCache: a source's identity asked once per client, and a grant
// never handed out without it (the edge cases; the real reads are in
// test/integration/core/sequencer-sources.test.ts).
import { describe, expect, it } from 'vitest';
import { grantSequencer, SourceIdentityCache } from '../../src/source-identity.js';

const identity = { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-000000000001' };

describe('SourceIdentityCache', () => {
  it('asks once per client, however many grants ask at once; another client asks for itself', async () => {
    let asked = 0;
    const cache = new SourceIdentityCache<object>(async () => {
      asked++;
      await new Promise((r) => setImmediate(r));
      return identity;
    });
    const a = {};
    const b = {};
    const ids = await Promise.all([cache.of(a), cache.of(a), cache.of(a)]);
    expect(asked).toBe(1);
    expect(new Set(ids).size).toBe(1);
    expect(cache.known(a)).toEqual(identity);
    expect(Object.isFrozen(cache.known(a))).toBe(true);
    await cache.of(a);
    expect(asked).toBe(1);
    expect(cache.known(b)).toBeUndefined();
    await cache.of(b);
    expect(asked).toBe(2);
  });

  it('a failed read is not kept: the next grant asks again', async () => {
    let asked = 0;
    const cache = new SourceIdentityCache<object>(async () => {
      asked++;
      if (asked === 1) throw new Error('no answer');
      return identity;
    });
    const client = {};
    await expect(cache.of(client)).rejects.toThrow('no answer');
    expect(cache.known(client)).toBeUndefined();
    await expect(cache.of(client)).resolves.toEqual(identity);
    expect(asked).toBe(2);
  });

  it('afterGrant: a grant whose identity cannot be read is given back, and the acquire rejects with the read\'s error', async () => {
    const cache = new SourceIdentityCache<object>(async () => {
      throw new Error('identity unreadable');
    });
    const left: string[] = [];
    const granted = cache.afterGrant({}, Promise.resolve('grant-1'), async (grant) => void left.push(grant), {});
    await expect(granted).rejects.toThrow('identity unreadable');
    expect(left).toEqual(['grant-1']);
    // A busy try (null) needs no identity and asks for none.
    await expect(cache.afterGrant({}, Promise.resolve(null), async () => undefined, {})).resolves.toBeNull();
  });

  it('afterGrant on a client whose identity is known hands the grant promise back as it is (no extra step)', async () => {
    const cache = new SourceIdentityCache<object>(async () => identity);
    const client = {};
    await cache.of(client);
    const granting = Promise.resolve('grant');
    expect(cache.afterGrant(client, granting, async () => undefined, {})).toBe(granting);
  });

  it('afterGrant: a grant decided before the signal aborted, whose identity read ended after, is given back and the acquire rejects with the reason', async () => {
    // The window `fencekeeper run` hung in: the server granted, the first grant's
    // identity read was in flight, and the operator's SIGTERM aborted the signal.
    let answer!: () => void;
    const cache = new SourceIdentityCache<object>(() => new Promise((resolve) => (answer = () => resolve(identity))));
    const controller = new AbortController();
    const left: string[] = [];
    const granted = cache.afterGrant({}, Promise.resolve('grant-1'), async (grant) => void left.push(grant), { signal: controller.signal });
    await new Promise((r) => setImmediate(r));
    controller.abort(new Error('interrupted by SIGTERM'));
    answer();
    await expect(granted).rejects.toThrow('interrupted by SIGTERM');
    expect(left).toEqual(['grant-1']);
    // Not aborted: the grant is handed out once the identity is known.
    const again = new SourceIdentityCache<object>(async () => identity);
    await expect(again.afterGrant({}, Promise.resolve('grant-2'), async () => undefined, { signal: new AbortController().signal })).resolves.toBe('grant-2');
  });

  it('learn keeps an identity a reply carried, and never replaces a known one', () => {
    const cache = new SourceIdentityCache<object>(async () => identity);
    const client = {};
    cache.learn(client, { kind: 'etcd', id: '1' });
    cache.learn(client, { kind: 'etcd', id: '2' });
    expect(cache.known(client)).toEqual({ kind: 'etcd', id: '1' });
  });

  it('grantSequencer: a sequencer of the known identity, and a loud failure without one', () => {
    expect(grantSequencer('election', 'jobs/a', identity, 7n)).toEqual({ kind: 'election', name: 'jobs/a', source: identity, token: 7n });
    expect(() => grantSequencer('lock', 'jobs/a', undefined, 7n)).toThrow(/before its source's identity was known/);
  });
});
