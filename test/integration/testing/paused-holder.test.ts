// fencekeeper/testing's paused holder: a real holder process (a module
// that imports the built package, as a user's would), frozen with SIGSTOP
// until ZooKeeper has expired its session, a newer holder granted in the
// meantime, then thawed: its late write with the old token is refused by a
// fenced HTTP resource, and its own lock.held reads false.
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryFenceStore, fencing, fencingHeaders } from '../../../adapters/express/index.js';
import { ZooKeeperClient, acquireLock, lockStatus } from '../../../src/sources/zookeeper/index.js';
import { reportHolding, spawnHolder, type HolderProcess } from '../../../src/testing/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { serve, type Served } from '../express/helpers.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/testing-holder.mjs', import.meta.url));

function state(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

interface WriteReport {
  held: boolean;
  status: number;
  body: { token?: string; code?: string; current?: string };
  token: bigint;
}

describe('spawnHolder() and pausePastSession()', () => {
  let zk: ZooKeeperClient;
  let served: Served;
  let url: string;
  const holders: HolderProcess[] = [];

  beforeAll(async () => {
    zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone });
    const app = express();
    app.put('/reports/daily', fencing({ store: new MemoryFenceStore(), resource: 'reports/daily' }), (req, res) => {
      res.json({ token: String(req.fencing?.token) });
    });
    served = await serve(app);
    url = `http://127.0.0.1:${(served.server.address() as AddressInfo).port}/reports/daily`;
  });
  afterAll(async () => {
    await Promise.all(holders.map((h) => h.stop()));
    await served?.close();
    await zk?.close();
  });

  it('the holder frozen past its session is refused when it writes after the newer holder', async () => {
    const lock = uniqueLockName('paused_kit');
    const holder = await spawnHolder(FIXTURE, { env: { ...process.env, ZOOKEEPER: testServers().zkStandalone, FK_LOCK: lock, FK_URL: url } });
    holders.push(holder);
    const report = await holder.holding;
    expect(report).toMatchObject({ name: lock, path: expect.stringContaining(`/fencekeeper/locks/${lock}/`) });
    expect(typeof report.token).toBe('bigint'); // structured clone: a bigint, not a string
    expect((await lockStatus(zk, lock)).holder?.token).toBe(report.token);

    holder.send('write');
    const before = (await holder.next()) as WriteReport;
    expect(before).toMatchObject({ held: true, status: 200, body: { token: report.token.toString() } });

    await holder.pausePastSession(zk);
    expect(state(holder.pid)).toBe('T'); // still frozen
    expect(await zk.exists(report.path!)).toBeNull();
    const newer = await acquireLock(zk, lock);
    expect(newer.token).toBeGreaterThan(report.token);
    const newerWrite = await fetch(url, { method: 'PUT', headers: fencingHeaders(newer) });
    expect(newerWrite.status).toBe(200);

    holder.resume();
    holder.send('write');
    const late = (await holder.next((m) => m !== before)) as WriteReport;
    expect(late.token).toBe(report.token);
    expect(late.held).toBe(false);
    expect(late).toMatchObject({ status: 409, body: { code: 'STALE_TOKEN', current: newer.token.toString() } });
    expect(holder.messages).toHaveLength(2);

    await newer.release();
    holder.send('exit');
    expect(await holder.exited).toEqual({ code: 0, signal: null });
  });

  it('a holder that exits before it holds anything rejects holding with its stderr', async () => {
    const holder = await spawnHolder(FIXTURE, { env: { ...process.env, FK_FAIL: '1' } });
    holders.push(holder);
    await expect(holder.holding).rejects.toMatchObject({ code: 'CLOSED', message: expect.stringMatching(/exited \(exit code 3\) before it reported holding a lock; its stderr:\nthe holder could not start/) });
    await expect(holder.pause()).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('reportHolding() outside a holder process (here: a test runner\'s worker) refuses instead of writing to the runner\'s channel', () => {
    expect(() => reportHolding({ name: 'x', token: 1n })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});
