// The etcd source on the diagnostics channels, as the ZooKeeper recipes are:
// acquire, release and campaign traced with source 'etcd', and each holding
// published as held, then released, with its token.
import diagnostics_channel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireLock, campaign } from '../../adapters/etcd/index.js';
import { CHANNELS } from '../../src/index.js';
import { uniqueLockName } from '../helpers/unique.js';
import { EtcdPool } from './etcd-helpers.js';

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
});
