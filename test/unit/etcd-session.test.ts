// The etcd session's own clock, against a fake lease service whose answers
// the test controls: the deadline counts from the send time of the last
// acknowledged keepalive with the TTL the server granted; a holding steps
// down by itself when acknowledgements stop; a TTL of 0 ends the lease; a
// stalled keepalive stream is replaced.
import { performance } from 'node:perf_hooks';
import { afterEach, describe, expect, it } from 'vitest';
import type { EtcdClient, EtcdDuplexStream, EtcdKeepAliveResponse } from '../../src/sources/etcd/client.js';
import { etcdSession, type EtcdSession } from '../../src/sources/etcd/index.js';
import type { LockLostError } from '../../src/errors.js';
import { until } from '../helpers/wait.js';

class FakeStream implements EtcdDuplexStream<{ ID: string }, EtcdKeepAliveResponse> {
  readonly writes: { id: string; at: number }[] = [];
  cancelled = false;
  readonly #listeners = new Map<string, ((arg?: unknown) => void)[]>();
  write(item: { ID: string }): void {
    this.writes.push({ id: item.ID, at: performance.now() });
  }
  end(): void {}
  cancel(): void {
    this.cancelled = true;
  }
  on(event: 'data' | 'end' | 'error', listener: ((item: EtcdKeepAliveResponse) => void) | (() => void) | ((error: Error) => void)): this {
    this.#listeners.set(event, [...(this.#listeners.get(event) ?? []), listener as (arg?: unknown) => void]);
    return this;
  }
  answer(ttl: string): void {
    for (const l of this.#listeners.get('data') ?? []) l({ ID: '7', TTL: ttl });
  }
}

/** A lease service granting lease 7 with `grantedTtl` seconds; every keepalive stream it opens is kept for the test. */
function fakeClient(grantedTtl: string): { client: EtcdClient; streams: FakeStream[]; revoked: string[] } {
  const streams: FakeStream[] = [];
  const revoked: string[] = [];
  const client = {
    kv: { range: async () => ({}), txn: async () => ({}), deleteRange: async () => ({}) },
    leaseClient: {
      leaseGrant: async () => ({ ID: '7', TTL: grantedTtl }),
      leaseRevoke: async (r: { ID: string }) => {
        revoked.push(r.ID);
        return {};
      },
      leaseKeepAlive: async () => {
        const stream = new FakeStream();
        streams.push(stream);
        return stream;
      },
    },
    watchClient: {
      watch: () => {
        throw new Error('no watches here');
      },
    },
  } as unknown as EtcdClient;
  return { client, streams, revoked };
}

const sessions: EtcdSession[] = [];
afterEach(async () => {
  await Promise.all(sessions.splice(0).map((s) => s.close()));
});

function open(client: EtcdClient, ttlSeconds: number): EtcdSession {
  const session = etcdSession(client, { ttlSeconds });
  sessions.push(session);
  return session;
}

describe('etcd session clock', () => {
  it('uses the TTL the server granted, not the one asked for', async () => {
    const { client } = fakeClient('2');
    const session = open(client, 1);
    const lease = await session.lease();
    expect(lease.ttlMs).toBe(2000);
    expect(session.leaseId).toBe(7n);
  });

  it('a late acknowledgement moves the deadline to its send time + TTL, not its arrival + TTL', async () => {
    const { client, streams } = fakeClient('3');
    const session = open(client, 3);
    const lease = await session.lease();
    await until(() => streams[0]?.writes.length === 1, 'the first keepalive (after a third of the TTL)', 5000);
    const sent = streams[0]!.writes[0]!.at;
    // The reply arrives 300 ms after the keepalive went out.
    await new Promise((r) => setTimeout(r, 300));
    const arrived = performance.now();
    streams[0]!.answer('3');
    expect(lease.acknowledged).toBe(1);
    expect(lease.deadline).toBeLessThanOrEqual(sent + 3000);
    expect(lease.deadline).toBeLessThan(arrived + 3000 - 250);
  });

  it('without acknowledgements a holding steps down at deadline - margin by itself (held false, reason deadline), then the lease ends and is revoked', async () => {
    const { client, revoked } = fakeClient('1');
    const session = open(client, 1);
    const lease = await session.lease();
    const holding = lease.clock.hold({ lock: 'jobs/a', marginMs: 250, deadline: () => lease.deadline });
    expect(holding.held).toBe(true);
    await until(() => holding.signal.aborted, 'the step-down', 5000);
    expect((holding.signal.reason as LockLostError).reason).toBe('deadline');
    expect(holding.held).toBe(false);
    await until(() => lease.endedReason !== null, 'the lease to end at its deadline', 5000);
    expect(lease.endedReason).toBe('session_expired');
    expect(lease.signal.aborted).toBe(true);
    await until(() => revoked.includes('7'), 'the revoke of a lease that may still live');
    // The next grant is a new lease.
    expect(session.leaseId).toBeNull();
  });

  it('a keepalive answered with TTL 0 (the lease is gone on the server) ends every holding at once', async () => {
    const { client, streams } = fakeClient('3');
    const session = open(client, 3);
    const lease = await session.lease();
    const holding = lease.clock.hold({ lock: 'jobs/a', marginMs: 500, deadline: () => lease.deadline });
    await until(() => streams[0]?.writes.length === 1, 'the first keepalive', 5000);
    streams[0]!.answer('0');
    expect(holding.held).toBe(false);
    expect((holding.signal.reason as LockLostError).reason).toBe('session_expired');
    expect(lease.endedReason).toBe('session_expired');
  });

  it('a keepalive unanswered for a whole interval replaces the stream', async () => {
    const { client, streams } = fakeClient('1');
    const session = open(client, 1);
    await session.lease();
    await until(() => streams.length === 2, 'a second stream after the first one stalled', 5000);
    expect(streams[0]!.cancelled).toBe(true);
    expect(streams[0]!.writes.length).toBeGreaterThan(0);
  });
});
