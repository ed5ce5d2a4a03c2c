// postgresSource's lock against the real PostgreSQL: one holder at a time
// with strictly increasing tokens, FIFO, one wake-up per release, a crashed
// holder replaced at its lease end without polling, nothing left behind by
// a waiter that gives up, close() ending everything at once.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ClientClosedError, InvalidArgumentError, LockLostError, LockTimeoutError, SchemaMissingError, type Lock } from '../../../src/index.js';
import { postgresSource, type PostgresLock } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, sourceSchema, uniqueName } from './helpers.js';
import { until, within } from '../../helpers/wait.js';
import { newPool } from '../postgres/helpers.js';

const db = sourceSchema('pgsrc_lock');
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

describe('postgresSource: acquireLock', () => {
  it('8 clients x 25 grants on one lock: one holder at a time, tokens strictly increasing in grant order, the queue empty after', async () => {
    const name = uniqueName('pgsource/contended');
    const sources = Array.from({ length: 8 }, () => db.source({}, 3));
    const tokens: bigint[] = [];
    let inside = 0;
    let overlaps = 0;
    await Promise.all(
      sources.map(async (source) => {
        for (let i = 0; i < 25; i++) {
          const lock = await source.acquireLock(name);
          inside++;
          if (inside > 1) overlaps++;
          tokens.push(lock.token);
          expect(lock.held).toBe(true);
          await new Promise((r) => setImmediate(r));
          inside--;
          await lock.release();
        }
      }),
    );
    expect(overlaps).toBe(0);
    expect(tokens).toHaveLength(200);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    expect(await db.entries(name)).toEqual([]);
  });

  it('grants waiters in the order they arrived (FIFO)', async () => {
    const name = uniqueName('pgsource/fifo');
    const holderSource = db.source();
    const holder = await holderSource.acquireLock(name);
    const order: number[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 6; i++) {
      const source = db.source({}, 2);
      waits.push(
        source.acquireLock(name).then(async (lock) => {
          order.push(i);
          await lock.release();
        }),
      );
      // The next one arrives only once this one is queued.
      await until(async () => (await db.entries(name)).length === i + 2, `waiter ${i} queued`);
    }
    await holder.release();
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('with 50 waiters, every release wakes exactly one of them (one NOTIFY each), and no waiter queries while the holder lives', async () => {
    const name = uniqueName('pgsource/herd');
    const holder = await db.source().acquireLock(name);
    const sources = Array.from({ length: 5 }, () => db.source({}, 3));
    const granted: bigint[] = [];
    const waits = sources.flatMap((source) =>
      Array.from({ length: 10 }, () =>
        source.acquireLock(name).then(async (lock) => {
          granted.push(lock.token);
          await lock.release();
        }),
      ),
    );
    await until(async () => (await db.entries(name)).length === 51, '50 waiters queued');
    await holder.release();
    await Promise.all(waits);
    expect(granted).toHaveLength(50);
    const stats = sources.map((s) => s.stats());
    // 50 releases hand the lock on (the holder's and 49 waiters'); the last finds nobody waiting.
    expect(stats.reduce((n, s) => n + s.wakeups, 0)).toBe(50);
    expect(stats.reduce((n, s) => n + s.claims, 0)).toBe(0);
    expect(await db.entries(name)).toEqual([]);
  });

  it('a holder SIGKILLed in its own process: the head waiter is granted within the lease, with no query before the lease end', async () => {
    const name = uniqueName('pgsource/killed');
    const leaseMs = 2000;
    const child = spawn(process.execPath, [`${ROOT}test/fixtures/postgres-source-holder.mjs`], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL, FK_SCHEMA: db.schema, FK_LOCK: name, FK_LEASE_MS: String(leaseMs) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(child);
    const line = await within(new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve)), 30_000, 'the child to hold the lock');
    const childToken = BigInt((JSON.parse(line) as { token: string }).token);
    const waiterSource = db.source({ leaseMs });
    const waiting = waiterSource.acquireLock(name);
    await until(async () => (await db.entries(name)).length === 2, 'the waiter queued');
    // Two lease lengths with the holder alive: the head waiter's timer keeps moving with the heartbeats, no claim.
    await new Promise((r) => setTimeout(r, 2 * leaseMs));
    expect(waiterSource.stats().claims).toBe(0);
    const killedAt = performance.now();
    child.kill('SIGKILL');
    const lock = await within(waiting, 30_000, 'the waiter to be granted');
    const after = performance.now() - killedAt;
    expect(lock.token > childToken).toBe(true);
    // The child's last renewal was at most a third of the lease before the kill: its session ends within the lease.
    expect(after).toBeLessThan(leaseMs + 1500);
    expect(waiterSource.stats().claims).toBe(1);
    await lock.release();
    expect(await db.entries(name)).toEqual([]);
  });

  it('a waiter that times out or is aborted leaves no row; a try that finds it taken leaves none either', async () => {
    const name = uniqueName('pgsource/giveup');
    const source = db.source();
    const holder = await source.acquireLock(name);
    const other = db.source({}, 2);
    await expect(other.acquireLock(name, { timeoutMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect((await db.entries(name)).map((e) => e.id)).toEqual([holder.entry.toString()]);
    const controller = new AbortController();
    const aborted = other.acquireLock(name, { signal: controller.signal });
    await until(async () => (await db.entries(name)).length === 2, 'the waiter queued');
    controller.abort(new Error('given up'));
    await expect(aborted).rejects.toThrow('given up');
    expect((await db.entries(name)).map((e) => e.id)).toEqual([holder.entry.toString()]);
    expect(await other.tryAcquireLock(name)).toBeNull();
    expect((await db.entries(name)).map((e) => e.id)).toEqual([holder.entry.toString()]);
    await holder.release();
    const taken = await other.tryAcquireLock(name);
    expect(taken?.token! > holder.token).toBe(true);
    await taken!.release();
    expect(await db.entries(name)).toEqual([]);
  });

  it('close() ends every grant at once (reason closed), rejects its waiters, deletes its rows and hands its locks on', async () => {
    const a = uniqueName('pgsource/close-a');
    const b = uniqueName('pgsource/close-b');
    const source = db.source();
    const other = db.source({}, 3);
    const la = await source.acquireLock(a);
    const lb = await source.acquireLock(b);
    const blocker = await other.acquireLock(uniqueName('pgsource/close-c'));
    const waitingOnOther = source.acquireLock(blocker.name);
    const next = other.acquireLock(a);
    await until(async () => (await db.entries(a)).length === 2 && (await db.entries(blocker.name)).length === 2, 'both waiters queued');
    await source.close();
    for (const lock of [la, lb] as Lock[]) {
      expect(lock.held).toBe(false);
      expect((lock.signal.reason as LockLostError).reason).toBe('closed');
    }
    await expect(waitingOnOther).rejects.toBeInstanceOf(ClientClosedError);
    const granted = await within(next, 10_000, 'the other source to be granted the closed source\'s lock');
    expect(granted.token > la.token).toBe(true);
    expect(await db.entries(b)).toEqual([]);
    expect((await db.entries(blocker.name)).length).toBe(1);
    const { rows } = await db.admin.query('SELECT 1 FROM fencekeeper_lock_sessions WHERE id = $1', [la.session.toString()]);
    expect(rows).toEqual([]);
    await expect(source.acquireLock(a)).rejects.toBeInstanceOf(ClientClosedError);
    await granted.release();
    await blocker.release();
  });

  it('identity: the cluster\'s system identifier and the database\'s OID; every grant\'s sequencer carries it', async () => {
    const source = db.source();
    const { rows } = await db.admin.query<{ id: string }>(
      `SELECT (SELECT system_identifier::text FROM pg_control_system()) || '-' || (SELECT oid::text FROM pg_database WHERE datname = current_database()) AS id`,
    );
    expect(await source.identity()).toEqual({ kind: 'postgres', id: rows[0]!.id });
    const lock: PostgresLock = await source.acquireLock(uniqueName('pgsource/id'));
    expect(lock.sequencer).toEqual({ kind: 'lock', name: lock.name, source: { kind: 'postgres', id: rows[0]!.id }, token: lock.token });
    await lock.release();
  });
});

describe('postgresSource: bad input and a missing schema', () => {
  const untouchable = {
    options: { max: 4 },
    connect: () => Promise.reject(new Error('no I/O expected')),
    query: () => Promise.reject(new Error('no I/O expected')),
  };

  it('refuses a bad pool or bad options before any I/O', () => {
    expect(() => postgresSource({} as never)).toThrow(InvalidArgumentError);
    expect(() => postgresSource({ ...untouchable, options: { max: 1 } })).toThrow(/max >= 2/);
    for (const leaseMs of [0, 499, 1.5, Number.NaN, '1000', 86_400_001]) {
      expect(() => postgresSource(untouchable, { leaseMs } as never)).toThrow(InvalidArgumentError);
    }
  });

  it('refuses a bad name or bad acquire options before any I/O', async () => {
    const source = postgresSource(untouchable, { leaseMs: 3000 });
    for (const name of ['', 'a\0b', 'x'.repeat(1025), '\ud800', 7]) {
      await expect(source.acquireLock(name as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(source.tryAcquireLock(name as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    await expect(source.acquireLock('a', { timeoutMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(source.acquireLock('a', { safetyMarginMs: 2000 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(source.tryAcquireLock('a', { timeoutMs: 5 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(source.acquireLock('a', { owner: 5 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('a database without the migration: SchemaMissingError saying to run migrate()', async () => {
    const pool = newPool('pg_catalog', uniqueName('pgsrc_missing'), 2);
    try {
      const source = postgresSource(pool);
      const error = await source.acquireLock(uniqueName('pgsource/missing')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SchemaMissingError);
      expect((error as Error).message).toMatch(/migrate\(/);
      await source.close();
    } finally {
      await pool.end();
    }
  });
});
