// fencekeeper/mysql against the real MariaDB (FK_MYSQL): migrate(),
// withFence(), the row helpers with tombstones, binding, REPEATABLE READ
// snapshots, the deadlock path, and bad input.
import mysql from 'mysql2/promise';
import mysqlCallback from 'mysql2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MySqlFenceStore, bindFence, bindTable, fencedDelete, fencedInsert, fencedUpdate, fencedUpsert, migrate, withFence } from '../../../adapters/mysql/index.js';
import { FencekeeperError, StaleTokenError, WorkNotCommittedError, sequencer, type Sequencer } from '../../../src/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { markOf, privateDatabase, randomTokens, type Pool } from './helpers.js';

// Never connects: refused before any query.
const mysqlCallbackPool = (): ReturnType<typeof mysqlCallback.createPool> => mysqlCallback.createPool({ uri: testServers().mysql, connectionLimit: 1 });

let db: Awaited<ReturnType<typeof privateDatabase>>;
let pool: Pool;

beforeAll(async () => {
  db = await privateDatabase('fk_mysql', { connectionLimit: 30 });
  pool = db.pool;
}, 120_000);
afterAll(async () => {
  await db?.drop();
});

async function rows<T>(sql: string, values: unknown[] = []): Promise<T[]> {
  const [result] = await pool.query(sql, values);
  return result as T[];
}

async function dataTable(prefix = 'docs'): Promise<string> {
  const table = uniqueId(prefix);
  await pool.query(`CREATE TABLE \`${table}\` (id INT PRIMARY KEY, body VARCHAR(200) NOT NULL, fencing_token BIGINT NULL) ENGINE=InnoDB`);
  return table;
}

const codeOf = (promise: Promise<unknown>): Promise<string | undefined> =>
  promise.then(() => undefined, (error: unknown) => (error as { code?: string }).code);

describe('migrate', () => {
  it('applies 001 once, is idempotent, and two processes migrating at once apply it once between them', async () => {
    const fresh = await privateDatabase('fk_migrate', { migrated: false });
    const other = (await import('./helpers.js')).mysqlPool(fresh.name, 2);
    try {
      const [a, b] = await Promise.all([migrate(fresh.pool), migrate(other)]);
      expect([...a.applied, ...b.applied]).toEqual(['001_fences.sql', '002_sequencer_kinds.sql']);
      expect((await migrate(fresh.pool)).applied).toEqual([]);
      const [tables] = await fresh.pool.query("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'fencekeeper\\_%' ORDER BY 1");
      expect((tables as { t: string }[]).map((r) => r.t).sort()).toEqual(['fencekeeper_fence_bindings', 'fencekeeper_fences', 'fencekeeper_migrations', 'fencekeeper_table_bindings', 'fencekeeper_tombstones']);
    } finally {
      await other.end();
      await fresh.drop();
    }
  });

  it('without migrate(): SCHEMA_MISSING naming migrate, from every entry point, nothing written', async () => {
    const fresh = await privateDatabase('fk_nomigrate', { migrated: false });
    try {
      await fresh.pool.query('CREATE TABLE docs (id INT PRIMARY KEY, body TEXT, fencing_token BIGINT)');
      await fresh.pool.query("INSERT INTO docs VALUES (1, 'a', 1)");
      let ran = false;
      const error = await withFence(fresh.pool, 'r', 5n, async () => { ran = true; }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(FencekeeperError);
      expect((error as FencekeeperError).code).toBe('SCHEMA_MISSING');
      expect((error as Error).message).toMatch(/run migrate\(pool\)/);
      expect(ran).toBe(false);
      expect(await codeOf(fencedUpdate(fresh.pool, { table: 'docs', where: { id: 1 }, set: { body: 'b' }, token: 5n }))).toBe('SCHEMA_MISSING');
      expect(await codeOf(fencedInsert(fresh.pool, { table: 'docs', key: ['id'], values: { id: 2, body: 'b' }, token: 5n }))).toBe('SCHEMA_MISSING');
      expect(await codeOf(fencedUpsert(fresh.pool, { table: 'docs', key: ['id'], values: { id: 1, body: 'b' }, token: 5n }))).toBe('SCHEMA_MISSING');
      expect(await codeOf(fencedDelete(fresh.pool, { table: 'docs', where: { id: 1 }, token: 5n }))).toBe('SCHEMA_MISSING');
      const [left] = await fresh.pool.query('SELECT id, body, fencing_token FROM docs');
      expect(left).toEqual([{ id: 1, body: 'a', fencing_token: 1 }]);
    } finally {
      await fresh.drop();
    }
  });
});

describe('withFence', () => {
  it('first, equal and larger tokens pass; a smaller one is refused with the mark before the work runs', async () => {
    const resource = uniqueId('wf');
    let runs = 0;
    const work = async (): Promise<void> => { runs += 1; };
    await withFence(pool, resource, 10n, work);
    await withFence(pool, resource, 10n, work);
    await withFence(pool, resource, 12n, work);
    const error = await withFence(pool, resource, 11n, work).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect(error).toMatchObject({ code: 'STALE_TOKEN', presented: 11n, current: 12n, resource });
    expect(runs).toBe(3);
    expect(await markOf(pool, resource)).toBe(12n);
    const [row] = await rows<{ previous: string }>('SELECT CAST(previous_token AS CHAR) AS previous FROM fencekeeper_fences WHERE resource = ?', [resource]);
    expect(row?.previous).toBe('10');
  });

  it('a token near 2^63 is stored and compared exactly (read as text, whatever the pool does with BIGINT)', async () => {
    const resource = uniqueId('wf_big');
    const big = 2n ** 63n - 2n;
    await withFence(pool, resource, big, async () => undefined);
    expect(await markOf(pool, resource)).toBe(big);
    // As a JS number both would be 9223372036854775808: only an exact comparison refuses this.
    expect(await codeOf(withFence(pool, resource, big - 1n, async () => undefined))).toBe('STALE_TOKEN');
    await withFence(pool, resource, big + 1n, async () => undefined);
    expect(await markOf(pool, resource)).toBe(big + 1n);
  });

  it('the advance is kept when the work throws; the work\'s writes are rolled back', async () => {
    const resource = uniqueId('wf_fail');
    const table = await dataTable();
    await withFence(pool, resource, 3n, async () => undefined);
    const boom = new Error('boom');
    const error = await withFence(pool, resource, 7n, async (c) => {
      await c.query(`INSERT INTO \`${table}\` VALUES (1, 'from the failed work', 7)`);
      throw boom;
    }).catch((e: unknown) => e);
    expect(error).toBe(boom);
    expect(await markOf(pool, resource)).toBe(7n);
    expect(await rows(`SELECT * FROM \`${table}\``)).toEqual([]);
    expect(await codeOf(withFence(pool, resource, 6n, async () => undefined))).toBe('STALE_TOKEN');
  });

  it('a deadlock (1213) in the work rolls the whole transaction back, advance included: the advance is applied again', async () => {
    const resource = uniqueId('wf_deadlock');
    const table = await dataTable();
    await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'a', NULL), (2, 'b', NULL)`);
    const filler = await dataTable('filler');
    await withFence(pool, resource, 1n, async () => undefined);
    const other = await pool.getConnection();
    try {
      await other.query('START TRANSACTION');
      // Heavier than the fenced transaction, so InnoDB picks the fenced one as the victim.
      await other.query(`INSERT INTO \`${filler}\` (id, body) SELECT seq, 'x' FROM seq_1_to_200`);
      await other.query(`UPDATE \`${table}\` SET body = 'other' WHERE id = 2`);
      let otherDone: Promise<unknown> | undefined;
      const error = await withFence(pool, resource, 5n, async (c) => {
        await c.query(`UPDATE \`${table}\` SET body = 'fenced' WHERE id = 1`);
        otherDone = other.query(`UPDATE \`${table}\` SET body = 'other' WHERE id = 1`);
        await new Promise((r) => setTimeout(r, 200));
        await c.query(`UPDATE \`${table}\` SET body = 'fenced' WHERE id = 2`);
      }).catch((e: unknown) => e);
      expect((error as { errno?: number }).errno).toBe(1213);
      await otherDone;
      await other.query('COMMIT');
      expect(await markOf(pool, resource)).toBe(5n);
      expect(await codeOf(withFence(pool, resource, 4n, async () => undefined))).toBe('STALE_TOKEN');
      expect(await rows(`SELECT id, body FROM \`${table}\` ORDER BY id`)).toEqual([{ id: 1, body: 'other' }, { id: 2, body: 'other' }]);
    } finally {
      other.release();
    }
  });

  it('a work that swallows the deadlock and returns: WorkNotCommittedError, the advance applied again', async () => {
    const resource = uniqueId('wf_swallow');
    const table = await dataTable();
    await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'a', NULL), (2, 'b', NULL)`);
    const filler = await dataTable('filler');
    // A mark below 9 already (the first mark is committed on its own): the deadlock takes the advance to 9 with it.
    await withFence(pool, resource, 2n, async () => undefined);
    const other = await pool.getConnection();
    try {
      await other.query('START TRANSACTION');
      await other.query(`INSERT INTO \`${filler}\` (id, body) SELECT seq, 'x' FROM seq_1_to_200`);
      await other.query(`UPDATE \`${table}\` SET body = 'other' WHERE id = 2`);
      let otherDone: Promise<unknown> | undefined;
      const error = await withFence(pool, resource, 9n, async (c) => {
        await c.query(`UPDATE \`${table}\` SET body = 'fenced' WHERE id = 1`);
        otherDone = other.query(`UPDATE \`${table}\` SET body = 'other' WHERE id = 1`);
        await new Promise((r) => setTimeout(r, 200));
        await c.query(`UPDATE \`${table}\` SET body = 'fenced' WHERE id = 2`).catch(() => undefined);
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(WorkNotCommittedError);
      await otherDone;
      await other.query('COMMIT');
      expect(await markOf(pool, resource)).toBe(9n);
    } finally {
      other.release();
    }
  });

  it('20 racing writers with random tokens, 10 rounds: the mark is the largest acknowledged token, the value its writer\'s, no refused write visible', async () => {
    const table = uniqueId('race_log');
    await pool.query(`CREATE TABLE \`${table}\` (seq INT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(100), writer INT, token BIGINT) ENGINE=InnoDB`);
    const state = await dataTable('race_state');
    for (let round = 0; round < 10; round++) {
      const resource = uniqueId(`race${round}`);
      await pool.query(`INSERT INTO \`${state}\` VALUES (?, 'none', NULL)`, [round]);
      const tokens = randomTokens(20);
      const outcomes = await Promise.all(tokens.map((token, writer) => withFence(pool, resource, token, async (c) => {
        await c.query(`INSERT INTO \`${table}\` (resource, writer, token) VALUES (?, ?, ?)`, [resource, writer, String(token)]);
        await c.query(`UPDATE \`${state}\` SET body = ? WHERE id = ?`, [`writer ${writer}`, round]);
      }).then(() => 'ok' as const, (error: unknown) => {
        if (error instanceof StaleTokenError) return 'refused' as const;
        throw error;
      })));
      const acked = tokens.filter((_, i) => outcomes[i] === 'ok');
      const refusedWriters = new Set(tokens.map((_, i) => i).filter((i) => outcomes[i] === 'refused'));
      const largest = acked.reduce((a, b) => (a > b ? a : b));
      expect(await markOf(pool, resource)).toBe(largest);
      const [stored] = await rows<{ body: string }>(`SELECT body FROM \`${state}\` WHERE id = ?`, [round]);
      expect(stored?.body).toBe(`writer ${tokens.indexOf(largest)}`);
      const logged = await rows<{ writer: number; token: string }>(`SELECT writer, CAST(token AS CHAR) AS token FROM \`${table}\` WHERE resource = ? ORDER BY seq`, [resource]);
      expect(logged.filter((l) => refusedWriters.has(l.writer))).toEqual([]);
      expect(logged).toHaveLength(acked.length);
      // Acknowledged writes committed in token order: each a larger token than the one before.
      const order = logged.map((l) => BigInt(l.token));
      expect(order).toEqual([...order].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    }
  }, 120_000);
});

describe('the row helpers', () => {
  it('fencedUpdate: equal and larger pass, smaller refused with the row\'s token, no row: 0', async () => {
    const table = await dataTable();
    await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'a', NULL)`);
    expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'b' }, token: 5n })).toBe(1);
    expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'b' }, token: 5n })).toBe(1); // equal, same values
    expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'c' }, token: 6n })).toBe(1);
    const error = await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'stale' }, token: 5n }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'STALE_TOKEN', presented: 5n, current: 6n });
    expect(await fencedUpdate(pool, { table, where: { id: 2 }, set: { body: 'x' }, token: 5n })).toBe(0);
    expect(await rows(`SELECT id, body, CAST(fencing_token AS CHAR) AS t FROM \`${table}\``)).toEqual([{ id: 1, body: 'c', t: '6' }]);
  });

  it('a delete keeps the fence: a stale re-insert or upsert is refused, a newer one re-creates the row', async () => {
    const table = await dataTable();
    expect(await fencedInsert(pool, { table, key: ['id'], values: { id: 1, body: 'v5' }, token: 5n })).toBe(1);
    expect(await fencedInsert(pool, { table, key: ['id'], values: { id: 1, body: 'again' }, token: 5n })).toBe(0);
    expect(await fencedUpsert(pool, { table, key: ['id'], values: { id: 1, body: 'v5b' }, token: 5n })).toBe('updated');
    expect(await fencedDelete(pool, { table, where: { id: 1 }, token: 7n })).toBe(1);
    expect(await rows(`SELECT * FROM \`${table}\``)).toEqual([]);
    const [tomb] = await rows<{ token: string }>('SELECT CAST(token AS CHAR) AS token FROM fencekeeper_tombstones WHERE relation = ? AND row_key = ?', [`${db.name}.${table}`, '["1"]']);
    expect(tomb?.token).toBe('7');
    expect(await fencedInsert(pool, { table, key: ['id'], values: { id: 1, body: 'stale' }, token: 6n }).catch((e: unknown) => e)).toMatchObject({ code: 'STALE_TOKEN', current: 7n });
    expect(await fencedUpsert(pool, { table, key: ['id'], values: { id: '1', body: 'stale' }, token: 6n }).catch((e: unknown) => e)).toMatchObject({ code: 'STALE_TOKEN', current: 7n });
    expect(await fencedDelete(pool, { table, where: { id: 1 }, token: 6n })).toBe(0);
    expect(await rows(`SELECT * FROM \`${table}\``)).toEqual([]);
    expect(await fencedUpsert(pool, { table, key: ['id'], values: { id: 1, body: 'v8' }, token: 8n })).toBe('inserted');
    expect(await rows(`SELECT id, body, CAST(fencing_token AS CHAR) AS t FROM \`${table}\``)).toEqual([{ id: 1, body: 'v8', t: '8' }]);
  });

  it('20 racing upserts with random tokens, 10 rounds: the row holds the largest acknowledged token and its writer\'s value', async () => {
    const table = await dataTable();
    for (let round = 0; round < 10; round++) {
      const tokens = randomTokens(20);
      const outcomes = await Promise.all(tokens.map((token, writer) => fencedUpsert(pool, { table, key: ['id'], values: { id: round, body: `writer ${writer}` }, token })
        .then(() => 'ok' as const, (error: unknown) => {
          if (error instanceof StaleTokenError) return 'refused' as const;
          throw error;
        })));
      const acked = tokens.filter((_, i) => outcomes[i] === 'ok');
      const largest = acked.reduce((a, b) => (a > b ? a : b));
      expect(largest).toBe(tokens.reduce((a, b) => (a > b ? a : b)));
      expect(await rows(`SELECT body, CAST(fencing_token AS CHAR) AS t FROM \`${table}\` WHERE id = ?`, [round])).toEqual([{ body: `writer ${tokens.indexOf(largest)}`, t: String(largest) }]);
    }
  }, 120_000);

  describe('REPEATABLE READ: a stale holder whose snapshot is older than the newer holder\'s commit', () => {
    async function staleSnapshot(table: string): Promise<mysql.PoolConnection> {
      const stale = await pool.getConnection();
      await stale.query('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await stale.query('START TRANSACTION');
      // The snapshot is taken here, with token 5 in the row.
      expect(await (async () => (await stale.query(`SELECT body FROM \`${table}\` WHERE id = 1`))[0])()).toEqual([{ body: 'v5' }]);
      return stale;
    }

    it('fencedUpdate is refused with the newer token (the check is a current read, not the snapshot)', async () => {
      const table = await dataTable();
      await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'v5', 5)`);
      const stale = await staleSnapshot(table);
      try {
        expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'v9' }, token: 9n })).toBe(1);
        // The snapshot still shows the old row...
        expect((await stale.query(`SELECT body, CAST(fencing_token AS CHAR) AS t FROM \`${table}\` WHERE id = 1`))[0]).toEqual([{ body: 'v5', t: '5' }]);
        // ...and the stale write is still refused, with the newer holder's token.
        const error = await fencedUpdate(stale, { table, where: { id: 1 }, set: { body: 'stale' }, token: 5n }).catch((e: unknown) => e);
        expect(error).toMatchObject({ code: 'STALE_TOKEN', presented: 5n, current: 9n });
        await stale.query('COMMIT');
      } finally {
        stale.release();
      }
      expect(await rows(`SELECT body FROM \`${table}\``)).toEqual([{ body: 'v9' }]);
    });

    it('fencedInsert after the newer holder\'s delete is refused by the tombstone (a locking read)', async () => {
      const table = await dataTable();
      await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'v5', 5)`);
      const stale = await staleSnapshot(table);
      try {
        expect(await fencedDelete(pool, { table, where: { id: 1 }, token: 9n })).toBe(1);
        const error = await fencedInsert(stale, { table, key: ['id'], values: { id: 1, body: 'stale' }, token: 5n }).catch((e: unknown) => e);
        expect(error).toMatchObject({ code: 'STALE_TOKEN', current: 9n });
        await stale.query('COMMIT');
      } finally {
        stale.release();
      }
      expect(await rows(`SELECT * FROM \`${table}\``)).toEqual([]);
    });

    it('with innodb_snapshot_isolation=ON the locking read fails with 1020: SNAPSHOT_CONFLICT, retryable', async () => {
      const table = await dataTable();
      await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'v5', 5)`);
      const stale = await pool.getConnection();
      try {
        await stale.query('SET SESSION innodb_snapshot_isolation = ON');
        await stale.query('START TRANSACTION');
        await stale.query(`SELECT body FROM \`${table}\` WHERE id = 1`);
        expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'v9' }, token: 9n })).toBe(1);
        const error = await fencedUpdate(stale, { table, where: { id: 1 }, set: { body: 'stale' }, token: 5n }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(FencekeeperError);
        expect(error).toMatchObject({ code: 'SNAPSHOT_CONFLICT', retryable: true });
        await stale.query('ROLLBACK');
      } finally {
        await stale.query('SET SESSION innodb_snapshot_isolation = OFF');
        stale.release();
      }
      expect(await rows(`SELECT body FROM \`${table}\``)).toEqual([{ body: 'v9' }]);
    });
  });
});

describe('binding to a lock', () => {
  const source = { kind: 'zookeeper', id: 'ensemble-a' };
  const ours = (token: bigint): Sequencer => sequencer({ kind: 'lock', name: 'jobs', token, source });
  const theirs = (token: bigint): Sequencer => sequencer({ kind: 'lock', name: 'other', token, source });

  it('a bound fence takes only its lock\'s sequencer; a bare token and another lock are refused, nothing changed', async () => {
    const resource = uniqueId('bound');
    await withFence(pool, resource, 3n, async () => undefined);
    await bindFence(pool, resource, { kind: 'lock', lock: 'jobs', source });
    expect(await codeOf(withFence(pool, resource, 10n, async () => undefined))).toBe('SEQUENCER_MISMATCH');
    expect(await codeOf(withFence(pool, resource, theirs(10n), async () => undefined))).toBe('SEQUENCER_MISMATCH');
    expect(await markOf(pool, resource)).toBe(3n);
    await withFence(pool, resource, ours(4n), async () => undefined);
    expect(await markOf(pool, resource)).toBe(4n);
    expect(await codeOf(bindFence(pool, resource, { kind: 'lock', lock: 'other', source }))).toBe('FENCE_ALREADY_BOUND');
  });

  it.each(['read', 'write', 'permit'] as const)('a fence and a table bound to a %s lock take its sequencers, not the plain lock of that name', async (kind) => {
    const name = kind === 'permit' ? 'jobs#1' : 'jobs';
    const own = (token: bigint): Sequencer => sequencer({ kind, name, token, source });
    const plain = (token: bigint): Sequencer => sequencer({ kind: 'lock', name, token, source });
    const resource = uniqueId(`bound-${kind}`);
    await bindFence(pool, resource, { kind, lock: name, source });
    expect(await codeOf(withFence(pool, resource, plain(4n), async () => undefined))).toBe('SEQUENCER_MISMATCH');
    await withFence(pool, resource, own(4n), async () => undefined);
    expect(await markOf(pool, resource)).toBe(4n);
    const table = await dataTable();
    await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'a', 1)`);
    await bindTable(pool, table, { kind, lock: name, source });
    expect(await codeOf(fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'x' }, token: plain(5n) }))).toBe('SEQUENCER_MISMATCH');
    expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'ours' }, token: own(5n) })).toBe(1);
  });

  it('a bound table takes only its lock\'s sequencer in every row helper', async () => {
    const table = await dataTable();
    await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'a', 1)`);
    await bindTable(pool, table, { kind: 'lock', lock: 'jobs', source });
    expect(await codeOf(fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'x' }, token: 5n }))).toBe('SEQUENCER_MISMATCH');
    expect(await codeOf(fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'x' }, token: theirs(5n) }))).toBe('SEQUENCER_MISMATCH');
    expect(await codeOf(fencedInsert(pool, { table, key: ['id'], values: { id: 2, body: 'x' }, token: 5n }))).toBe('SEQUENCER_MISMATCH');
    expect(await codeOf(fencedDelete(pool, { table, where: { id: 1 }, token: theirs(5n) }))).toBe('SEQUENCER_MISMATCH');
    expect(await rows(`SELECT id, body FROM \`${table}\``)).toEqual([{ id: 1, body: 'a' }]);
    expect(await fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'ours' }, token: ours(5n) })).toBe(1);
  });
});

describe('MySqlFenceStore', () => {
  it('admits with previous, holds the row until settled, and a waiting admission aborted by its signal leaves nothing held', async () => {
    const store = new MySqlFenceStore(pool);
    const resource = uniqueId('store');
    expect(await store.current(resource)).toBeNull();
    const first = await store.admit(resource, 4n);
    expect(first).toMatchObject({ resource, token: 4n, previous: null });
    const controller = new AbortController();
    const waiting = store.admit(resource, 6n, { signal: controller.signal });
    await new Promise((r) => setTimeout(r, 300));
    const reason = new Error('given up');
    controller.abort(reason);
    // Rejected while the first admission still holds the row: the wait was ended (KILL QUERY), not left to
    // innodb_lock_wait_timeout (50 s by default; the 20 s here is far below it and far above any load's delay).
    const outcome = await Promise.race([waiting.then(() => 'admitted', (error: unknown) => error), new Promise((r) => setTimeout(r, 20_000, 'still waiting'))]);
    expect(outcome).toBe(reason);
    await first.transaction.query(`SELECT 1`);
    await first.commit();
    expect(await store.current(resource)).toBe(4n);
    const next = await store.admit(resource, 5n);
    expect(next.previous).toBe(4n);
    await next.abort();
    expect(await store.current(resource)).toBe(5n);
    expect(await codeOf(store.admit(resource, 4n))).toBe('STALE_TOKEN');
  });
});

describe('bad input: a clear error, nothing written', () => {
  it('tokens out of range or of the wrong type, names with NUL or lone surrogates, identifiers that need escaping', async () => {
    const table = await dataTable();
    await pool.query(`INSERT INTO \`${table}\` VALUES (1, 'a', 1)`);
    const resource = uniqueId('bad');
    let ran = false;
    const work = async (): Promise<void> => { ran = true; };
    for (const token of [0n, -1n, 2n ** 63n, 5, '5', null, undefined, 1.5]) {
      expect(await codeOf(withFence(pool, resource, token as bigint, work)), String(token)).toBe('INVALID_TOKEN');
      expect(await codeOf(fencedUpdate(pool, { table, where: { id: 1 }, set: { body: 'x' }, token: token as bigint })), String(token)).toBe('INVALID_TOKEN');
    }
    for (const name of ['', 'a\0b', 'lone \ud800 surrogate', 'x'.repeat(1025)]) {
      expect(await codeOf(withFence(pool, name, 5n, work)), JSON.stringify(name)).toBe('INVALID_ARGUMENT');
    }
    for (const bad of ['a`b', 'a b', 'a;b', 'a.b.c', '1abc', `x'y`, 'x"y', 'ü']) {
      expect(await codeOf(fencedUpdate(pool, { table: bad, where: { id: 1 }, set: { body: 'x' }, token: 5n })), bad).toBe('INVALID_ARGUMENT');
      expect(await codeOf(fencedUpdate(pool, { table, where: { [bad]: 1 }, set: { body: 'x' }, token: 5n })), bad).toBe('INVALID_ARGUMENT');
      expect(await codeOf(fencedUpsert(pool, { table, key: ['id'], values: { id: 1, [bad]: 'x' }, token: 5n })), bad).toBe('INVALID_ARGUMENT');
      expect(await codeOf(fencedDelete(pool, { table, where: { id: 1 }, tokenColumn: bad, token: 5n })), bad).toBe('INVALID_ARGUMENT');
    }
    expect(await codeOf(fencedUpdate(pool, { table, where: { id: 1 }, set: { fencing_token: 9 }, token: 5n }))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(fencedUpdate(pool, { table, where: {}, set: { body: 'x' }, token: 5n }))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(fencedUpdate(pool, { table, where: { id: undefined }, set: { body: 'x' }, token: 5n }))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(fencedInsert(pool, { table, key: ['id'], values: { id: 2.5, body: 'x' }, token: 5n }))).toBe('INVALID_ARGUMENT');
    // mysql2 would expand these into other SQL than `id = ?` (a list; `key` = value pairs):
    for (const value of [[1, 2], { id: 1 }, NaN, Infinity, new Date(NaN), () => 1, Symbol('x')]) {
      expect(await codeOf(fencedUpdate(pool, { table, where: { id: value }, set: { body: 'x' }, token: 5n })), String(value)).toBe('INVALID_ARGUMENT');
      expect(await codeOf(fencedUpdate(pool, { table, where: { id: 1 }, set: { body: value }, token: 5n })), String(value)).toBe('INVALID_ARGUMENT');
    }
    expect(await codeOf(fencedInsert(pool, { table, key: ['id'], values: { body: 'x' }, token: 5n }))).toBe('INVALID_ARGUMENT');
    expect(await codeOf(withFence(pool, resource, 5n, 'not a function' as never))).toBe('INVALID_ARGUMENT');
    // mysql2's callback Pool (its getConnection answers through a callback): told to pass pool.promise().
    const callbackPool = mysqlCallbackPool();
    try {
      const error = await withFence(callbackPool as never, resource, 5n, work).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringContaining('pool.promise()') });
      expect(() => new MySqlFenceStore(callbackPool as never)).toThrow(/pool\.promise\(\)/);
    } finally {
      callbackPool.end();
    }
    expect(ran).toBe(false);
    expect(await markOf(pool, resource)).toBeNull();
    expect(await rows(`SELECT id, body, fencing_token FROM \`${table}\``)).toEqual([{ id: 1, body: 'a', fencing_token: 1 }]);
  });
});
