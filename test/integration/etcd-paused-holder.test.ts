// The paused holder over etcd, with real processes: a child holds the lock
// on a 2 s lease and writes with its token to PostgreSQL (withFence), S3
// (fencedPutObject) and an HTTP resource (fencing()); it is SIGSTOPped
// (as a long GC pause stops a process) until etcd has expired its lease and
// the lock was granted to the next holder, which writes with its larger
// token; then SIGCONTed. Its first look at lock.held after the resume reads
// false, its signal has aborted by then (reason 'deadline', by its own
// clock), and every write it still makes with the old token is refused.
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { S3Client } from '@aws-sdk/client-s3';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireLock, lockStatus } from '../../adapters/etcd/index.js';
import { MemoryFenceStore, fencing, fencingHeaders } from '../../adapters/express/index.js';
import { migrate, withFence } from '../../adapters/postgres/index.js';
import { fencedPutObject } from '../../adapters/s3/index.js';
import { spawnHolder, type HolderProcess } from '../../src/testing/index.js';
import { testServers } from '../helpers/servers.js';
import { uniqueLockName, uniqueTable } from '../helpers/unique.js';
import { within } from '../helpers/wait.js';
import { EtcdPool, singleHosts } from './etcd-helpers.js';
import { serve, type Served } from './express-helpers.js';
import { TestBucket } from './s3-helpers.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/etcd-holder.mjs', import.meta.url));

interface Event {
  event: string;
  [key: string]: unknown;
}

const pool = new EtcdPool();
const bucket = new TestBucket('etcd-paused');
const table = uniqueTable('etcd_paused');
let db: pg.Pool;
let served: Served;
let url: string;
const holders: HolderProcess[] = [];

beforeAll(async () => {
  db = new pg.Pool({ connectionString: testServers().databaseUrl, max: 2 });
  await migrate(db);
  await db.query(`create table ${table} (token bigint not null)`);
  await bucket.create();
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
  await db?.query(`drop table if exists ${table}`);
  await db?.end();
  await bucket.remove();
});

describe('the paused holder over etcd', () => {
  it('SIGSTOPped past its lease: held === false at its first check after SIGCONT, and its old-token writes are refused after the next holder wrote', async () => {
    const name = uniqueLockName('etcd_paused');
    const key = 'reports/daily.txt';
    const s3 = testServers().s3;
    const holder = await spawnHolder(FIXTURE, {
      env: {
        ...process.env,
        FK_ETCD: singleHosts()[0],
        FK_LOCK: name,
        FK_TTL_SECONDS: '2',
        DATABASE_URL: testServers().databaseUrl,
        FK_TABLE: table,
        S3_ENDPOINT: s3.endpoint,
        S3_REGION: s3.region,
        S3_ACCESS_KEY: s3.credentials.accessKeyId,
        S3_SECRET_KEY: s3.credentials.secretAccessKey,
        FK_BUCKET: bucket.name,
        FK_KEY: key,
        FK_URL: url,
      },
    });
    holders.push(holder);
    const { token: old } = await within(holder.holding, 30_000, 'the child to hold the lock');
    const etcd = pool.client();
    expect((await lockStatus(etcd, name)).holder?.token).toBe(old);
    const event = (kind: string): Promise<Event> => within(holder.next((m) => (m as Event).event === kind) as Promise<Event>, 60_000, `the child's "${kind}"`);

    holder.send('write');
    expect(await event('write')).toMatchObject({ held: true, pg: 'ok', s3: 'ok', http: { status: 200 } });

    holder.send('arm');
    await event('armed');
    await holder.pause();
    // The next holder waits in the queue until etcd expires the stopped child's lease.
    const next = await within(acquireLock(etcd, name), 60_000, 'the lease of the stopped holder to expire');
    expect(next.token > old).toBe(true);
    expect((await lockStatus(etcd, name)).holder?.token).toBe(next.token);
    await withFence(db, table, next.token, (client: pg.PoolClient) => client.query({ text: `insert into ${table} (token) values ($1)`, values: [next.token.toString()] }));
    const client = new S3Client({ ...s3, forcePathStyle: true });
    await fencedPutObject(client, { Bucket: bucket.name, Key: key, Body: `by ${next.token}`, token: next.token });
    client.destroy();
    expect((await fetch(url, { method: 'PUT', headers: fencingHeaders(next) })).status).toBe(200);

    holder.resume();
    const resumed = await event('resumed');
    const aborted = await event('aborted');
    expect(resumed.held).toBe(false);
    expect(aborted.reason).toBe('deadline');
    // At once: the signal had aborted before the loop's first check after the resume returned.
    expect(aborted.checkedSinceResume).toBe(false);

    holder.send('write');
    const late = (await holder.next((m) => (m as Event).event === 'write' && (m as Event).held === false)) as Event;
    expect(late).toMatchObject({ held: false, token: old, pg: 'STALE_TOKEN', s3: 'STALE_TOKEN', http: { status: 409, code: 'STALE_TOKEN' } });
    const rows = await db.query<{ token: string }>(`select token from ${table} order by token`);
    expect(rows.rows.map((r) => BigInt(r.token))).toEqual([old, next.token]);
    expect((await bucket.raw(key)).body).toBe(`by ${next.token}`);

    await next.release();
    holder.send('exit');
    expect(await within(holder.exited, 30_000, 'the child to exit')).toEqual({ code: 0, signal: null });
  });
});
