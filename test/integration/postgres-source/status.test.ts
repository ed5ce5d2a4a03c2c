// postgresSource's elections, lockStatus and observeLock against the real
// PostgreSQL, and Symbol.asyncDispose.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../../src/index.js';
import { sourceSchema, uniqueName } from './helpers.js';
import { until, within } from '../../helpers/wait.js';

const db = sourceSchema('pgsrc_status');

describe('postgresSource: campaign', () => {
  it('elects one candidate at a time in arrival order, each later epoch larger; elections and locks of one name are apart', async () => {
    const name = uniqueName('pgsource/election');
    const a = db.source();
    const b = db.source({}, 2);
    const first = await a.campaign(name, { id: 'candidate-a' });
    expect(first.id).toBe('candidate-a');
    expect(first.sequencer).toMatchObject({ kind: 'election', name, token: first.epoch });
    const lock = await b.tryAcquireLock(name);
    expect(lock).not.toBeNull();
    let secondElected = false;
    const second = b.campaign(name, { id: 'candidate-b' }).then((leader) => {
      secondElected = true;
      return leader;
    });
    await until(async () => (await db.admin.query(`SELECT 1 FROM fencekeeper_lock_entries WHERE kind = 'election' AND name = $1`, [name])).rowCount === 2, 'the second candidate queued');
    expect(secondElected).toBe(false);
    await first.resign();
    expect(first.held).toBe(false);
    const next = await within(second, 10_000, 'the second candidate to be elected');
    expect(next.id).toBe('candidate-b');
    expect(next.epoch > first.epoch).toBe(true);
    expect(next.held).toBe(true);
    await next.resign();
    await lock!.release();
  });
});

describe('postgresSource: lockStatus', () => {
  it('the live holder and the waiters in grant order with their owners, and the database\'s commit settings', async () => {
    const name = uniqueName('pgsource/status');
    const source = db.source({}, 4);
    const holder = await source.acquireLock(name, { owner: 'holder' });
    const w1 = source.acquireLock(name, { owner: 'waiter-1' });
    await until(async () => (await db.entries(name)).length === 2, 'waiter 1 queued');
    const w2 = source.acquireLock(name, { owner: 'waiter-2' });
    await until(async () => (await db.entries(name)).length === 3, 'waiter 2 queued');
    const status = await source.lockStatus(name);
    const settings = (await db.admin.query<{ c: string; s: string }>(`SELECT current_setting('synchronous_commit') AS c, current_setting('synchronous_standby_names') AS s`)).rows[0]!;
    expect(status).toMatchObject({ name, synchronousCommit: settings.c, synchronousStandbyNames: settings.s });
    expect(status.holder).toMatchObject({ owner: 'holder', token: holder.token, waiting: false, entry: holder.entry, session: holder.session });
    expect(status.waiters.map((w) => [w.owner, w.waiting, w.token])).toEqual([
      ['waiter-1', true, 0n],
      ['waiter-2', true, 0n],
    ]);
    await holder.release();
    const first = await w1;
    const after = await source.lockStatus(name);
    expect(after.holder).toMatchObject({ owner: 'waiter-1', token: first.token });
    expect(after.waiters.map((w) => w.owner)).toEqual(['waiter-2']);
    await first.release();
    await (await w2).release();
    expect(await source.lockStatus(name)).toMatchObject({ holder: null, waiters: [] });
    await expect(source.lockStatus('a\0b')).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('postgresSource: observeLock', () => {
  it('answers from a cache a NOTIFY keeps fresh: onChange on every change of the queue, nothing after close', async () => {
    const name = uniqueName('pgsource/observed');
    const watcher = db.source({}, 3);
    const source = db.source({}, 3);
    const observer = watcher.observeLock(name);
    expect(await observer.holder()).toBeNull();
    let changes = 0;
    observer.onChange(() => changes++);
    const lock = await source.acquireLock(name, { owner: 'observed-holder' });
    await until(() => changes > 0, 'a change after the grant');
    expect(await observer.holder()).toMatchObject({ owner: 'observed-holder', token: lock.token });
    const seen = changes;
    // Nothing changed: answered from the cache, no change reported.
    expect(await observer.queue()).toHaveLength(1);
    expect(changes).toBe(seen);
    const waiting = source.acquireLock(name, { owner: 'observed-waiter' });
    await until(() => changes > seen, 'a change after the waiter joined');
    expect((await observer.queue()).map((e) => e.owner)).toEqual(['observed-holder', 'observed-waiter']);
    const before = changes;
    await lock.release();
    await until(() => changes > before, 'a change after the release');
    expect(await observer.holder()).toMatchObject({ owner: 'observed-waiter' });
    observer.close();
    await until(async () => (await db.admin.query('SELECT 1 FROM fencekeeper_lock_observers WHERE name = $1', [name])).rowCount === 0, 'the observer\'s registration deleted');
    const closedAt = changes;
    await (await waiting).release();
    // Still answers after close, with a fresh read.
    expect(await observer.holder()).toBeNull();
    expect(changes).toBe(closedAt);
  });
});

describe('postgresSource: Symbol.asyncDispose', () => {
  it('is close(): the session and its grants end', async () => {
    const source = db.source();
    const lock = await source.acquireLock(uniqueName('pgsource/dispose'));
    await source[Symbol.asyncDispose]();
    expect(lock.held).toBe(false);
    expect((await db.admin.query('SELECT 1 FROM fencekeeper_lock_sessions WHERE id = $1', [lock.session.toString()])).rowCount).toBe(0);
  });
});
