// The effect ledger under concurrency, with real processes: 8 workers x 50
// effects, drawn from a small shared set of keys (so workers keep meeting
// each other's effects), tokens from a real ZooKeeper lock that turns over
// all the time (each worker may be acting on a lock that has moved on),
// workers frozen with SIGSTOP at random moments, and effects that fail on
// purpose before or after their call. The service does not deduplicate: it
// only refuses calls arriving after their deadline and answers "did key K
// happen?". Every effect must have been executed at most once, and
// pendingEffects must list exactly the effects whose outcome no call recorded.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listEffects, migrate, pendingEffects } from '../../../adapters/postgres/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { serve, type Served } from '../express/helpers.js';
import { DATABASE_URL, createSchema, dropSchema, newPool, uniqueName } from './helpers.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const WORKER = `${ROOT}test/fixtures/effect-worker.mjs`;
const WORKERS = 8;
const EFFECTS = 50;
const KEYS = 20; // per resource: 40 effects for 400 calls

interface Call {
  t: 'call';
  worker: number;
  resource: string;
  key: string;
  outcome: 'ok' | 'failed' | 'pending' | 'stale' | 'late' | 'other';
  source?: string;
  invoked: boolean;
  message?: string;
}

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
const schema = uniqueName('fk_fxconc');
let pool: pg.Pool;
let served: Served;
/** What the service executed, per effect ("resource/key"), and by idempotency key. */
const executed = new Map<string, number>();
const happened = new Set<string>();
let refusedLate = 0;
let refusedOnRequest = 0;

beforeAll(async () => {
  await createSchema(admin, schema);
  pool = newPool(schema, uniqueName('fk_fxconc'), 4);
  await migrate(pool);
  const app = express();
  app.post('/charge', express.json(), (req, res) => {
    const { resource, key } = req.body as { resource: string; key: string };
    if (!(Date.now() <= Number(req.headers['request-deadline']))) {
      refusedLate += 1;
      res.status(422).json({ refused: 'late' });
      return;
    }
    if (req.headers['x-refuse'] !== undefined) {
      refusedOnRequest += 1;
      res.status(402).json({ refused: String(req.headers['x-refuse']) });
      return;
    }
    const effect = `${resource}/${key}`;
    executed.set(effect, (executed.get(effect) ?? 0) + 1);
    happened.add(String(req.headers['idempotency-key']));
    res.status(201).json({ effect });
  });
  app.get('/charges/:key', (req, res) => res.json({ happened: happened.has(req.params.key) }));
  served = await serve(app);
});
afterAll(async () => {
  await served?.close();
  await pool?.end();
  await dropSchema(admin, schema);
  await admin.end();
});

function worker(n: number, env: NodeJS.ProcessEnv): { child: ChildProcess; calls: Call[]; done: Promise<{ code: number | null; stderr: string }> } {
  const child = spawn(process.execPath, [WORKER], { cwd: ROOT, env: { ...process.env, ...env, FK_WORKER: String(n) }, stdio: ['ignore', 'pipe', 'pipe'] });
  const calls: Call[] = [];
  let stderr = '';
  createInterface({ input: child.stdout! }).on('line', (text) => {
    const line = JSON.parse(text) as Call | { t: 'done' };
    if (line.t === 'call') calls.push({ ...line, worker: n });
  });
  child.stderr!.setEncoding('utf8').on('data', (t: string) => (stderr += t));
  const done = new Promise<{ code: number | null; stderr: string }>((resolve) => child.on('close', (code) => resolve({ code, stderr })));
  return { child, calls, done };
}

describe('the effect ledger under concurrency', () => {
  it(`${WORKERS} workers x ${EFFECTS} effects, overlapping keys, lock turnover and SIGSTOPs: each effect executed at most once, pendingEffects exactly the unrecorded ones`, { timeout: 240_000 }, async () => {
    const resources = [uniqueName('acct'), uniqueName('acct')];
    const url = new URL(DATABASE_URL);
    url.searchParams.set('options', `-c search_path=${schema}`);
    const env = {
      FK_CONNECT: testServers().zkStandalone,
      FK_LOCK: uniqueLockName('fxconc'),
      DATABASE_URL: url.href,
      FK_RESOURCES: resources.join(','),
      FK_KEYS: String(KEYS),
      FK_EFFECTS: String(EFFECTS),
      FK_SERVICE_URL: `http://127.0.0.1:${served.port}`,
    };
    const workers = Array.from({ length: WORKERS }, (_, i) => worker(i, env));

    // The nemesis: freeze a random live worker for 100-600 ms, again and again.
    let pauses = 0;
    let running = true;
    const nemesis = (async () => {
      while (running) {
        await new Promise((r) => setTimeout(r, 150 + Math.random() * 300));
        const live = workers.filter((w) => w.child.exitCode === null && w.child.signalCode === null);
        const victim = live[Math.floor(Math.random() * live.length)];
        if (victim === undefined || !running) continue;
        try {
          victim.child.kill('SIGSTOP');
          pauses += 1;
          await new Promise((r) => setTimeout(r, 100 + Math.random() * 500));
        } finally {
          victim.child.kill('SIGCONT');
        }
      }
    })();
    const ended = await Promise.all(workers.map((w) => w.done));
    running = false;
    await nemesis;
    for (const [i, end] of ended.entries()) expect({ worker: i, code: end.code, stderr: end.stderr }).toEqual({ worker: i, code: 0, stderr: '' });

    const calls = workers.flatMap((w) => w.calls);
    expect(calls).toHaveLength(WORKERS * EFFECTS);
    expect(calls.filter((c) => c.outcome === 'other')).toEqual([]);

    // At most once, whatever happened.
    const twice = [...executed].filter(([, n]) => n > 1);
    expect(twice).toEqual([]);

    // What the calls saw, effect by effect, independently of the ledger.
    const byEffect = new Map<string, Call[]>();
    for (const call of calls) {
      const id = `${call.resource}/${call.key}`;
      byEffect.set(id, [...(byEffect.get(id) ?? []), call]);
    }
    const ledger = new Map<string, string>();
    for (const resource of resources) for (const e of await listEffects(pool, { resource })) ledger.set(`${e.resource}/${e.key}`, e.state);
    const expectedPending: string[] = [];
    for (const [id, seen] of byEffect) {
      const ok = seen.some((c) => c.outcome === 'ok');
      const failed = seen.some((c) => c.outcome === 'failed');
      // An intent was recorded if some call ran the effect, or was told it is pending.
      const intended = ok || failed || seen.some((c) => c.invoked || c.outcome === 'pending');
      expect({ id, okAndFailed: ok && failed }).toEqual({ id, okAndFailed: false });
      if (ok) expect({ id, state: ledger.get(id), executed: executed.get(id) }).toEqual({ id, state: 'succeeded', executed: 1 });
      else if (failed) expect({ id, state: ledger.get(id), executed: executed.get(id) ?? 0 }).toEqual({ id, state: 'failed', executed: 0 });
      else if (intended) expectedPending.push(id);
      else expect({ id, state: ledger.get(id) }).toEqual({ id, state: undefined });
    }
    const listed = (await Promise.all(resources.map((resource) => pendingEffects(pool, { resource })))).flat().map((e) => `${e.resource}/${e.key}`);
    expect(listed.sort()).toEqual(expectedPending.sort());
    for (const id of listed) expect(executed.get(id) ?? 0).toBeLessThanOrEqual(1);

    // The run met what it set out to provoke.
    const outcomes = (outcome: Call['outcome']): number => calls.filter((c) => c.outcome === outcome).length;
    const summary = {
      ok: outcomes('ok'),
      reconciled: calls.filter((c) => c.source === 'reconciled').length,
      recorded: calls.filter((c) => c.source === 'recorded').length,
      failed: outcomes('failed'),
      pending: outcomes('pending'),
      stale: outcomes('stale'),
      late: outcomes('late'),
      pauses,
      refusedLate,
      refusedOnRequest,
      executed: [...executed.values()].reduce((a, b) => a + b, 0),
      stillPending: listed.length,
    };
    console.log('effects concurrency:', JSON.stringify(summary));
    expect(summary.ok).toBeGreaterThan(0);
    expect(summary.reconciled).toBeGreaterThan(0);
    expect(summary.recorded).toBeGreaterThan(0);
    expect(summary.pending).toBeGreaterThan(0);
    expect(summary.stale).toBeGreaterThan(0);
    expect(summary.pauses).toBeGreaterThan(0);
  });
});
