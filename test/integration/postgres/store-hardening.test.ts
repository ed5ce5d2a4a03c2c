// PostgresFenceStore regressions, once with a pg.Pool and once with Kysely:
// - behind fencing(), a handler that caught a failed statement on
//   req.fencing.transaction and answered anyway (409 for a unique violation,
//   200, 422) left the transaction aborted; COMMIT answered ROLLBACK, the
//   advance vanished without a trace, and token 150 was admitted after 200;
// - abort() of an admission whose handler hangs in a statement (what
//   fencing({ maxHoldMs }) does to a handler that never answers) must cancel
//   the statement, keep the advance, and never hand the connection on to
//   another request while the handler may still send on it.
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkNotCommittedError, type FencingToken } from '../../../src/index.js';
import { fencing } from '../../../adapters/express/index.js';
import { PostgresFenceStore, type Database, type Queryable } from '../../../adapters/postgres/index.js';
import { adminPool, FLAVORS, backendPidOf, exec, migratedSchema, uniqueName, type Flavor } from './helpers.js';
import { until, within } from '../../helpers/wait.js';

const admin = adminPool();

const COMMIT_FAILED = 'fencekeeper:postgres:commit-failed';

interface Published {
  readonly origin: string;
  readonly resource: string;
  readonly token: FencingToken;
  readonly advance: string;
  readonly error: unknown;
}

describe.each(FLAVORS)('PostgresFenceStore hardening with %s', (flavor: Flavor) => {
  const applicationName = uniqueName('fk_pgs');
  const { schema, pool, db } = migratedSchema(admin, `fk_pgs_${flavor}`, { max: 8, flavor, applicationName });
  pool.on('error', () => undefined);
  let store: PostgresFenceStore<Database>;
  let server: Server;
  let base: string;

  const sql = async <R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> =>
    (await admin.query<R>(text.replaceAll('$schema', schema), values)).rows;

  beforeAll(async () => {
    await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text)');
    await pool.query('CREATE TABLE history (resource text NOT NULL, token bigint NOT NULL, note text)');
    store = new PostgresFenceStore(db);

    // The handler writes through the admission's transaction, then tries an
    // insert that hits a duplicate key, catches it ("duplicate key, fine")
    // and answers as the x-answer header says.
    const app = express();
    app.put(
      '/docs/:id',
      fencing({ store, resource: (req) => String(req.headers['x-resource']) }),
      async (req, res) => {
        const trx = req.fencing!.transaction as Queryable;
        const token = req.fencing!.token;
        await exec(trx, 'INSERT INTO history (resource, token, note) VALUES ($1, $2, $3)', [req.fencing!.resource, token.toString(), 'handler']);
        let duplicate = false;
        try {
          await exec(trx, 'INSERT INTO docs (id, body) VALUES ($1, $2)', [Number(req.params['id']), `by-${token}`]);
        } catch (error) {
          duplicate = (error as { code?: unknown }).code === '23505';
        }
        const answer = Number(req.headers['x-answer'] ?? 200);
        res.status(answer).json({ duplicate });
      },
    );
    server = app.listen(0, '127.0.0.1');
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const put = (resource: string, token: FencingToken, answer: number, id = 1): Promise<Response> =>
    fetch(`${base}/docs/${id}`, { method: 'PUT', headers: { 'fencing-token': token.toString(), 'x-resource': resource, 'x-answer': String(answer) } });

  for (const answer of [409, 200, 422]) {
    it(`a handler that caught a unique violation and answered ${answer}: the advance stays (150 refused after 200), its writes are gone, the failure is published`, async () => {
      const resource = uniqueName('dup');
      await sql('INSERT INTO $schema.docs (id, body) VALUES (1, $1) ON CONFLICT DO NOTHING', ['taken']);
      const mark = await store.admit(resource, 100n);
      await mark.commit();

      const published: Published[] = [];
      let onPublished: () => void = () => undefined;
      const seen = new Promise<void>((resolve) => { onPublished = resolve; });
      const listener = (message: unknown): void => {
        if ((message as Published).resource !== resource) return;
        published.push(message as Published);
        onPublished();
      };
      subscribe(COMMIT_FAILED, listener);
      try {
        const first = await put(resource, 200n, answer);
        expect(first.status).toBe(answer);
        expect(await first.json()).toEqual({ duplicate: true });
        // Sent right behind it: waits on the fence row until the 200 admission is settled.
        const stale = await put(resource, 150n, 200);
        expect(stale.status).toBe(409);
        expect(await stale.json()).toMatchObject({ code: 'STALE_TOKEN', presented: '150', current: '200' });
        await within(seen, 20_000, `a message on ${COMMIT_FAILED}`);
      } finally {
        unsubscribe(COMMIT_FAILED, listener);
      }
      expect(published).toHaveLength(1);
      expect(published[0]).toMatchObject({ origin: 'PostgresFenceStore', resource, token: 200n, advance: 'kept' });
      expect(published[0]!.error).toBeInstanceOf(WorkNotCommittedError);
      expect(await store.current(resource)).toBe(200n);
      expect(await sql('SELECT token::text FROM $schema.history WHERE resource = $1', [resource])).toEqual([]);
    });
  }

  it('abort() while the handler hangs in a statement: the statement is cancelled, the advance committed, late statements go nowhere, the connection is not handed on', async () => {
    const resource = uniqueName('hung');
    const admission = await store.admit(resource, 30n);
    const trx = admission.transaction as Queryable;
    const pid = await backendPidOf(trx);
    await exec(trx, 'INSERT INTO history (resource, token, note) VALUES ($1, 30, $2)', [resource, 'before']);
    // The hung handler: a long statement, and on its failure one more write.
    let late: Promise<unknown> | undefined;
    const hung = exec(trx, 'SELECT pg_sleep(120)').then(
      () => 'finished',
      (error: unknown) => {
        late = exec(trx, 'INSERT INTO history (resource, token, note) VALUES ($1, 30, $2)', [resource, 'late']).then(() => 'written', (e: unknown) => e);
        return error;
      },
    );
    await waitUntilRunning(pid, 'pg_sleep');

    await within(admission.abort(), 20_000, 'abort() of the admission whose handler hangs');
    expect(await hung).toMatchObject({ code: '57014' }); // query_canceled: the hung statement was cancelled
    expect(await late).toBeInstanceOf(Error); // the handler's next statement did not run
    expect(await store.current(resource)).toBe(30n);
    await expect(store.admit(resource, 29n)).rejects.toMatchObject({ code: 'STALE_TOKEN', current: 30n });
    expect(await sql('SELECT note FROM $schema.history WHERE resource = $1', [resource])).toEqual([]);
    // Even later: the old transaction object refuses (pg: the client was destroyed; Kysely 0.28: the transaction has ended).
    await expect(exec(trx, 'INSERT INTO history (resource, token, note) VALUES ($1, 30, $2)', [resource, 'later'])).rejects.toThrow();
    expect(await sql('SELECT note FROM $schema.history WHERE resource = $1', [resource])).toEqual([]);

    const next = await store.admit(resource, 31n);
    if (flavor === 'pg') {
      // The aborted admission's connection was closed, not returned to the pool.
      await waitUntilGone(pid);
      expect(await backendPidOf(next.transaction as Queryable)).not.toBe(pid);
    }
    await next.commit();
    expect(await store.current(resource)).toBe(31n);
  });

  it('abort() of an idle admission (a handler that failed): its writes are undone, the advance stays', async () => {
    const resource = uniqueName('idle');
    const admission = await store.admit(resource, 40n);
    await exec(admission.transaction as Queryable, 'INSERT INTO history (resource, token, note) VALUES ($1, 40, $2)', [resource, 'undone']);
    await admission.abort();
    await admission.abort();
    expect(await store.current(resource)).toBe(40n);
    expect(await sql('SELECT note FROM $schema.history WHERE resource = $1', [resource])).toEqual([]);
    const next = await store.admit(resource, 40n);
    expect(next.previous).toBe(40n);
    await next.commit();
  });

  const waitUntilRunning = (pid: number, fragment: string): Promise<void> =>
    until(async () => {
      const rows = await sql<{ query: string }>(`SELECT query FROM pg_stat_activity WHERE pid = $1 AND state = 'active'`, [pid]);
      return rows[0]?.query.includes(fragment) === true;
    }, () => `backend ${pid} running ${fragment}`);

  const waitUntilGone = (pid: number): Promise<void> =>
    until(async () => (await sql('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).length === 0, () => `backend ${pid} to exit`);
});
