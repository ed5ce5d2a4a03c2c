// withLease against the real PostgreSQL: the work commits only while the
// grant is live on the database's clock. Holders in child processes are
// SIGSTOPped past their lease, and inside withLease.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockLostError } from '../../../src/index.js';
import { withLease } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, sourceSchema, uniqueName } from './helpers.js';
import { jsonLines } from '../../helpers/json-lines.js';
import { within } from '../../helpers/wait.js';

const db = sourceSchema('pgsrc_lease');
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const TABLE = 'lease_writes';
const LEASE_MS = 2000;
const children: ChildProcess[] = [];

beforeAll(async () => {
  await db.admin.query(`CREATE TABLE ${TABLE} (what text NOT NULL)`);
});
afterAll(() => {
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }
});

const writes = async (): Promise<string[]> => (await db.admin.query<{ what: string }>(`SELECT what FROM ${TABLE} ORDER BY what`)).rows.map((r) => r.what);

/** The holder fixture on `lock`, with its stdout as a queue of parsed lines. */
async function holder(lock: string): Promise<{ child: ChildProcess; next: () => Promise<Record<string, unknown>>; token: bigint }> {
  const child = spawn(process.execPath, [`${ROOT}test/fixtures/postgres-source-holder.mjs`], {
    cwd: ROOT,
    env: { ...process.env, DATABASE_URL, FK_SCHEMA: db.schema, FK_LOCK: lock, FK_LEASE_MS: String(LEASE_MS), FK_TABLE: TABLE },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  children.push(child);
  const next = jsonLines(child.stdout!);
  const first = await next();
  return { child, next, token: BigInt(first['token'] as string) };
}

describe('withLease', () => {
  it('commits the work while the grant is live; a released lock is refused before any statement; another source\'s lock is a clear error', async () => {
    const source = db.source({}, 3);
    const lock = await source.acquireLock(uniqueName('pgsource/lease-basic'));
    const pool = db.pool(2);
    expect(await withLease(pool, lock, async (client) => {
      await client.query(`INSERT INTO ${TABLE} VALUES ('basic')`);
      return 'done';
    })).toBe('done');
    expect(await writes()).toContain('basic');
    await expect(withLease(pool, lock, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await lock.release();
    let ran = false;
    await expect(withLease(pool, lock, async () => void (ran = true))).rejects.toBeInstanceOf(LockLostError);
    expect(ran).toBe(false);
    const foreign = { name: 'x', token: 1n, held: true, signal: new AbortController().signal, deadline: Infinity, release: async () => undefined } as never;
    await expect(withLease(pool, foreign, async () => undefined)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('a holder SIGSTOPped past its lease: the next holder gets a larger token; on resume held is false, withLease is refused, nothing commits', async () => {
    const name = uniqueName('pgsource/lease-paused');
    const { child, next, token } = await holder(name);
    const waiterSource = db.source({ leaseMs: LEASE_MS }, 3);
    const waiting = waiterSource.acquireLock(name);
    child.kill('SIGSTOP');
    const successor = await within(waiting, 30_000, 'the successor to be granted');
    expect(successor.token > token).toBe(true);
    child.kill('SIGCONT');
    child.stdin!.write('check\n');
    expect(await next()).toEqual({ held: false, withLease: 'LOCK_LOST' });
    expect(await writes()).not.toContain('check');
    await successor.release();
  });

  it('a holder SIGSTOPped inside withLease: the next holder is granted within lease + 2 s, and none of the paused transaction\'s writes commit', async () => {
    const name = uniqueName('pgsource/lease-inside');
    const { child, next } = await holder(name);
    const waiterSource = db.source({ leaseMs: LEASE_MS }, 3);
    const waiting = waiterSource.acquireLock(name);
    child.stdin!.write('work\n');
    expect(await next()).toEqual({ inside: true });
    const stoppedAt = performance.now();
    child.kill('SIGSTOP');
    const successor = await within(waiting, 30_000, 'the successor to be granted');
    expect(performance.now() - stoppedAt).toBeLessThan(LEASE_MS + 2000);
    child.kill('SIGCONT');
    child.stdin!.write('resume\n');
    const { work } = await next();
    expect(work).not.toBe('committed');
    const rows = await writes();
    expect(rows).not.toContain('inside-1');
    expect(rows).not.toContain('inside-2');
    await successor.release();
  });
});
