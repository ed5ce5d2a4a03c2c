// The etcd source on the diagnostics channels, as the ZooKeeper recipes are:
// acquire, release and campaign traced with source 'etcd', and each holding
// published as held, then released, with its token.
import diagnostics_channel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireLock, campaign, etcdSession } from '../../../src/sources/etcd/index.js';
import { CHANNELS } from '../../../src/index.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { EtcdPool } from './helpers.js';

const pool = new EtcdPool();
const unsubscribe: (() => void)[] = [];
afterEach(() => {
  for (const u of unsubscribe.splice(0)) u();
});

function record(name: string): { starts: Record<string, unknown>[]; ends: Record<string, unknown>[] } {
  const starts: Record<string, unknown>[] = [];
  const ends: Record<string, unknown>[] = [];
  const handlers = {
    start: (m: unknown) => starts.push({ ...(m as object) }),
    end: () => undefined,
    asyncStart: () => undefined,
    asyncEnd: (m: unknown) => ends.push({ ...(m as object) }),
    error: () => undefined,
  };
  const channel = diagnostics_channel.tracingChannel(name);
  channel.subscribe(handlers);
  unsubscribe.push(() => channel.unsubscribe(handlers));
  return { starts, ends };
}

function messages(name: string): Record<string, unknown>[] {
  const seen: Record<string, unknown>[] = [];
  const listener = (m: unknown): void => void seen.push({ ...(m as object) });
  diagnostics_channel.subscribe(name, listener);
  unsubscribe.push(() => diagnostics_channel.unsubscribe(name, listener));
  return seen;
}

describe('etcd on the diagnostics channels', () => {
  it('traces acquire, release and campaign with source etcd, and publishes the holding with its token', async () => {
    const acquires = record(CHANNELS.lockAcquire);
    const releases = record(CHANNELS.lockRelease);
    const campaigns = record(CHANNELS.electionCampaign);
    const held = messages(CHANNELS.lockHeld);
    const released = messages(CHANNELS.lockReleased);
    const etcd = pool.client();
    const name = uniqueLockName('etcd_diag');
    const lock = await acquireLock(etcd, name);
    await lock.release();
    const leader = await campaign(etcd, uniqueLockName('etcd_diag_election'));
    await leader.resign();

    expect(acquires.starts).toEqual([expect.objectContaining({ source: 'etcd', lock: name, mode: 'wait' })]);
    expect(acquires.ends).toHaveLength(1);
    expect(releases.starts[0]).toMatchObject({ source: 'etcd', lock: name, token: lock.token });
    expect(campaigns.starts).toEqual([expect.objectContaining({ source: 'etcd' })]);
    expect(held[0]).toMatchObject({ token: lock.token });
    expect(released[0]).toMatchObject({ token: lock.token });
  });

  it('publishes each lease on fencekeeper:session:state: connected, expired when revoked, closed when replaced or the session closes', async () => {
    const states = messages(CHANNELS.sessionState);
    const [etcd, admin] = pool.many(2);
    const lock = await acquireLock(etcd!, uniqueLockName('etcd_state'));
    const first = `lease 0x${etcdSession(etcd!).leaseId!.toString(16)}`;
    expect(states).toEqual([{ source: 'etcd', session: first, previous: null, state: 'connected' }]);
    await admin!.leaseClient.leaseRevoke({ ID: etcdSession(etcd!).leaseId!.toString() });
    await until(() => lock.signal.aborted && states.length >= 2, 'the revoked lease to end');
    expect(states[1]).toEqual({ source: 'etcd', session: first, previous: 'connected', state: 'expired' });
    const again = await acquireLock(etcd!, uniqueLockName('etcd_state'));
    const second = `lease 0x${etcdSession(etcd!).leaseId!.toString(16)}`;
    expect(second).not.toBe(first);
    expect(states.slice(2)).toEqual([
      { source: 'etcd', session: first, previous: 'expired', state: 'closed' },
      { source: 'etcd', session: second, previous: null, state: 'connected' },
    ]);
    await again.release();
    await etcdSession(etcd!).close();
    expect(states.at(-1)).toEqual({ source: 'etcd', session: second, previous: 'connected', state: 'closed' });
  });
});
