// The paused holder with an outside effect, with real processes, a real
// ZooKeeper lock, a real PostgreSQL ledger and a real HTTP service: holder A
// (a child process) records the intent and calls the service, and freezes
// itself with SIGSTOP (after the call, or between recording the intent and
// sending the call); its session expires; B (this process) takes the lock
// with a larger token, finds the effect pending and reconciles; A is resumed.
// The service counts what it actually executed. And A frozen after recording
// the intent but before withEffect decides to send, resumed past its
// deadline: it must send nothing.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import express from 'express';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MemoryIdempotencyStore, idempotency } from '../../../adapters/express/index.js';
import { DefiniteFailure, migrate, pendingEffects, withEffect, type EffectContext, type ReconcileContext } from '../../../adapters/postgres/index.js';
import { EffectPendingError, type Lock } from '../../../src/index.js';
import { ZooKeeperClient, acquireLock } from '../../../src/sources/zookeeper/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { cli } from '../cli/helpers.js';
import { serve, type Served } from '../express/helpers.js';
import { DATABASE_URL, createSchema, dropSchema, newPool, uniqueName } from './helpers.js';
import { until } from '../../helpers/wait.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const FIXTURE = `${ROOT}test/fixtures/effect-holder.mjs`;
const GRACE_MS = 200;

/** Where holder A freezes itself (test/fixtures/effect-holder.mjs). */
type Pause = 'after-call' | 'before-send' | 'after-claim';

interface Line {
  event: string;
  [key: string]: unknown;
}

interface Holder {
  readonly child: ChildProcess;
  /** The first report of `event`; fails if the holder exits without it. */
  next(event: string): Promise<Line>;
  /** The process is stopped (state T in /proc), i.e. its SIGSTOP landed. */
  stopped(): Promise<void>;
}

function watch(child: ChildProcess): Holder {
  const lines: Line[] = [];
  let stderr = '';
  createInterface({ input: child.stdout! }).on('line', (text) => lines.push(JSON.parse(text) as Line));
  child.stderr!.setEncoding('utf8').on('data', (t: string) => (stderr += t));
  const exited = (): boolean => child.exitCode !== null || child.signalCode !== null;
  return {
    child,
    async next(event) {
      await until(() => exited() || lines.some((l) => l.event === event), `holder A to report "${event}"`, 60_000);
      const found = lines.find((l) => l.event === event);
      if (found === undefined) throw new Error(`holder A exited before "${event}":\n${stderr}`);
      return found;
    },
    stopped: () => until(() => /\) T /.test(readFileSync(`/proc/${child.pid!}/stat`, 'utf8')), `holder A (${child.pid!}) to be stopped`),
  };
}

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
const schema = uniqueName('fk_fxpause');
let pool: pg.Pool;
let zk: ZooKeeperClient;
let childUrl: string;
const children: ChildProcess[] = [];
const services: Service[] = [];

beforeAll(async () => {
  await createSchema(admin, schema);
  pool = newPool(schema, uniqueName('fk_fxpause'), 6);
  await migrate(pool);
  zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 10_000 });
  const url = new URL(DATABASE_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  childUrl = url.href;
});
afterEach(async () => {
  for (const svc of services.splice(0)) await svc.served.close();
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }
});
afterAll(async () => {
  await zk?.close();
  await pool?.end();
  await dropSchema(admin, schema);
  await admin.end();
});

function holderA(env: { lock: string; resource: string; key: string; service: string; mode: 'ledger' | 'direct'; pause: Pause }): Holder {
  const child = spawn(process.execPath, [FIXTURE], {
    cwd: ROOT,
    env: {
      ...process.env,
      FK_CONNECT: testServers().zkStandalone,
      FK_LOCK: env.lock,
      // Long enough that A's call lands before its deadline on a loaded machine;
      // its expiry (while A is frozen) is what lets B take the lock.
      FK_SESSION_MS: '5000',
      DATABASE_URL: childUrl,
      FK_RESOURCE: env.resource,
      FK_KEY: env.key,
      FK_SERVICE_URL: env.service,
      FK_MODE: env.mode,
      FK_PAUSE: env.pause,
      FK_GRACE_MS: String(GRACE_MS),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  return watch(child);
}

/** What the outside service executed (not what it was asked), per key. */
interface Service {
  readonly served: Served;
  readonly url: string;
  readonly executed: Map<string, number>;
  /** Requests refused because they arrived after their deadline. */
  readonly refusedLate: { key: string; deadline: number; arrived: number }[];
  total(): number;
}

/** A service that deduplicates by Idempotency-Key (idempotency() in front of its handler). */
async function deduplicatingService(): Promise<Service> {
  const executed = new Map<string, number>();
  const app = express();
  app.post('/charge', express.json(), idempotency({ store: new MemoryIdempotencyStore() }), (req, res) => {
    const key = String(req.headers['idempotency-key'] ?? (req.body as { key: string }).key);
    executed.set(key, (executed.get(key) ?? 0) + 1);
    res.status(201).json({ charged: (req.body as { key: string }).key, execution: executed.get(key) });
  });
  return service(app, executed, []);
}

/**
 * A service that does not deduplicate. With `deadlines`, it refuses a call
 * arriving after its request-deadline header (epoch ms) and answers "did key
 * K happen?" at GET /charges/K; without, it executes whatever arrives.
 */
async function plainService(deadlines: boolean): Promise<Service> {
  const executed = new Map<string, number>();
  const refusedLate: Service['refusedLate'] = [];
  const app = express();
  app.post('/charge', express.json(), (req, res) => {
    const key = String(req.headers['idempotency-key'] ?? (req.body as { key: string }).key);
    const deadline = Number(req.headers['request-deadline']);
    const arrived = Date.now();
    if (deadlines && !(arrived <= deadline)) {
      refusedLate.push({ key, deadline, arrived });
      res.status(422).json({ refused: 'the request arrived after its deadline' });
      return;
    }
    executed.set(key, (executed.get(key) ?? 0) + 1);
    res.status(201).json({ charged: (req.body as { key: string }).key, execution: executed.get(key) });
  });
  if (deadlines) app.get('/charges/:key', (req, res) => res.json({ happened: executed.has(req.params.key) }));
  return service(app, executed, refusedLate);
}

async function service(app: express.Express, executed: Map<string, number>, refusedLate: Service['refusedLate']): Promise<Service> {
  const served = await serve(app);
  const url = `http://127.0.0.1:${served.port}/charge`;
  const svc: Service = { served, url, executed, refusedLate, total: () => [...executed.values()].reduce((a, b) => a + b, 0) };
  services.push(svc);
  return svc;
}

/** B's effect: the same call A makes. */
function charge(url: string, key: string): (context: EffectContext) => Promise<unknown> {
  return async ({ idempotencyKey, deadline }) => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey, 'request-deadline': String(deadline?.getTime()) },
      body: JSON.stringify({ key }),
    });
    if (res.ok) return res.json();
    if (res.status >= 400 && res.status < 500) throw new DefiniteFailure(`refused: ${res.status}`);
    throw new Error(`the service answered ${res.status}`);
  };
}

/** Acquire the lock A holds: waits for A's session to expire while it is frozen. */
async function takeOver(name: string, holderToken: bigint): Promise<Lock> {
  const lock = await acquireLock(zk, name);
  expect(lock.token > holderToken).toBe(true);
  return lock;
}

/** Start holder A against `svc` and wait until it has frozen itself at `pause`. */
async function frozenHolder(svc: Service, key: string, mode: 'ledger' | 'direct', pause: Pause): Promise<{ a: Holder; tokenA: bigint; lockName: string; resource: string }> {
  const lockName = uniqueLockName('fx');
  const resource = uniqueName('payments');
  const a = holderA({ lock: lockName, resource, key, service: svc.url, mode, pause });
  const tokenA = BigInt((await a.next('locked')).token as string);
  if (pause === 'after-call') expect((await a.next('called')).status).toBe(201);
  else await a.next('pausing');
  await a.stopped();
  return { a, tokenA, lockName, resource };
}

describe('the paused holder with an outside effect', () => {
  it('a service that deduplicates: A frozen after the call, B reconciles by sending again with the same key: executed once; A resumed is refused', async () => {
    const svc = await deduplicatingService();
    const { a, tokenA, lockName, resource } = await frozenHolder(svc, 'order-7', 'ledger', 'after-call');
    expect(svc.total()).toBe(1);

    const lockB = await takeOver(lockName, tokenA);
    const reconciled: ReconcileContext[] = [];
    const b = await withEffect(pool, { resource, token: lockB.token, key: 'order-7' }, charge(svc.url, 'order-7'), {
      deadline: lockB.deadline,
      reconcile: async (context) => {
        reconciled.push(context);
        // Sent again with the same key: the service answers what it did the first time.
        const res = await fetch(svc.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': context.idempotencyKey },
          body: JSON.stringify({ key: 'order-7' }),
        });
        if (res.status === 201) return { outcome: 'succeeded', result: await res.json() };
        return { outcome: 'unknown' };
      },
    });
    expect(reconciled).toHaveLength(1);
    expect(reconciled[0]?.recorded).toMatchObject({ state: 'pending', token: tokenA });
    expect(b).toMatchObject({ source: 'reconciled', result: { charged: 'order-7', execution: 1 } });
    expect(svc.total()).toBe(1);

    a.child.kill('SIGCONT');
    expect(await a.next('result')).toMatchObject({ ok: false, name: 'StaleTokenError', current: String(lockB.token) });
    expect(svc.total()).toBe(1);
    expect(await pendingEffects(pool, { resource })).toEqual([]);
    await lockB.release();
  });

  it('without the ledger, the same code calling the service directly executes it twice', async () => {
    const svc = await deduplicatingService();
    const { a, tokenA, lockName } = await frozenHolder(svc, 'order-8', 'direct', 'after-call');
    const lockB = await takeOver(lockName, tokenA);
    // B does not know what A did: it makes the call again.
    const res = await fetch(svc.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ key: 'order-8' }) });
    expect(res.status).toBe(201);
    a.child.kill('SIGCONT');
    expect(await a.next('result')).toMatchObject({ ok: true, status: 201 });
    expect(svc.executed.get('order-8')).toBe(2);
    await lockB.release();
  });

  it('a service that does not deduplicate but enforces deadlines: A frozen after the call; B asks "did it happen?": executed once', async () => {
    const svc = await plainService(true);
    const { a, tokenA, lockName, resource } = await frozenHolder(svc, 'order-9', 'ledger', 'after-call');
    const lockB = await takeOver(lockName, tokenA);
    const b = await withEffect(pool, { resource, token: lockB.token, key: 'order-9' }, charge(svc.url, 'order-9'), {
      deadline: lockB.deadline,
      graceMs: GRACE_MS,
      reconcile: lookup(svc.url),
    });
    expect(b).toMatchObject({ source: 'reconciled', result: { happened: true } });
    a.child.kill('SIGCONT');
    expect(await a.next('result')).toMatchObject({ ok: false, name: 'StaleTokenError' });
    expect([...svc.executed.values()]).toEqual([1]);
    expect(svc.refusedLate).toEqual([]);
    await lockB.release();
  });

  it('the same service, A frozen between recording the intent and sending: B waits out A\'s deadline, runs it; A\'s late request is refused by the service: executed once', async () => {
    const svc = await plainService(true);
    const { a, tokenA, lockName, resource } = await frozenHolder(svc, 'order-10', 'ledger', 'before-send');
    const [intent] = await pendingEffects(pool, { resource });
    expect(intent).toMatchObject({ key: 'order-10', token: tokenA });
    expect(svc.total()).toBe(0);

    const lockB = await takeOver(lockName, tokenA);
    const asked: ReconcileContext[] = [];
    const b = await withEffect(pool, { resource, token: lockB.token, key: 'order-10' }, charge(svc.url, 'order-10'), {
      deadline: lockB.deadline,
      graceMs: GRACE_MS,
      reconcile: async (context) => {
        asked.push(context);
        return lookup(svc.url)(context);
      },
    });
    expect(asked).toHaveLength(1);
    expect(b).toMatchObject({ source: 'ran', result: { charged: 'order-10', execution: 1 } });
    expect(svc.executed.get(b.idempotencyKey)).toBe(1);

    // A wakes up and sends the request it had prepared, with its own deadline, long past.
    a.child.kill('SIGCONT');
    const result = await a.next('result');
    expect((await a.next('called')).status).toBe(422);
    expect(svc.refusedLate).toHaveLength(1);
    expect(svc.refusedLate[0]!.deadline).toBe(intent!.deadline!.getTime());
    expect(svc.refusedLate[0]!.arrived).toBeGreaterThan(svc.refusedLate[0]!.deadline);
    // Its refusal is a definite failure, but A may record nothing any more.
    expect(result).toMatchObject({ ok: false, name: 'StaleTokenError' });
    expect(svc.total()).toBe(1);
    expect(await pendingEffects(pool, { resource })).toEqual([]);
    await lockB.release();
  });

  // The freeze lands after the claim committed and before withEffect's
  // last look at the deadline: A's deadline passes while it is frozen, and
  // the service would execute whatever arrives. Only that look stands
  // between A and a call sent by a holder that may no longer act.
  it('A frozen between recording the intent and deciding to send, past its deadline: resumed, it sends nothing; the intent stays pending', async () => {
    const svc = await plainService(false);
    const { a, tokenA, resource } = await frozenHolder(svc, 'order-12', 'ledger', 'after-claim');
    const [intent] = await pendingEffects(pool, { resource });
    expect(intent).toMatchObject({ key: 'order-12', token: tokenA });
    const deadline = intent!.deadline!.getTime();
    await until(() => Date.now() > deadline + 500, 'holder A\'s deadline to pass while it is frozen');

    a.child.kill('SIGCONT');
    const result = await a.next('result');
    expect(svc.total(), 'holder A sent its call after its deadline').toBe(0);
    expect(result).toMatchObject({ ok: false, name: 'EffectPendingError', code: 'UNKNOWN_OUTCOME' });
    expect(result['message']).toContain('was not sent');
    expect(await pendingEffects(pool, { resource })).toEqual([expect.objectContaining({ key: 'order-12', token: tokenA, state: 'pending' })]);
  });

  it('a service that neither deduplicates nor enforces deadlines: the ledger never runs it twice on its own; it stays pending for an operator', async () => {
    const svc = await plainService(false);
    const { a, tokenA, lockName, resource } = await frozenHolder(svc, 'order-11', 'ledger', 'before-send');
    const lockB = await takeOver(lockName, tokenA);
    // Nothing can tell B whether A's call will still land: no reconcile to give.
    const refused = await withEffect(pool, { resource, token: lockB.token, key: 'order-11' }, charge(svc.url, 'order-11'), { deadline: lockB.deadline })
      .then(() => undefined, (error: unknown) => error);
    expect(refused).toBeInstanceOf(EffectPendingError);
    expect(refused).toMatchObject({ retryable: false, token: tokenA });
    expect(svc.total()).toBe(0);

    a.child.kill('SIGCONT');
    // A's late request lands (nothing refuses it); its record is refused.
    expect(await a.next('result')).toMatchObject({ ok: false, name: 'StaleTokenError' });
    expect(svc.total()).toBe(1);
    const pending = await pendingEffects(pool, { resource });
    expect(pending.map((p) => [p.key, p.token])).toEqual([['order-11', tokenA]]);

    // The operator's view: fencekeeper effects --pending --json.
    const listing = await cli(['effects', '--pending', '--json', '--resource', resource], { DATABASE_URL: childUrl }).done;
    expect(listing.code).toBe(0);
    const listed = JSON.parse(listing.stdout) as { resource: string; key: string; state: string; token: string; idempotencyKey: string }[];
    expect(listed.map((e) => [e.resource, e.key, e.state, e.token, e.idempotencyKey])).toEqual([[resource, 'order-11', 'pending', String(tokenA), pending[0]!.idempotencyKey]]);
    await lockB.release();
  });
});

/** Reconcile against "did key K happen?": trust a "no" only once A's deadline has passed. */
function lookup(url: string): (context: ReconcileContext) => Promise<{ outcome: 'succeeded'; result: unknown } | { outcome: 'not-happened' }> {
  const happened = async (key: string): Promise<boolean> => ((await (await fetch(`${url.replace(/\/charge$/, '/charges/')}${key}`)).json()) as { happened: boolean }).happened;
  return async (context) => {
    if (await happened(context.idempotencyKey)) return { outcome: 'succeeded', result: { happened: true } };
    await context.waitOutDeadline();
    if (await happened(context.idempotencyKey)) return { outcome: 'succeeded', result: { happened: true } };
    return { outcome: 'not-happened' };
  };
}
