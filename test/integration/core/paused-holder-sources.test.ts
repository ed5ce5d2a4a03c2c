// The paused holder, for every token source (test/helpers/sources.ts): a
// holder process gets its lock from the source's URL, is SIGSTOPped, and
// stays stopped while the source ends its grant (a session expired, a key's
// TTL run out) and the next holder acquires and writes to PostgreSQL, S3 and
// a fenced HTTP resource. After SIGCONT, the holder's first check reads
// held === false, and its writes with the old token are refused by
// withFence, fencedPutObject and fencing().
import type { AddressInfo } from 'node:net';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryFenceStore, fencing } from '../../../adapters/express/index.js';
import { migrate, withFence } from '../../../adapters/postgres/index.js';
import { fencedPutObject } from '../../../adapters/s3/index.js';
import type { HolderProcess } from '../../../src/testing/index.js';
import { pauseSourceHolder } from '../../helpers/paused-source-holder.js';
import { serverEnvironment, testServers } from '../../helpers/servers.js';
import { SOURCES } from '../../helpers/sources.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { serve, type Served } from '../express/helpers.js';
import { TestBucket, newClient } from '../s3/helpers.js';
import { holdRedisFaults } from '../redis/helpers.js';

let served: Served;
let url: string;
let pool: pg.Pool;
const bucket = new TestBucket('paused-sources');
const s3 = newClient().client;
const holders: HolderProcess[] = [];
// Redlock's holder and successor count on a majority of its nodes: no node faults meanwhile.
let giveBackRedis: (() => Promise<void>) | undefined;

beforeAll(async () => {
  giveBackRedis = await holdRedisFaults();
  pool = new pg.Pool({ connectionString: testServers().databaseUrl, max: 4 });
  await migrate(pool);
  await bucket.create();
  const app = express();
  app.put('/resource/:name', fencing({ store: new MemoryFenceStore(), resource: (req) => `http/${req.params.name}` }), (_req, res) => {
    res.json({ ok: true });
  });
  served = await serve(app);
  url = `http://127.0.0.1:${(served.server.address() as AddressInfo).port}/resource/`;
}, 11 * 60_000);
afterAll(async () => {
  await Promise.all(holders.map((h) => h.stop()));
  await served?.close();
  await bucket.remove().catch(() => {});
  s3.destroy();
  await pool?.end();
  await giveBackRedis?.();
}, 120_000);

describe.each(SOURCES)('the paused holder: $kind', (sut) => {
  it('stopped past its grant: held === false at its first check, and its old token is refused by withFence, fencedPutObject and fencing()', async () => {
    const name = uniqueLockName(`paused_${sut.kind}`);
    const resource = `paused/${name}`;
    const run = await pauseSourceHolder(sut, {
      lock: name,
      env: { ...serverEnvironment(), FK_RESOURCE: resource, FK_BUCKET: bucket.name, FK_URL: url + name },
      holders,
      async whileStopped(next) {
        await withFence(pool, resource, next.token, async (client) => client.query({ text: 'SELECT 1' }));
        await fencedPutObject(s3, { Bucket: bucket.name, Key: resource, Body: `from ${next.token}`, token: next.token });
        const put = await fetch(url + name, { method: 'PUT', headers: { 'fencing-token': String(next.token) } });
        expect(put.status).toBe(200);
      },
    });
    expect(run.stoppedAtGrant).toBe(true);
    expect(run.nextToken > run.oldToken, `successor ${run.nextToken} after ${run.oldToken}`).toBe(true);
    const { report } = run;
    expect(report.token).toBe(run.oldToken);
    expect(report.held).toBe(false);
    expect(report.aborted).toBe(true);
    expect(report.postgres).toBe('STALE_TOKEN');
    expect(report.s3).toBe('STALE_TOKEN');
    expect(report.http).toBe(409);
    expect(run.nextHeldAfter).toBe(true);
  });
});
