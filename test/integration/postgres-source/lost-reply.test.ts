// An enter whose reply is lost (the statement reached PostgreSQL and
// committed, its answer never came back) against the real PostgreSQL: the
// acquire rejects, and its entry is deleted by its request key before the
// caller hears of it. Only its own: a waiter of the same session (same
// source) keeps its place and is granted in turn.
import { afterEach, describe, expect, it } from 'vitest';
import { postgresSource, type PgSourcePool, type PostgresSource } from '../../../adapters/postgres/index.js';
import { until, within } from '../../helpers/wait.js';
import { sourceSchema, uniqueName } from './helpers.js';

const db = sourceSchema('pgsrc_lostreply');
const opened: PostgresSource[] = [];
afterEach(async () => {
  for (const source of opened.splice(0)) await source.close();
});

describe('postgresSource: an enter whose reply is lost', () => {
  it('rejects, and deletes only its own entry (found by its request key): the session\'s other waiter keeps its place', async () => {
    const name = uniqueName('pgsource/lostreply');
    const holder = await db.source().acquireLock(name);
    const pool = db.pool(4);
    let loseNextEnter = false;
    // The real pool, with one enter's answer dropped after PostgreSQL has run it.
    const lossy: PgSourcePool = {
      options: { max: 4 },
      connect: () => pool.connect(),
      query: (config) => {
        const sent = pool.query(config as never) as unknown as ReturnType<PgSourcePool['query']>;
        if (!loseNextEnter || !config.text.includes('fencekeeper_lock_enter')) return sent;
        loseNextEnter = false;
        return sent.then(() => Promise.reject(new Error('the reply was lost')));
      },
    };
    const source = postgresSource(lossy);
    opened.push(source);
    const first = source.acquireLock(name, { timeoutMs: 20_000 });
    await until(async () => (await db.entries(name)).length === 2, 'the first waiter queued');
    const firstEntry = (await db.entries(name))[1]!.id;
    loseNextEnter = true;
    await expect(source.acquireLock(name, { timeoutMs: 20_000 })).rejects.toThrow('the reply was lost');
    expect((await db.entries(name)).map((e) => e.id)).toEqual([holder.entry.toString(), firstEntry]);
    await holder.release();
    const granted = await within(first, 10_000, 'the first waiter to be granted');
    expect(granted.entry.toString()).toBe(firstEntry);
    await granted.release();
    expect(await db.entries(name)).toEqual([]);
  });
});
