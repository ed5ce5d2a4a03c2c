// withFence and PostgresFenceStore on a pg.Pool open their transaction with
// one message (BEGIN, the fence upsert, the savepoint) and close it with one
// more, so a fenced transaction costs the round trips of a plain one. The
// resource travels inside that message as an E'' literal: fuzzed here against
// the real server, every name is either refused before any SQL or stored
// exactly, and nothing else in the database changes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { InvalidArgumentError, SequencerMismatchError, StaleTokenError, type FencingToken } from '../../../src/index.js';
import { PostgresFenceStore, bindFence, migrate, withFence, type Database } from '../../../adapters/postgres/index.js';
import { DATABASE_URL, createSchema, dropSchema, newPool, uniqueName, waitForFenceWaiter, type TestDatabase } from './helpers.js';

/**
 * A pg.Pool look-alike that records the text of every message sent on its
 * clients. Like pg.Pool it hands out the same client object for the same
 * connection (what the once-per-connection PREPARE keys on).
 */
function recordingPool(pool: pg.Pool) {
  const sent: string[] = [];
  const wrappers = new WeakMap<pg.PoolClient, object>();
  const wrapper = {
    sent,
    query: (config: pg.QueryConfig) => {
      sent.push(config.text);
      return pool.query(config);
    },
    connect: async () => {
      const client = await pool.connect();
      let wrapped = wrappers.get(client);
      if (wrapped === undefined) {
        wrapped = {
          query: (config: pg.QueryConfig | string, values?: unknown[]) => {
            sent.push(typeof config === 'string' ? config : config.text);
            return values === undefined ? client.query(config as pg.QueryConfig) : client.query(config as string, values);
          },
          release: (error?: Error | boolean) => client.release(error),
          processID: (client as unknown as { processID?: number }).processID,
          on: (event: 'error', listener: (error: Error) => void) => client.on(event, listener),
          removeListener: (event: 'error', listener: (error: Error) => void) => client.removeListener(event, listener),
        };
        wrappers.set(client, wrapped);
      }
      return wrapped;
    },
    end: () => pool.end(),
  };
  return wrapper;
}

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
const schema = uniqueName('fk_pgtrip');
let pool: pg.Pool;
let recording: ReturnType<typeof recordingPool>;
let db: pg.Pool;
/** Kysely over the same recording pool. */
let kysely: Kysely<TestDatabase>;

beforeAll(async () => {
  await createSchema(admin, schema);
  // One connection: every call below reuses it, so what it sends is all there is.
  pool = newPool(schema, uniqueName('fk_pgtrip'), 1);
  recording = recordingPool(pool);
  db = recording as unknown as pg.Pool;
  kysely = new Kysely<TestDatabase>({ dialect: new PostgresDialect({ pool: recording as unknown as pg.Pool }) });
  await migrate(pool);
  await pool.query('CREATE TABLE docs (id int PRIMARY KEY, body text)');
  await pool.query(`CREATE TABLE canary (id int PRIMARY KEY, body text); INSERT INTO canary VALUES (1, 'untouched')`);
});

afterAll(async () => {
  await kysely.destroy(); // ends the pool, through the wrapper
  await dropSchema(admin, schema);
  await admin.end();
});

const mark = async (resource: string): Promise<FencingToken | null> => {
  const { rows } = await pool.query<{ token: string }>('SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1', [resource]);
  return rows[0] === undefined ? null : BigInt(rows[0].token);
};

/** What `body` sends through the recording pool. */
async function messagesOf(body: () => Promise<unknown>): Promise<{ sent: string[]; error: unknown }> {
  const from = recording.sent.length;
  const error = await body().then(() => undefined, (e: unknown) => e);
  return { sent: recording.sent.slice(from), error };
}

// The binding parameters (kind, lock, source kind, source id) follow the token: NULL for a bare token.
const OPEN = /^BEGIN; EXECUTE fencekeeper_fences_advance_[0-9a-f]+\(E'.*', \d+::int8, (NULL::text|E'.*'::text), .*\); SAVEPOINT fencekeeper_fenced$/s;
// The probe for a token this process last admitted there (fence-advance.ts, OPEN_EQUAL): the same arguments.
const PROBE = /^BEGIN; EXECUTE fencekeeper_fences_equal_[0-9a-f]+\(E'.*', \d+::int8, (NULL::text|E'.*'::text), .*\); SAVEPOINT fencekeeper_fenced$/s;
// The probe found no row: rolled back, and the open above in the same message.
const MISSED = /^ROLLBACK; BEGIN; EXECUTE fencekeeper_fences_advance_[0-9a-f]+\(E'.*', \d+::int8, (NULL::text|E'.*'::text), .*\); SAVEPOINT fencekeeper_fenced$/s;
const CLOSE = 'SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT';
// withFence on Kysely: the same shapes with the statements that answer by raising (fence/advance.ts).
const KYSELY_OPEN = /^BEGIN; EXECUTE fencekeeper_fences_advance_or_raise_[0-9a-f]+\(E'.*', \d+::int8, (NULL::text|E'.*'::text), .*\); SAVEPOINT fencekeeper_fenced$/s;
const KYSELY_PROBE = /^BEGIN; EXECUTE fencekeeper_fences_equal_or_raise_[0-9a-f]+\(E'.*', \d+::int8, (NULL::text|E'.*'::text), .*\); SAVEPOINT fencekeeper_fenced$/s;
const KYSELY_MISSED = /^ROLLBACK; BEGIN; EXECUTE fencekeeper_fences_advance_or_raise_[0-9a-f]+\(.*\); SAVEPOINT fencekeeper_fenced$/s;
// A connection without them (its first withFence, or after DEALLOCATE ALL): one message rolls back, prepares what is missing and opens again.
const KYSELY_PREPARED_OPEN = /^ROLLBACK; DO \$do\$BEGIN.*PREPARE fencekeeper_fences_advance_or_raise_.*PREPARE fencekeeper_fences_equal_or_raise_.*END\$do\$; BEGIN; EXECUTE fencekeeper_fences_(advance|equal)_or_raise_[0-9a-f]+\(.*\); SAVEPOINT fencekeeper_fenced$/s;
const KYSELY_REFUSAL_READ = /^SELECT \(SELECT token::text FROM fencekeeper_fences WHERE resource = \$1::text\) AS token,.*fencekeeper_fence_bindings/s;
// A mismatched binding aborted the open: the rollback, and the mark and the fence's binding read in one statement.
const REFUSE = /^ROLLBACK; SELECT \(SELECT token::text FROM fencekeeper_fences WHERE resource = E'.*'\) AS token,.*LEFT JOIN fencekeeper_fence_bindings b ON b.resource = E'.*'$/s;
const WORK = 'UPDATE docs SET body = body WHERE id = 1';
const work = (client: pg.PoolClient) => client.query(WORK);

describe('round trips (pg.Pool; Kysely as far as its API allows)', () => {
  it('a connection prepares the fence statement once, on its first fenced transaction', async () => {
    const first = await messagesOf(() => withFence(db, 'trip:first', 10n, work));
    expect(first.error).toBeUndefined();
    expect(first.sent[0]).toMatch(/^PREPARE fencekeeper_fences_advance_[0-9a-f]+ \(text, int8, text, text, text, text\) AS INSERT INTO fencekeeper_fences/);
    expect(first.sent.slice(1)).toHaveLength(3);
    const again = await messagesOf(() => withFence(db, 'trip:first', 10n, work));
    expect(again.sent.some((text) => text.startsWith('PREPARE'))).toBe(false);
  });

  it('withFence: the open, the work, the close; nothing else', async () => {
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:withFence', 20n, work));
    expect(error).toBeUndefined();
    expect(sent).toHaveLength(3);
    expect(sent[0]).toMatch(OPEN);
    expect(sent[1]).toBe(WORK);
    expect(sent[2]).toBe(CLOSE);
    expect(await mark('trip:withFence')).toBe(20n);
  });

  it('withFence with a stale token: the open (whose answer carries the mark) and ROLLBACK; the work never runs', async () => {
    let ran = false;
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:withFence', 19n, async () => { ran = true; }));
    expect(error).toBeInstanceOf(StaleTokenError);
    expect((error as StaleTokenError).current).toBe(20n);
    expect(ran).toBe(false);
    expect(sent).toEqual([expect.stringMatching(OPEN), 'ROLLBACK']);
    expect(await mark('trip:withFence')).toBe(20n);
    // Rolled back: the connection is usable and outside a transaction.
    expect((await pool.query<{ status: string }>(`SELECT CASE WHEN now() = statement_timestamp() THEN 'outside' ELSE 'inside' END AS status`)).rows[0]?.status).toBe('outside');
  });

  it('PostgresFenceStore: an admission is the open, the handler\'s statements, the close', async () => {
    const store = new PostgresFenceStore(db);
    const { sent, error } = await messagesOf(async () => {
      const admission = await store.admit('trip:store', 30n);
      await (admission.transaction as unknown as pg.PoolClient).query(WORK);
      await admission.commit();
    });
    expect(error).toBeUndefined();
    expect(sent).toEqual([expect.stringMatching(OPEN), WORK, CLOSE]);
    expect(await mark('trip:store')).toBe(30n);
    const stale = await messagesOf(() => store.admit('trip:store', 29n));
    expect(stale.error).toBeInstanceOf(StaleTokenError);
    expect((stale.error as StaleTokenError).current).toBe(30n);
    expect(stale.sent).toEqual([expect.stringMatching(OPEN), 'ROLLBACK']);
  });

  it('a bound fence and a bare token: the open, then one message that rolls back and reads the binding; nothing changes', async () => {
    await withFence(db, 'trip:bound', 60n, work);
    await bindFence(pool, 'trip:bound', { kind: 'lock', lock: 'trip/bound', source: { kind: 'zookeeper', id: 'trip' } });
    let ran = false;
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:bound', 61n, async () => { ran = true; }));
    expect(error).toBeInstanceOf(SequencerMismatchError);
    expect(ran).toBe(false);
    expect(sent).toEqual([expect.stringMatching(OPEN), expect.stringMatching(REFUSE)]);
    expect(await mark('trip:bound')).toBe(60n);
    const store = new PostgresFenceStore(db);
    const refused = await messagesOf(() => store.admit('trip:bound', 62n));
    expect(refused.error).toBeInstanceOf(SequencerMismatchError);
    expect(refused.sent).toEqual([expect.stringMatching(OPEN), expect.stringMatching(REFUSE)]);
    expect(await mark('trip:bound')).toBe(60n);
  });

  it('withFence on Kysely: the round trips of a plain Kysely transaction (BEGIN with the advance or the probe and the savepoint, the work, the close); a connection\'s first prepares, once', async () => {
    const update = (trx: Kysely<TestDatabase>) => trx.updateTable('docs').set({ body: 'x' }).where('id', '=', 1).execute();
    const plain = await messagesOf(() => kysely.transaction().execute(update));
    expect(plain.sent).toEqual(['begin', expect.stringMatching(/^update "docs"/), 'commit']);
    // This connection has not prepared the Kysely statements yet: 26000, then one message that prepares and opens.
    const first = await messagesOf(() => withFence(kysely, 'trip:kysely', 50n, update));
    expect(first.error).toBeUndefined();
    expect(first.sent).toEqual([expect.stringMatching(KYSELY_OPEN), expect.stringMatching(KYSELY_PREPARED_OPEN), expect.stringMatching(/^update "docs"/), CLOSE]);
    expect(await mark('trip:kysely')).toBe(50n);
    // From then on as many as the plain transaction: the same holder again opens with the probe (a row lock, no upsert).
    const again = await messagesOf(() => withFence(kysely, 'trip:kysely', 50n, update));
    expect(again.error).toBeUndefined();
    expect(again.sent).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(/^update "docs"/), CLOSE]);
    expect(again.sent).toHaveLength(plain.sent.length);
    const advanced = await messagesOf(() => withFence(kysely, 'trip:kysely', 51n, update));
    expect(advanced.sent).toEqual([expect.stringMatching(KYSELY_OPEN), expect.stringMatching(/^update "docs"/), CLOSE]);
    expect(await mark('trip:kysely')).toBe(51n);
    // Stale: refused by the open (the work never runs), rolled back, then the mark is read.
    let ran = false;
    const stale = await messagesOf(() => withFence(kysely, 'trip:kysely', 49n, async () => { ran = true; }));
    expect(stale.error).toBeInstanceOf(StaleTokenError);
    expect((stale.error as StaleTokenError).current).toBe(51n);
    expect(ran).toBe(false);
    expect(stale.sent).toEqual([expect.stringMatching(KYSELY_OPEN), 'ROLLBACK', expect.stringMatching(KYSELY_REFUSAL_READ)]);
    expect(await mark('trip:kysely')).toBe(51n);
  });

  it('withFence on Kysely, the mark moved since: the probe misses (22012), one message rolls it back and opens with the upsert, which refuses a stale token or advances a lowered mark', async () => {
    const update = (trx: Kysely<TestDatabase>) => trx.updateTable('docs').set({ body: 'y' }).where('id', '=', 1).execute();
    await withFence(kysely, 'trip:kysely-moved', 80n, update);
    await pool.query(`UPDATE fencekeeper_fences SET token = 85 WHERE resource = 'trip:kysely-moved'`);
    let ran = false;
    const stale = await messagesOf(() => withFence(kysely, 'trip:kysely-moved', 80n, async () => { ran = true; }));
    expect(stale.error).toBeInstanceOf(StaleTokenError);
    expect((stale.error as StaleTokenError).current).toBe(85n);
    expect(ran).toBe(false);
    expect(stale.sent).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(KYSELY_MISSED), 'ROLLBACK', expect.stringMatching(KYSELY_REFUSAL_READ)]);
    expect(await mark('trip:kysely-moved')).toBe(85n);
    // Lowered by an operator: the upsert advances it again.
    await withFence(kysely, 'trip:kysely-moved', 90n, update);
    await pool.query(`UPDATE fencekeeper_fences SET token = 87 WHERE resource = 'trip:kysely-moved'`);
    const lowered = await messagesOf(() => withFence(kysely, 'trip:kysely-moved', 90n, update));
    expect(lowered.error).toBeUndefined();
    expect(lowered.sent).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(KYSELY_MISSED), expect.stringMatching(/^update "docs"/), CLOSE]);
    expect(await mark('trip:kysely-moved')).toBe(90n);
    // A bound fence and a bare token: the probe misses, the upsert refuses; nothing changes.
    await bindFence(pool, 'trip:kysely-moved', { kind: 'lock', lock: 'trip/kysely-moved', source: { kind: 'zookeeper', id: 'trip' } });
    const bound = await messagesOf(() => withFence(kysely, 'trip:kysely-moved', 90n, update));
    expect(bound.error).toBeInstanceOf(SequencerMismatchError);
    expect(bound.sent).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(KYSELY_MISSED), 'ROLLBACK', expect.stringMatching(KYSELY_REFUSAL_READ)]);
    expect(await mark('trip:kysely-moved')).toBe(90n);
  });

  it('withFence on a Kysely instance at REPEATABLE READ: the equal token rewrites the row as before; after two probes that missed, that resource opens with the upsert (whichever instance)', async () => {
    const update = (trx: Kysely<TestDatabase>) => trx.updateTable('docs').set({ body: 'z' }).where('id', '=', 1).execute();
    await withFence(kysely, 'trip:kysely-rr', 100n, update);
    const other = newPool(schema, uniqueName('fk_pgtrip_krr'), 1);
    other.on('connect', (client) => { client.query(`SET default_transaction_isolation = 'repeatable read'`).catch(() => undefined); });
    const saved = recording;
    recording = recordingPool(other);
    const rr = new Kysely<TestDatabase>({ dialect: new PostgresDialect({ pool: recording as unknown as pg.Pool }) });
    try {
      const xmin = async () => (await pool.query<{ xmin: string }>(`SELECT xmin::text AS xmin FROM fencekeeper_fences WHERE resource = 'trip:kysely-rr'`)).rows[0]?.xmin;
      for (let i = 0; i < 2; i += 1) {
        const before = await xmin();
        const missed = await messagesOf(() => withFence(rr, 'trip:kysely-rr', 100n, update));
        expect(missed.error).toBeUndefined();
        expect(missed.sent.filter((text) => !KYSELY_PREPARED_OPEN.test(text))).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(KYSELY_MISSED), expect.stringMatching(/^update "docs"/), CLOSE]);
        expect(await xmin()).not.toBe(before); // rewritten: REPEATABLE READ needs the write
      }
      const third = await messagesOf(() => withFence(rr, 'trip:kysely-rr', 100n, update));
      expect(third.sent).toEqual([expect.stringMatching(KYSELY_OPEN), expect.stringMatching(/^update "docs"/), CLOSE]);
      // A new instance per call (db.withSchema() per request, say) is no way around it.
      const fresh = await messagesOf(() => withFence(rr.withPlugin({ transformQuery: (args) => args.node, transformResult: async (args) => args.result }), 'trip:kysely-rr', 100n, update));
      expect(fresh.sent).toEqual([expect.stringMatching(KYSELY_OPEN), expect.stringMatching(/^update "docs"/), CLOSE]);
    } finally {
      recording = saved;
      await rr.destroy();
    }
    // Another resource on the READ COMMITTED instance still probes.
    await withFence(kysely, 'trip:kysely-rc', 100n, update);
    const rc = await messagesOf(() => withFence(kysely, 'trip:kysely-rc', 100n, update));
    expect(rc.sent).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(/^update "docs"/), CLOSE]);
  });

  it('withFence on Kysely after DEALLOCATE ALL on its connection: prepared again in the message that reopens; the transaction goes through', async () => {
    const update = (trx: Kysely<TestDatabase>) => trx.updateTable('docs').set({ body: 'w' }).where('id', '=', 1).execute();
    await withFence(kysely, 'trip:kysely-dealloc', 40n, update);
    await pool.query('DEALLOCATE ALL');
    const { sent, error } = await messagesOf(() => withFence(kysely, 'trip:kysely-dealloc', 40n, update));
    expect(error).toBeUndefined();
    expect(sent).toEqual([expect.stringMatching(KYSELY_PROBE), expect.stringMatching(KYSELY_PREPARED_OPEN), expect.stringMatching(/^update "docs"/), CLOSE]);
    expect(await mark('trip:kysely-dealloc')).toBe(40n);
  });

  it('withFence on Kysely: the instance the work got refuses queries once the fenced transaction has ended (its connection is back in the pool)', async () => {
    let kept: Kysely<TestDatabase> | undefined;
    await withFence(kysely, 'trip:kysely-after', 5n, async (trx) => {
      kept = trx as unknown as Kysely<TestDatabase>;
    });
    const late = await messagesOf(() => kept!.updateTable('docs').set({ body: 'late' }).where('id', '=', 1).execute());
    expect(String(late.error)).toMatch(/withFence's transaction has ended/);
    expect(late.sent).toEqual([]);
  });

  it('the token this process last admitted there: the probe (a row lock, no upsert), the work, the close', async () => {
    await withFence(db, 'trip:again', 70n, work);
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:again', 70n, work));
    expect(error).toBeUndefined();
    expect(sent).toEqual([expect.stringMatching(PROBE), WORK, CLOSE]);
    const store = new PostgresFenceStore(db);
    const admitted = await messagesOf(async () => {
      const admission = await store.admit('trip:again', 70n);
      expect(admission.previous).toBe(70n);
      await admission.commit();
    });
    expect(admitted.error).toBeUndefined();
    expect(admitted.sent).toEqual([expect.stringMatching(PROBE), CLOSE]);
    expect(await mark('trip:again')).toBe(70n);
  });

  it('the mark moved since (another writer): the probe misses, one message rolls it back and opens with the upsert', async () => {
    await withFence(db, 'trip:moved', 80n, work);
    // Larger: stale, refused with the mark, as without the probe.
    await pool.query(`UPDATE fencekeeper_fences SET token = 85 WHERE resource = 'trip:moved'`);
    const stale = await messagesOf(() => withFence(db, 'trip:moved', 80n, work));
    expect(stale.error).toBeInstanceOf(StaleTokenError);
    expect((stale.error as StaleTokenError).current).toBe(85n);
    expect(stale.sent).toEqual([expect.stringMatching(PROBE), expect.stringMatching(MISSED), 'ROLLBACK']);
    // The refusal is remembered: the stale token again goes straight to the upsert.
    const again = await messagesOf(() => withFence(db, 'trip:moved', 80n, work));
    expect(again.sent).toEqual([expect.stringMatching(OPEN), 'ROLLBACK']);
    // Smaller (an operator set it back): the upsert advances it again, previous the mark it found.
    await withFence(db, 'trip:moved', 90n, work);
    await pool.query(`UPDATE fencekeeper_fences SET token = 87 WHERE resource = 'trip:moved'`);
    const store = new PostgresFenceStore(db);
    const advanced = await messagesOf(async () => {
      const admission = await store.admit('trip:moved', 90n);
      expect(admission.previous).toBe(87n);
      await admission.commit();
    });
    expect(advanced.error).toBeUndefined();
    expect(advanced.sent).toEqual([expect.stringMatching(PROBE), expect.stringMatching(MISSED), CLOSE]);
    expect(await mark('trip:moved')).toBe(90n);
  });

  it('a fence bound since the last admission: the probe misses, the upsert refuses the bare token; nothing changes', async () => {
    await withFence(db, 'trip:bound-later', 95n, work);
    await bindFence(pool, 'trip:bound-later', { kind: 'lock', lock: 'trip/bound-later', source: { kind: 'zookeeper', id: 'trip' } });
    let ran = false;
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:bound-later', 95n, async () => { ran = true; }));
    expect(error).toBeInstanceOf(SequencerMismatchError);
    expect(ran).toBe(false);
    expect(sent).toEqual([expect.stringMatching(PROBE), expect.stringMatching(MISSED), expect.stringMatching(REFUSE)]);
    expect(await mark('trip:bound-later')).toBe(95n);
  });

  it('a connection at REPEATABLE READ: the probe misses once, the equal token rewrites the row as before, then that connection opens with the upsert', async () => {
    await withFence(db, 'trip:rr', 100n, work);
    const other = newPool(schema, uniqueName('fk_pgtrip_rr'), 1);
    other.on('connect', (client) => { client.query(`SET default_transaction_isolation = 'repeatable read'`).catch(() => undefined); });
    const saved = recording;
    recording = recordingPool(other);
    try {
      const on = recording as unknown as pg.Pool;
      const before = (await pool.query<{ xmin: string }>(`SELECT xmin::text AS xmin FROM fencekeeper_fences WHERE resource = 'trip:rr'`)).rows[0]?.xmin;
      const first = await messagesOf(() => withFence(on, 'trip:rr', 100n, work));
      expect(first.error).toBeUndefined();
      expect(first.sent.filter((text) => !text.startsWith('PREPARE'))).toEqual([expect.stringMatching(PROBE), expect.stringMatching(MISSED), WORK, CLOSE]);
      const { rows } = await pool.query<{ xmin: string; previous: string }>(`SELECT xmin::text AS xmin, previous_token::text AS previous FROM fencekeeper_fences WHERE resource = 'trip:rr'`);
      expect(rows[0]?.xmin).not.toBe(before); // rewritten: REPEATABLE READ needs the write
      expect(rows[0]?.previous).toBe('100');
      const second = await messagesOf(() => withFence(on, 'trip:rr', 100n, work));
      expect(second.error).toBeUndefined();
      expect(second.sent).toEqual([expect.stringMatching(OPEN), WORK, CLOSE]);
    } finally {
      recording = saved;
      await other.end();
    }
    // The READ COMMITTED connection still probes.
    const rc = await messagesOf(() => withFence(db, 'trip:rr', 100n, work));
    expect(rc.sent).toEqual([expect.stringMatching(PROBE), WORK, CLOSE]);
  });

  it('a probe that raced the mark\'s advance to its own token (the advance not yet committed) misses once; that connection still probes after', async () => {
    const other = newPool(schema, uniqueName('fk_pgtrip_race'), 2);
    const saved = recording;
    recording = recordingPool(other);
    try {
      const on = recording as unknown as pg.Pool;
      await withFence(on, 'trip:race', 10n, work);
      // Advanced to 20 on one connection, held: the guess for 20 is made, the commit not.
      const holder = await new PostgresFenceStore(on).admit('trip:race', 20n);
      const { rows } = await (holder.transaction as unknown as pg.PoolClient).query({ text: 'SELECT pg_backend_pid() AS pid' });
      // On the other connection: the probe's snapshot still sees 10 (a miss), the upsert waits for the holder.
      const racing = messagesOf(() => withFence(on, 'trip:race', 20n, work));
      await waitForFenceWaiter(admin, (rows[0] as { pid: number }).pid);
      await holder.commit();
      const raced = await racing;
      expect(raced.error).toBeUndefined();
      // (That connection's first: its PREPARE first; the holder's close comes between the miss and its answer.)
      expect(raced.sent.filter((text) => !text.startsWith('PREPARE'))).toEqual([expect.stringMatching(PROBE), expect.stringMatching(MISSED), CLOSE, WORK, CLOSE]);
      // Both connections probe now (two at once: one waits for the other's row lock), and neither misses.
      const both = await messagesOf(() => Promise.all([withFence(on, 'trip:race', 20n, work), withFence(on, 'trip:race', 20n, work)]));
      expect(both.error).toBeUndefined();
      expect(both.sent.filter((text) => PROBE.test(text))).toHaveLength(2);
      expect(both.sent.filter((text) => MISSED.test(text) || OPEN.test(text))).toEqual([]);
    } finally {
      recording = saved;
      await other.end();
    }
  });

  it('the probe\'s statement alone dropped (DEALLOCATE by name): prepared again, the rest kept; the transaction goes through', async () => {
    await withFence(db, 'trip:half', 110n, work);
    const name = /EXECUTE (fencekeeper_fences_equal_[0-9a-f]+)/.exec((await messagesOf(() => withFence(db, 'trip:half', 110n, work))).sent[0] ?? '')?.[1];
    expect(name).toBeDefined();
    await pool.query(`DEALLOCATE ${name}`);
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:half', 110n, work));
    expect(error).toBeUndefined();
    expect(sent).toEqual([
      expect.stringMatching(PROBE),
      'ROLLBACK',
      expect.stringMatching(/^PREPARE fencekeeper_fences_advance_.*; PREPARE fencekeeper_fences_equal_.*; SELECT pg_backend_pid\(\) AS pid$/s), // 42P05 on the first
      expect.stringMatching(/^PREPARE fencekeeper_fences_advance_/),
      expect.stringMatching(/^PREPARE fencekeeper_fences_equal_/),
      'SELECT pg_backend_pid() AS pid',
      expect.stringMatching(PROBE),
      WORK,
      CLOSE,
    ]);
  });

  it('the prepared statement dropped under it (DEALLOCATE ALL on the connection): prepared again, the transaction goes through', async () => {
    await pool.query('DEALLOCATE ALL');
    const { sent, error } = await messagesOf(() => withFence(db, 'trip:deallocated', 40n, work));
    expect(error).toBeUndefined();
    expect(sent).toEqual([expect.stringMatching(OPEN), 'ROLLBACK', expect.stringMatching(/^PREPARE /), expect.stringMatching(OPEN), WORK, CLOSE]);
    expect(await mark('trip:deallocated')).toBe(40n);
  });
});

// Pieces that break naive quoting: quotes and backslashes in every
// combination, an E'' opener, comment and statement separators, dollar quotes
// and String.replace's `$&` / `$'` patterns, NUL, lone surrogates, and
// characters outside the BMP.
const piece = fc.oneof(
  fc.constantFrom("'", '\\', "\\'", "''", "'\\", '\\\\', "E'", '"', ';', '--', '/*', '*/', '$$', '$x$', "$'", '$&', '$`', '$1', '\0', '\uD800', '\uDFFF', '\uDBFF\uDFFF', '😀', 'é', 'ß', '€', '中', 'ソ', '\n', '\t', ' ', "'); DROP TABLE canary; --"),
  fc.string({ unit: 'binary', maxLength: 4 }),
);
const resourceName = fc.array(piece, { minLength: 1, maxLength: 8 }).map((parts) => parts.join(''));

const hex = (text: string): string => Buffer.from(text, 'utf8').toString('hex');

/** What checkResource must refuse: the empty name, NUL, or a UTF-16 unit with no UTF-8 form. */
const unstorable = (name: string): boolean => name === '' || name.includes('\0') || /\p{Cs}/u.test(name);

describe('resource names through the one-message open (fast-check, real server)', () => {
  const stored = new Set<string>();

  async function canaryIntact(on: pg.Pool): Promise<void> {
    expect((await on.query('SELECT id, body FROM canary')).rows).toEqual([{ id: 1, body: 'untouched' }]);
  }

  async function check(on: Database, raw: pg.Pool, name: string, via: 'withFence' | 'store'): Promise<void> {
    const fence = (token: FencingToken): Promise<unknown> => via === 'withFence'
      ? withFence(on, name, token, async () => undefined)
      : new PostgresFenceStore(on as pg.Pool).admit(name, token).then((admission) => admission.commit());
    const { sent, error } = await messagesOf(() => fence(7n));
    if (unstorable(name)) {
      expect(error, `refused before any SQL: ${JSON.stringify(name)}`).toBeInstanceOf(InvalidArgumentError);
      expect(sent).toEqual([]);
      return;
    }
    expect(error, `stored: ${JSON.stringify(name)}`).toBeUndefined();
    stored.add(name);
    // Stored exactly: found by the very string, through a parameter.
    // Compared as UTF-8 bytes in hex, so that the check itself means the same under any client_encoding.
    const { rows } = await raw.query<{ token: string }>(`SELECT token::text AS token FROM fencekeeper_fences WHERE convert_to(resource, 'UTF8') = decode($1, 'hex')`, [hex(name)]);
    expect(rows, JSON.stringify(name)).toEqual([{ token: '7' }]);
    // The same token again: on a pg.Pool the probe's literal must find that row (one open message, no miss).
    const again = await messagesOf(() => fence(7n));
    expect(again.error, JSON.stringify(name)).toBeUndefined();
    if (on !== (kysely as unknown)) expect(again.sent[0], JSON.stringify(name)).toMatch(PROBE);
    if (on !== (kysely as unknown)) expect(again.sent.some((text) => MISSED.test(text)), JSON.stringify(name)).toBe(false);
    // The stale path sends the name in its own literal: it must find the same row.
    const stale = await fence(6n).then(() => undefined, (e: unknown) => e);
    expect(stale, JSON.stringify(name)).toBeInstanceOf(StaleTokenError);
    expect((stale as StaleTokenError).current).toBe(7n);
  }

  /** The canary is intact and the fence table holds exactly the names stored, nothing else. */
  async function nothingElseChanged(raw: pg.Pool): Promise<void> {
    await canaryIntact(raw);
    const { rows } = await raw.query<{ resource: string }>(`SELECT encode(convert_to(resource, 'UTF8'), 'hex') AS resource FROM fencekeeper_fences`);
    expect(new Set(rows.map((r) => r.resource))).toEqual(new Set([...stored].map(hex)));
  }

  it('withFence: refused or stored exactly, never injected', async () => {
    stored.clear();
    await pool.query(`DELETE FROM fencekeeper_fences`);
    await fc.assert(fc.asyncProperty(resourceName, (name) => check(db, pool, name, 'withFence')), { numRuns: 300 });
    await nothingElseChanged(pool);
  });

  it('withFence on Kysely: the same', async () => {
    stored.clear();
    await pool.query(`DELETE FROM fencekeeper_fences`);
    await fc.assert(fc.asyncProperty(resourceName, (name) => check(kysely, pool, name, 'withFence')), { numRuns: 200 });
    await nothingElseChanged(pool);
  });

  it('PostgresFenceStore.admit(): the same', async () => {
    stored.clear();
    await pool.query(`DELETE FROM fencekeeper_fences`);
    await fc.assert(fc.asyncProperty(resourceName, (name) => check(db, pool, name, 'store')), { numRuns: 200 });
    await nothingElseChanged(pool);
  });

  // standard_conforming_strings off: backslashes are escapes in plain literals.
  // A multi-byte client_encoding (GBK, SJIS): node-postgres still sends UTF-8,
  // and the server would read a UTF-8 byte and a backslash after it as one
  // character (why the literal is ASCII only).
  it.each([
    { standard_conforming_strings: 'off' },
    { client_encoding: 'GBK' },
    { client_encoding: 'SJIS' },
  ])('with %o: the same', async (settings) => {
    const [name, value] = Object.entries(settings)[0]!;
    const other = newPool(schema, uniqueName('fk_pgtrip_settings'), 1);
    // SET on every new connection (queued by pg before any other query on it).
    other.on('connect', (client) => { client.query(`SET ${name} = ${value}`).catch(() => undefined); });
    try {
      expect(Object.values((await other.query(`SHOW ${name}`)).rows[0] as object)[0]).toBe(value);
      const otherRecording = recordingPool(other);
      const saved = recording;
      recording = otherRecording;
      try {
        stored.clear();
        await other.query(`DELETE FROM fencekeeper_fences`);
        await fc.assert(fc.asyncProperty(resourceName, (name) => check(otherRecording as unknown as Database, other, name, 'withFence')), { numRuns: 200 });
        await nothingElseChanged(other);
      } finally {
        recording = saved;
      }
    } finally {
      await other.end();
    }
  });
});
