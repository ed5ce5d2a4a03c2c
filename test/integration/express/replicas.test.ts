// Two replicas of one Express service (two HTTP servers, each with its own
// pg.Pool) sharing one fencekeeper_fences table through PostgresFenceStore:
// the fence is the database's row lock, so it holds across processes the way
// MemoryFenceStore cannot. Run once with a pg.Pool and once with a Kysely
// instance as the store's db. Every check on what committed is made from a
// third connection (`admin`), never through a replica.
import { express, forwardRejections } from './variants.js';
import { Kysely, PostgresDialect, type Generated, type Transaction } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencing } from '../../../adapters/express/index.js';
import { migrate, PostgresFenceStore } from '../../../adapters/postgres/index.js';
import type { FenceStore } from '../../../src/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { post, send, serve, settledYet, type Answer, type Sent, type Served } from './helpers.js';
import { deferred, until, type Deferred } from '../../helpers/wait.js';

const H = 'fencing-token';
type Flavor = 'pg' | 'kysely';

interface WritesTable {
  seq: Generated<number>;
  resource: string;
  token: string;
  note: string;
}

interface ReplicaDb {
  writes: WritesTable;
}

/** The handler's write, through the transaction that holds the fence row (pg.PoolClient or Kysely Transaction). */
type Write = (transaction: unknown, resource: string, token: bigint, note: string) => Promise<void>;

const writeWith: Record<Flavor, Write> = {
  pg: async (transaction, resource, token, note) => {
    await (transaction as pg.PoolClient).query('INSERT INTO writes (resource, token, note) VALUES ($1, $2, $3)', [resource, String(token), note]);
  },
  kysely: async (transaction, resource, token, note) => {
    await (transaction as Transaction<ReplicaDb>).insertInto('writes').values({ resource, token: String(token), note }).execute();
  },
};

/**
 * One replica: its own pool (and application_name, so the test can find its
 * backends in pg_stat_activity), its own store object, its own HTTP server.
 * The handler inserts a row through req.fencing.transaction, then waits for
 * the test's gate for its note (if any), then answers as `x-outcome` asks:
 * ok (200), fail (500) or throw (Express answers 500).
 */
class Replica {
  readonly applicationName = uniqueId('fk_replica');
  readonly pool: pg.Pool;
  readonly kysely: Kysely<ReplicaDb> | undefined;
  readonly entered = new Map<string, Deferred>();
  readonly gates = new Map<string, Deferred>();
  served!: Served;

  constructor(readonly name: string, flavor: Flavor, databaseUrl: string, schema: string, poolSize = 4) {
    this.pool = new pg.Pool({ connectionString: databaseUrl, max: poolSize, application_name: this.applicationName, options: `-c search_path=${schema}` });
    this.kysely = flavor === 'kysely' ? new Kysely<ReplicaDb>({ dialect: new PostgresDialect({ pool: this.pool }) }) : undefined;
    const store: FenceStore<unknown> = this.kysely === undefined ? new PostgresFenceStore(this.pool) : new PostgresFenceStore(this.kysely);
    const write = writeWith[flavor];
    const app = express();
    // Before fencing(): tells the test when this server has seen a client leave.
    app.post('/docs/:id', (req, res, next) => {
      const key = `${String(req.params['id'])}/${req.get('x-note') ?? ''}`;
      res.on('close', () => {
        if (!res.writableFinished) this.#left(key).resolve();
      });
      next();
    });
    app.post('/docs/:id', fencing({ store, resource: (req) => String(req.params['id']) }), forwardRejections(async (req, res) => {
      const f = req.fencing!;
      const note = req.get('x-note') ?? `${this.name}:${f.token}`;
      this.enteredFor(f.resource, note).resolve();
      await write(f.transaction, f.resource, f.token, note);
      await this.gates.get(`${f.resource}/${note}`)?.promise;
      const outcome = req.get('x-outcome') ?? 'ok';
      if (outcome === 'throw') throw new Error(`handler for ${note} failed`);
      if (outcome === 'fail') {
        res.status(500).json({ failed: note });
        return;
      }
      res.json({ replica: this.name, note, token: f.token.toString(), previous: f.previous === null ? null : f.previous.toString() });
    }));
    // Keep Express's default error page off the test output.
    app.use((_error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).json({ thrown: true });
    });
    this.app = app;
  }

  readonly app: express.Express;

  /** Resolves when the handler for `note` on `resource` has started (its admission holds the fence). */
  enteredFor(resource: string, note: string): Deferred {
    const key = `${resource}/${note}`;
    let d = this.entered.get(key);
    if (d === undefined) this.entered.set(key, (d = deferred()));
    return d;
  }

  hasEntered(resource: string, note: string): boolean {
    return this.entered.has(`${resource}/${note}`);
  }

  readonly #leftClients = new Map<string, Deferred>();

  #left(key: string): Deferred {
    let d = this.#leftClients.get(key);
    if (d === undefined) this.#leftClients.set(key, (d = deferred()));
    return d;
  }

  /** Resolves when this server has seen the client of the request with `x-note: note` leave before its answer. */
  clientLeft(resource: string, note: string): Promise<void> {
    return this.#left(`${resource}/${note}`).promise;
  }

  /** Hold the handler for `note` on `resource` after its write, until the test resolves the gate. */
  gate(resource: string, note: string): Deferred {
    const d = deferred();
    this.gates.set(`${resource}/${note}`, d);
    return d;
  }

  /** Send `token` with `x-note: note` from a client the test will make leave (`sent.destroy()`); `gone` is what its answer fails with. */
  sendLeaving(resource: string, token: string, note: string): { sent: Sent; gone: Promise<unknown> } {
    const sent = send(this.served.port, `/docs/${resource}`, { [H]: token, 'x-note': note });
    return { sent, gone: sent.answer.catch((error: unknown) => error) };
  }

  /** Send `token` for `resource` behind a gate: once its handler holds the fence and waits on the gate. */
  async enter(resource: string, token: string): Promise<{ gate: Deferred; sent: Sent }> {
    const note = `${this.name}:${token}`;
    const gate = this.gate(resource, note);
    const sent = send(this.served.port, `/docs/${resource}`, { [H]: token });
    await this.enteredFor(resource, note).promise;
    return { gate, sent };
  }

  post(resource: string, token: string, headers: Record<string, string> = {}): Promise<Answer> {
    return post(this.served.port, `/docs/${resource}`, { [H]: token, ...headers });
  }

  async close(): Promise<void> {
    await this.served.close();
    if (this.kysely !== undefined) await this.kysely.destroy(); // ends the pool too
    else await this.pool.end();
  }
}

describe.each<Flavor>(['pg', 'kysely'])('two replicas sharing one PostgresFenceStore table (%s)', (flavor) => {
  const databaseUrl = testServers().databaseUrl;
  const schema = uniqueId(`fk_replicas_${flavor}`);
  // The third connection: sees only what committed.
  const admin = new pg.Pool({ connectionString: databaseUrl, max: 3, options: `-c search_path=${schema}` });
  let one: Replica;
  let two: Replica;
  /** A replica whose pool two waiting requests exhaust. */
  let small: Replica;

  beforeAll(async () => {
    await admin.query(`CREATE SCHEMA ${schema}`);
    await migrate(admin);
    await admin.query('CREATE TABLE writes (seq serial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, note text NOT NULL)');
    one = new Replica('one', flavor, databaseUrl, schema);
    two = new Replica('two', flavor, databaseUrl, schema);
    one.served = await serve(one.app);
    two.served = await serve(two.app);
    small = new Replica('small', flavor, databaseUrl, schema, 2);
    small.served = await serve(small.app);
  });

  afterAll(async () => {
    await Promise.allSettled([one?.close(), two?.close(), small?.close()]);
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  });

  /** Committed rows of the writes table for `resource`, in insertion order. */
  async function committedWrites(resource: string): Promise<{ token: string; note: string }[]> {
    const { rows } = await admin.query<{ token: string; note: string }>(
      'SELECT token::text AS token, note FROM writes WHERE resource = $1 ORDER BY seq',
      [resource],
    );
    return rows;
  }

  /** Once every admission has settled: the mark is `fence`, and the committed writes are those of `notes`, in order. */
  async function expectSettled(resource: string, fence: string, notes: readonly string[]): Promise<void> {
    expect(await settledFence(resource)).toBe(fence);
    expect((await committedWrites(resource)).map((w) => w.note)).toEqual(notes);
  }

  /** The committed mark, read without waiting (what any other process sees now). */
  async function committedFence(resource: string): Promise<string | null> {
    const { rows } = await admin.query<{ token: string }>('SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1', [resource]);
    return rows[0]?.token ?? null;
  }

  /**
   * The mark once every admission holding the row has settled (a replica
   * commits or rolls back after its response was sent). An upsert waits for
   * the row lock, and also for a transaction that is still inserting the
   * resource's first row (which a SELECT ... FOR UPDATE would not see), then
   * answers the committed mark; always rolled back. No sleeping.
   */
  async function settledFence(resource: string): Promise<string | null> {
    const client = await admin.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ token: string; inserted: boolean }>(
        `INSERT INTO fencekeeper_fences AS f (resource, token) VALUES ($1, 1)
         ON CONFLICT (resource) DO UPDATE SET token = f.token
         RETURNING f.token::text AS token, (f.xmax::text = '0') AS inserted`,
        [resource],
      );
      const row = rows[0];
      return row === undefined || row.inserted ? null : row.token;
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  }

  /** Resolves once `n` backends of `replica` wait on a lock. */
  async function lockWaiters(replica: Replica, n: number): Promise<void> {
    let seen: number | undefined;
    await until(
      async () => {
        const { rows } = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
          [replica.applicationName],
        );
        seen = rows[0]?.n;
        return seen === n;
      },
      () => `${n} backends of ${replica.applicationName} waiting on a lock (last seen: ${seen})`,
      20_000,
    );
  }

  /** Resolves once a backend of `replica` is waiting on a lock; answers its pid and the pids blocking it. */
  async function lockWaiterOf(replica: Replica): Promise<{ pid: number; blockedBy: string[] }> {
    let found: { pid: number; blockedBy: string[] } | undefined;
    await until(
      async () => {
        const { rows } = await admin.query<{ pid: number; blocked_by: string[] }>(
          `SELECT w.pid, array(SELECT b.application_name FROM pg_stat_activity b WHERE b.pid = ANY (pg_blocking_pids(w.pid))) AS blocked_by
             FROM pg_stat_activity w
            WHERE w.application_name = $1 AND w.wait_event_type = 'Lock'`,
          [replica.applicationName],
        );
        const row = rows[0];
        if (row !== undefined) found = { pid: row.pid, blockedBy: row.blocked_by };
        return found !== undefined;
      },
      `a backend of ${replica.applicationName} waiting on a lock`,
      20_000,
    );
    return found!;
  }

  it('the race across replicas: 35 on replica two waits on the row lock while 34 is in flight on replica one, then runs; 34 afterwards gets 409 current=35 at either replica', async () => {
    const doc = uniqueId('race');
    const { gate: gate34, sent: first } = await one.enter(doc, '34');

    const second = send(two.served.port, `/docs/${doc}`, { [H]: '35' });
    // Replica two's backend is blocked on the fence row, by replica one's transaction.
    const waiter = await lockWaiterOf(two);
    expect(waiter.blockedBy).toEqual([one.applicationName]);
    expect(two.hasEntered(doc, 'two:35')).toBe(false);
    expect(await settledYet(second.answer)).toBe(false);
    // Nothing of 34 is visible outside its transaction yet.
    expect(await committedFence(doc)).toBeNull();
    expect(await committedWrites(doc)).toEqual([]);

    gate34.resolve();
    const answer34 = await first.answer;
    expect(answer34.status).toBe(200);
    expect(answer34.body).toMatchObject({ replica: 'one', token: '34', previous: null });
    const answer35 = await second.answer;
    expect(answer35.status).toBe(200);
    expect(answer35.body).toMatchObject({ replica: 'two', token: '35', previous: '34' });
    expect(await settledFence(doc)).toBe('35');

    for (const replica of [one, two]) {
      const stale = await replica.post(doc, '34');
      expect(stale.status).toBe(409);
      expect(stale.contentType).toBe('application/problem+json');
      expect(stale.body).toMatchObject({ status: 409, code: 'STALE_TOKEN', resource: doc, presented: '34', current: '35' });
    }
    expect(await settledFence(doc)).toBe('35');
    expect(await committedWrites(doc)).toEqual([
      { token: '34', note: 'one:34' },
      { token: '35', note: 'two:35' },
    ]);
  });

  it('a 34 that arrives while 35 is still in flight on the other replica waits for it, then gets 409 current=35 and never runs', async () => {
    const doc = uniqueId('inflight');
    expect((await one.post(doc, '34')).status).toBe(200);
    expect(await settledFence(doc)).toBe('34');

    const { gate: gate35, sent: newer } = await two.enter(doc, '35');
    const stale = send(one.served.port, `/docs/${doc}`, { [H]: '34', 'x-note': 'stale-34' });
    const waiter = await lockWaiterOf(one);
    expect(waiter.blockedBy).toEqual([two.applicationName]);
    expect(await settledYet(stale.answer)).toBe(false);

    gate35.resolve();
    expect((await newer.answer).status).toBe(200);
    const refused = await stale.answer;
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ code: 'STALE_TOKEN', presented: '34', current: '35' });
    expect(one.hasEntered(doc, 'stale-34')).toBe(false);
    await expectSettled(doc, '35', ['one:34', 'two:35']);
  });

  it('a client that leaves while its request waits on the row lock: its backend stops waiting, it never runs, and nothing of it commits', async () => {
    const doc = uniqueId('leaves');
    const { gate: gate34, sent: first } = await one.enter(doc, '34');
    const { sent: leaving, gone } = two.sendLeaving(doc, '35', 'left-35');
    await lockWaiterOf(two);
    leaving.destroy();
    expect(await gone).toMatchObject({ code: 'ECONNRESET' });
    // The store cancels the blocked statement (pg_cancel_backend): replica two has no lock waiter left.
    await lockWaiters(two, 0);
    gate34.resolve();
    expect((await first.answer).status).toBe(200);
    expect(await settledFence(doc)).toBe('34');
    expect(two.hasEntered(doc, 'left-35')).toBe(false);
    // Nothing is left holding the row: the next request on replica two goes straight through.
    const next = await two.post(doc, '35');
    expect(next.status).toBe(200);
    expect(next.body).toMatchObject({ previous: '34' });
    await expectSettled(doc, '35', ['one:34', 'two:35']);
  });

  it('a client that leaves while waiting on the row lock does not deadlock a replica whose pool is exhausted', async () => {
    // Replica `small` has 2 connections, both taken by requests waiting on
    // row locks held by `one`: `leaving` on doc's row, `blocker` on another.
    // (A third request for doc, `staying`, waits in the store's own line
    // without a connection: the store sends one admission per resource at a
    // time.) `leaving`'s client leaves: the store must cancel its wait, but the
    // cancel needs a pooled connection and none is free. When 34 ends, the
    // leaving request's statement gets the row lock and its transaction holds
    // it; if the store then still waits for a connection to send the now
    // useless cancel, `staying` waits on the row and the pool until `blocker`
    // ends, which the test lets happen only after `staying` has answered.
    const doc = uniqueId('exhausted');
    const other = uniqueId('exhausted-other');
    const gate34 = one.gate(doc, 'one:34');
    const gateOther = one.gate(other, 'one:other');
    const first = send(one.served.port, `/docs/${doc}`, { [H]: '34' });
    const holdingOther = send(one.served.port, `/docs/${other}`, { [H]: '34', 'x-note': 'one:other' });
    await one.enteredFor(doc, 'one:34').promise;
    await one.enteredFor(other, 'one:other').promise;
    const leaving = send(small.served.port, `/docs/${doc}`, { [H]: '35', 'x-note': 'left-35' });
    const gone = leaving.answer.catch((error: unknown) => error);
    const blocker = send(small.served.port, `/docs/${other}`, { [H]: '35', 'x-note': 'blocker-35' });
    await lockWaiters(small, 2);
    const staying = send(small.served.port, `/docs/${doc}`, { [H]: '35', 'x-note': 'stays-35' });
    leaving.destroy();
    expect(await gone).toMatchObject({ code: 'ECONNRESET' });
    // The server has seen it leave (its admission's signal has aborted) before the row is freed.
    await small.clientLeft(doc, 'left-35');

    gate34.resolve();
    expect((await first.answer).status).toBe(200);
    const answer = await staying.answer;
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ note: 'stays-35', previous: '34' });
    expect(small.hasEntered(doc, 'left-35')).toBe(false);
    expect(await settledFence(doc)).toBe('35');
    expect((await committedWrites(doc)).map((w) => w.note)).toEqual(['one:34', 'stays-35']);
    gateOther.resolve();
    expect((await holdingOther.answer).status).toBe(200);
    expect((await blocker.answer).status).toBe(200);
    // Answered before committed (fencing() commits once the response is out): wait for the commit.
    expect(await settledFence(other)).toBe('35');
    await until(async () => (await committedWrites(other)).length === 2, 'blocker-35 committed');
    expect((await committedWrites(other)).map((w) => w.note)).toEqual(['one:other', 'blocker-35']);
  });

  it('a handler that answers 500 or throws leaves no row but keeps the fence advance; a successful one commits both in one transaction', async () => {
    const doc = uniqueId('atomic');
    expect((await one.post(doc, '10')).status).toBe(200);
    expect(await settledFence(doc)).toBe('10');

    // An aborted admission undoes the handler's writes through the
    // transaction but keeps the advance: the handler may have acted
    // elsewhere before it failed, so no smaller token may follow it
    // (regression, found by the fault checker).
    const failed = await one.post(doc, '11', { 'x-outcome': 'fail', 'x-note': 'failed-11' });
    expect(failed.status).toBe(500);
    expect(await settledFence(doc)).toBe('11');
    const thrown = await two.post(doc, '12', { 'x-outcome': 'throw', 'x-note': 'thrown-12' });
    expect(thrown.status).toBe(500);
    expect(thrown.body).toEqual({ thrown: true });
    await expectSettled(doc, '12', ['one:10']);
    // The handlers did run and write: what they wrote was rolled back.
    expect(one.hasEntered(doc, 'failed-11') && two.hasEntered(doc, 'thrown-12')).toBe(true);
    // 11 is below the kept advance: refused at either replica.
    expect((await one.post(doc, '11')).status).toBe(409);

    const gate = two.gate(doc, 'ok-13');
    const ok = send(two.served.port, `/docs/${doc}`, { [H]: '13', 'x-note': 'ok-13' });
    await two.enteredFor(doc, 'ok-13').promise;
    // The row is written inside the transaction but not visible, nor is the advance.
    expect(await committedFence(doc)).toBe('12');
    expect((await committedWrites(doc)).map((w) => w.note)).toEqual(['one:10']);
    gate.resolve();
    const answer = await ok.answer;
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ token: '13', previous: '12' });
    await expectSettled(doc, '13', ['one:10', 'ok-13']);
    // One transaction: neither was visible while the handler was held, both are now.
    // (The row is written under the store's savepoint, a subtransaction, so
    // its xmin differs from the fence row's; it commits with its parent.)
  });
});
