// A guard whose store cannot work until the server is set up (PostgreSQL
// without fencekeeper's migrations) answers 500 with the error's code, not
// 503 "try again", and publishes the store's error on
// fencekeeper:express:store-failed; a passing failure stays a 503, published too.
import diagnostics from 'node:diagnostics_channel';
import { express } from './variants.js';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fencing, idempotency, type StoreFailedMessage } from '../../../adapters/express/index.js';
import { PostgresFenceStore, PostgresIdempotencyStore } from '../../../adapters/postgres/index.js';
import { CHANNELS, SchemaMissingError, type FenceStore } from '../../../src/index.js';
import { servedDuring } from './helpers.js';
import { adminPool, newPool, uniqueName } from '../postgres/helpers.js';

const admin = adminPool();
const schema = uniqueName('fk_guard_nomig');
const pool = newPool(schema, 'setup-failure', 4);

beforeAll(async () => {
  await admin.query(`CREATE SCHEMA ${schema}`);
});
afterAll(async () => {
  await pool.end();
  await admin.query(`DROP SCHEMA ${schema} CASCADE`);
});

let published: StoreFailedMessage[] = [];
const listener = (message: unknown): void => void published.push(message as StoreFailedMessage);
beforeEach(() => {
  published = [];
  diagnostics.subscribe(CHANNELS.expressStoreFailed, listener);
});
afterEach(() => {
  diagnostics.unsubscribe(CHANNELS.expressStoreFailed, listener);
});

let ran = 0;
const app = express();
app.post('/fenced', fencing({ store: new PostgresFenceStore(pool), resource: 'guard:setup' }), (_req, res) => {
  ran += 1;
  res.status(204).end();
});
app.post('/idempotent', idempotency({ store: new PostgresIdempotencyStore(pool) }), (_req, res) => {
  ran += 1;
  res.status(204).end();
});
const broken: FenceStore<undefined> = {
  admit: () => Promise.reject(new Error('connection reset')),
  current: () => Promise.resolve(null),
};
app.post('/passing', fencing({ store: broken, resource: 'guard:passing' }), (_req, res) => {
  ran += 1;
  res.status(204).end();
});
const served = servedDuring(app);

async function post(path: string, headers: Record<string, string>): Promise<{ status: number; type: string | null; body: Record<string, unknown> }> {
  const res = await fetch(`http://127.0.0.1:${served.port}${path}`, { method: 'POST', headers });
  return { status: res.status, type: res.headers.get('content-type'), body: await res.json() as Record<string, unknown> };
}

describe('a guard whose store has no schema', () => {
  it.each([
    ['fencing()', '/fenced', { 'fencing-token': '7' }, 'fencing', 'admit', 'fencekeeper_fences'],
    ['idempotency()', '/idempotent', { 'idempotency-key': 'setup-1' }, 'idempotency', 'begin', 'fencekeeper_idempotency_keys'],
  ] as const)('%s answers 500 SCHEMA_MISSING and publishes the store\'s error', async (_name, path, headers, middleware, operation, relation) => {
    const before = ran;
    const answer = await post(path, headers);
    expect(answer.status).toBe(500);
    expect(answer.type).toBe('application/problem+json');
    expect(answer.body).toMatchObject({ status: 500, code: 'SCHEMA_MISSING' });
    expect(String(answer.body['detail'])).not.toContain('try again');
    // The database's text stays with the operator, never in the answer.
    expect(String(answer.body['detail'])).not.toContain(relation);
    expect(ran).toBe(before);
    expect(published).toHaveLength(1);
    expect(published[0]).toMatchObject({ middleware, operation, status: 500, code: 'SCHEMA_MISSING' });
    expect(published[0]!.error).toBeInstanceOf(SchemaMissingError);
    expect((published[0]!.error as SchemaMissingError).relation).toBe(relation);
  });

  it('a store failure a retry may fix stays 503 FENCE_UNAVAILABLE, and is published too', async () => {
    const answer = await post('/passing', { 'fencing-token': '7' });
    expect(answer.status).toBe(503);
    expect(answer.body).toMatchObject({ code: 'FENCE_UNAVAILABLE' });
    expect(published).toHaveLength(1);
    expect(published[0]).toMatchObject({ middleware: 'fencing', operation: 'admit', status: 503, code: 'FENCE_UNAVAILABLE' });
    expect((published[0]!.error as Error).message).toBe('connection reset');
  });
});
