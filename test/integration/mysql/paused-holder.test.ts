// The paused holder against MySQL/MariaDB, end to end: a holder process
// (test/fixtures/mysql-holder.mjs, the built package) holds a ZooKeeper lock
// and opens a REPEATABLE READ transaction (its snapshot), is SIGSTOPped until
// ZooKeeper expires its session, the next holder is granted the lock and
// writes with withFence and fencedUpdate; the holder is resumed and writes
// with its old token: both writes are refused, the one in its old snapshot
// included, and the newer holder's values stay.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencedUpdate, withFence } from '../../../adapters/mysql/index.js';
import { ZooKeeperClient, acquireLock } from '../../../src/sources/zookeeper/index.js';
import { spawnHolder, type HolderProcess } from '../../../src/testing/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { markOf, privateDatabase } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/mysql-holder.mjs', import.meta.url));
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

let db: Awaited<ReturnType<typeof privateDatabase>>;
let zk: ZooKeeperClient;
const holders: HolderProcess[] = [];

beforeAll(async () => {
  if (!existsSync(`${ROOT}dist/adapters/mysql/index.js`)) throw new Error("dist/ is missing fencekeeper/mysql: run 'npm run build' first");
  db = await privateDatabase('fk_mysql_paused');
  zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone });
}, 120_000);
afterAll(async () => {
  await Promise.all(holders.map((h) => h.stop()));
  await zk?.close();
  await db?.drop();
});

interface Outcome { ok?: string; code?: string; current?: string | null }

describe('the paused holder on MySQL/MariaDB', () => {
  it('stopped past its session, with a snapshot older than the next holder\'s commit: its withFence and fencedUpdate are refused', async () => {
    const table = uniqueId('paused_docs');
    const resource = `paused/${table}`;
    await db.pool.query(`CREATE TABLE \`${table}\` (id INT PRIMARY KEY, body VARCHAR(100) NOT NULL, fencing_token BIGINT NULL) ENGINE=InnoDB`);
    await db.pool.query(`INSERT INTO \`${table}\` VALUES (1, 'initial', NULL), (2, 'initial', NULL)`);
    const url = new URL(testServers().mysql);
    url.pathname = `/${db.name}`;
    const lockName = uniqueLockName('paused_mysql');
    const holder = await spawnHolder(FIXTURE, { env: { ...process.env, ZOOKEEPER: testServers().zkStandalone, FK_LOCK: lockName, FK_MYSQL: url.toString(), FK_RESOURCE: resource, FK_TABLE: table } });
    holders.push(holder);
    const held = await holder.holding;
    holder.send('snapshot');
    expect(await holder.next()).toEqual({ snapshot: 'initial' });

    await holder.pausePastSession(zk);
    const newer = await acquireLock(zk, lockName);
    try {
      expect(newer.token).toBeGreaterThan(held.token);
      await withFence(db.pool, resource, newer.token, async (c) => {
        await c.query(`UPDATE \`${table}\` SET body = 'next holder' WHERE id = 1`);
      });
      expect(await fencedUpdate(db.pool, { table, where: { id: 2 }, set: { body: 'next holder' }, token: newer.token })).toBe(1);
    } finally {
      await newer.release();
    }

    holder.resume();
    holder.send('write');
    const late = (await holder.next((m) => typeof m === 'object' && m !== null && 'withFence' in m)) as { held: boolean; token: bigint; withFence: Outcome; fencedUpdate: Outcome };
    expect(late.token).toBe(held.token);
    expect(late.held).toBe(false);
    expect(late.withFence).toEqual({ code: 'STALE_TOKEN', current: String(newer.token) });
    expect(late.fencedUpdate).toEqual({ code: 'STALE_TOKEN', current: String(newer.token) });
    const [rows] = await db.pool.query(`SELECT id, body, CAST(fencing_token AS CHAR) AS t FROM \`${table}\` ORDER BY id`);
    expect(rows).toEqual([{ id: 1, body: 'next holder', t: null }, { id: 2, body: 'next holder', t: String(newer.token) }]);
    expect(await markOf(db.pool, resource)).toBe(newer.token);
    holder.send('exit');
  }, 120_000);
});
