// `fencekeeper demo` (what `npm run demo` runs once the servers are up), as a
// process against the real servers: with fencing every resource refuses the
// paused holder's stale write and the demo exits 0; with fencing disabled the
// same timeline corrupts every resource and the demo exits 1. The second run
// is the proof that the demo's verdict can fail.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverEnvironment, testServers } from '../../helpers/servers.js';
import { holdRedisFaults } from '../redis/helpers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli, type Run } from './helpers.js';

function demo(extra: string[]): Promise<Run> {
  assertBuilt();
  // Each run its own lock, so demo runs and other tests never queue behind each other.
  return cli(['demo', ...extra], { ...serverEnvironment(), DEMO_LOCK: uniqueLockName('demo') }).done;
}

describe('fencekeeper demo', () => {
  it("plays the timeline: every resource refuses the paused holder's stale write", { timeout: 120_000 }, async () => {
    const run = await demo([]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/\| A\s+\| \d+\s+\| SIGSTOP/);
    expect(run.stdout).toMatch(/A's session times out/);
    expect(run.stdout).toMatch(/reads lock\.held .*\| false/);
    expect(run.stdout.match(/with its old token\s+\| refused/g)).toHaveLength(3);
    expect(run.stdout).toContain('PASS');
    // Every line stands on its own: no references to notes a user has never seen.
    expect(run.stdout).not.toMatch(/seed \d|design note/i);
  });

  it('fails (exit 1) when fencing is disabled: the stale writes land', { timeout: 120_000 }, async () => {
    const run = await demo(['--unfenced']);
    expect(run.code).toBe(1);
    expect(run.stdout.match(/with its old token\s+\| accepted/g)).toHaveLength(3);
    expect(run.stdout).toContain('ACCEPTED');
    expect(run.stdout).toContain('FAIL');
  });
});

describe('fencekeeper demo over the other lock services', () => {
  // The Redis set's turn: no other file pauses or kills its nodes meanwhile.
  let giveBack: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    giveBack = await holdRedisFaults();
  }, 660_000);
  afterAll(async () => {
    await giveBack?.();
  });

  it.each([
    ['redis', () => testServers().redis, /\| redis\s+\| \d+\s+\| A's lock key expires/],
    ['redlock', () => `redlock://${testServers().redlock.map((u) => u.replace(/^redis:\/\//, '')).join(',')}`, /\| redlock\s+\| \d+\s+\| A's lock key expires/],
    ['etcd', () => `etcd://${new URL(testServers().etcd).host}`, /\| etcd\s+\| \d+\s+\| A's lease expires/],
  ])('--lock-service %s: the same timeline, every stale write refused', { timeout: 120_000 }, async (_kind, url, expiry) => {
    const run = await demo(['--lock-service', url()]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(expiry);
    expect(run.stdout).toMatch(/reads lock\.held .*\| false/);
    expect(run.stdout.match(/with its old token\s+\| refused/g)).toHaveLength(3);
    expect(run.stdout).toContain('PASS');
  });
});
