// MySqlFenceStore behind fencing() (fencekeeper/express), on the real
// MariaDB: two replicas of one service, each with its own pool and store,
// share one fencekeeper_fences table. The handler writes through
// req.fencing.transaction (the PoolConnection holding the fence row), so its
// write commits only with the admission. Runs on Express 5 and 4.
import { express, forwardRejections } from './variants.js';
import type { AddressInfo } from 'node:net';
import type { PoolConnection } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencing } from '../../../adapters/express/index.js';
import { MySqlFenceStore } from '../../../adapters/mysql/index.js';
import { uniqueId } from '../../helpers/unique.js';
import { deferred, until, type Deferred } from '../../helpers/wait.js';
import { serve, settledYet, type Served } from './helpers.js';
import { markOf, mysqlPool, privateDatabase, type Pool } from '../mysql/helpers.js';

let db: Awaited<ReturnType<typeof privateDatabase>>;
const replicas: { pool: Pool; served: Served; url: string }[] = [];
const gates = new Map<string, Deferred>();
const entered = new Map<string, Deferred>();

beforeAll(async () => {
  db = await privateDatabase('fk_mysql_express');
  await db.pool.query('CREATE TABLE writes (seq INT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(100) NOT NULL, token BIGINT NOT NULL, note VARCHAR(100) NOT NULL) ENGINE=InnoDB');
  for (let i = 0; i < 2; i++) {
    const pool = mysqlPool(db.name, 4);
    const app = express();
    app.put('/r/:name', fencing({ store: new MySqlFenceStore(pool), resource: (req) => `http/${String(req.params['name'])}` }), forwardRejections(async (req, res) => {
      const f = req.fencing as { token: bigint; transaction: PoolConnection };
      const note = String(req.headers['x-note'] ?? '');
      await f.transaction.query('INSERT INTO writes (resource, token, note) VALUES (?, ?, ?)', [String(req.params['name']), String(f.token), note]);
      entered.get(note)?.resolve();
      await gates.get(note)?.promise;
      if (req.headers['x-outcome'] === 'throw') throw new Error('handler failed after writing');
      res.json({ token: String(f.token), replica: i });
    }));
    const served = await serve(app);
    replicas.push({ pool, served, url: `http://127.0.0.1:${(served.server.address() as AddressInfo).port}/r/` });
  }
}, 120_000);
afterAll(async () => {
  for (const r of replicas) {
    await r.served.close();
    await r.pool.end();
  }
  await db?.drop();
});

const put = async (replica: number, name: string, token: bigint, headers: Record<string, string> = {}): Promise<{ status: number; body: Record<string, unknown> }> => {
  const response = await fetch(replicas[replica]!.url + name, { method: 'PUT', headers: { 'fencing-token': String(token), ...headers } });
  return { status: response.status, body: (await response.json().catch(() => ({}))) as Record<string, unknown> };
};

async function writes(name: string): Promise<{ token: string; note: string }[]> {
  const [rows] = await db.pool.query('SELECT CAST(token AS CHAR) AS token, note FROM writes WHERE resource = ? ORDER BY seq', [name]);
  return rows as { token: string; note: string }[];
}

describe('MySqlFenceStore behind fencing()', () => {
  it('admits equal and larger tokens across replicas and refuses a smaller one with 409 and the mark; the refused write is nowhere', async () => {
    const name = uniqueId('adm');
    expect(await put(0, name, 5n, { 'x-note': 'a' })).toMatchObject({ status: 200, body: { token: '5', replica: 0 } });
    expect(await put(1, name, 5n, { 'x-note': 'b' })).toMatchObject({ status: 200, body: { token: '5', replica: 1 } });
    expect(await put(1, name, 8n, { 'x-note': 'c' })).toMatchObject({ status: 200 });
    const stale = await put(0, name, 7n, { 'x-note': 'stale' });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ code: 'STALE_TOKEN', current: '8' });
    await until(async () => (await writes(name)).length === 3, 'the third admission\'s commit');
    expect(await writes(name)).toEqual([{ token: '5', note: 'a' }, { token: '5', note: 'b' }, { token: '8', note: 'c' }]);
    expect(await markOf(db.pool, `http/${name}`)).toBe(8n);
  });

  it('a handler that fails after writing: its write rolled back, the advance kept', async () => {
    const name = uniqueId('fail');
    const failed = await put(0, name, 6n, { 'x-note': 'failed', 'x-outcome': 'throw' });
    expect(failed.status).toBe(500);
    expect(await writes(name)).toEqual([]);
    expect(await markOf(db.pool, `http/${name}`)).toBe(6n);
    expect((await put(1, name, 5n)).status).toBe(409);
  });

  it('the fence row is held until the response ends: the other replica\'s newer request waits, and the older one commits first', async () => {
    const name = uniqueId('hold');
    const note = uniqueId('held');
    gates.set(note, deferred());
    entered.set(note, deferred());
    const first = put(0, name, 3n, { 'x-note': note });
    await entered.get(note)!.promise;
    const second = put(1, name, 4n, { 'x-note': 'second' });
    await new Promise((r) => setTimeout(r, 300));
    // The newer admission is still waiting for the row lock: no answer yet.
    expect(await settledYet(second)).toBe(false);
    gates.get(note)!.resolve();
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    // fencing() commits once the response has gone out: wait for the second commit.
    await until(async () => (await writes(name)).length === 2, 'the second admission\'s commit');
    expect(await writes(name)).toEqual([{ token: '3', note }, { token: '4', note: 'second' }]);
  });
});
