// `fencekeeper demo` (what `npm run demo` runs once the servers are up), as a
// process against the real servers: with fencing every resource refuses the
// paused holder's stale write and the demo exits 0; with fencing disabled the
// same timeline corrupts every resource and the demo exits 1. The second run
// is the proof that the demo's verdict can fail.
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
    // The timeline's picture, drawn from this run's events: where it went, and what it shows.
    const path = /^timeline \(SVG\): (.+\.svg)$/m.exec(run.stdout)?.[1];
    expect(path).toBeDefined();
    const svg = readFileSync(path as string, 'utf8');
    rmSync(path as string);
    expect(svg).toMatch(/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    // A's two grants' worth of writes and B's: 6 accepted, A's 3 stale ones refused (plus one of each in the legend).
    expect(svg.match(/<g class="write accepted">/g)).toHaveLength(7);
    expect(svg.match(/<g class="write refused">/g)).toHaveLength(4);
    // The tokens the table printed, the pause and the session's end.
    const tokens = [...run.stdout.matchAll(/^t\+[0-9.]+s \| [AB]\s+\| (\d+)/gm)].map((m) => m[1]);
    for (const token of new Set(tokens)) expect(svg).toContain(`holds the lock (token ${token})`);
    expect(svg).toMatch(/A frozen \(SIGSTOP\) \d+\.\d s/);
    expect(svg).toContain("A's session times out");
  });

  it('fails (exit 1) when fencing is disabled: the stale writes land', { timeout: 120_000 }, async () => {
    const run = await demo(['--unfenced', '--timeline', join(tmpdir(), `fk-demo-timeline-${process.pid}.svg`)]);
    expect(run.code).toBe(1);
    expect(run.stdout.match(/with its old token\s+\| accepted/g)).toHaveLength(3);
    expect(run.stdout).toContain('ACCEPTED');
    expect(run.stdout).toContain('FAIL');
    // --timeline names the picture's file; the stale writes show accepted there too.
    const path = join(tmpdir(), `fk-demo-timeline-${process.pid}.svg`);
    expect(run.stdout).toContain(`timeline (SVG): ${path}`);
    const svg = readFileSync(path, 'utf8');
    rmSync(path);
    expect(svg).toContain('fencing OFF');
    expect(svg.match(/<g class="write refused">/g)).toHaveLength(1); // the legend's only
    expect(svg).toContain("B's data overwritten");
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
