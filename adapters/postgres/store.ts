// PostgresFenceStore: the core's FenceStore on fencekeeper_fences, for the
// Express middleware (or anything else that admits requests by token).
import { InvalidArgumentError, type FenceAdmission, type FenceStore, type FencingToken } from '../../src/index.js';
import { guardClient, isKysely, run, type Database, type KyselyDatabase, type PgPool, type PgPoolClient, type Queryable, type Statement, type TransactionOf } from './database.js';
import { advanceFence, currentFence, type Advanced } from './fence-row.js';
import { checkResource, checkToken } from './identifiers.js';

/**
 * A FenceStore whose admissions are PostgreSQL transactions.
 *
 * `admit()` takes a dedicated connection (a pooled client, or a Kysely
 * transaction), BEGINs, and advances the resource's fence row. The row lock is
 * held until the admission is settled, so admissions for one resource
 * serialize across every process sharing the database. Right after the
 * advance the store sets a savepoint: `commit()` commits the handler's writes
 * through `admission.transaction` with the advance; `abort()` rolls back to
 * the savepoint and commits, so the handler's writes are undone but the
 * advance is kept (an admitted token may already have acted outside this
 * transaction; the mark never drops back below it). A stale token rolls back,
 * frees the connection and rejects with StaleTokenError.
 *
 * Aborting while waiting for the row lock: the wait is a statement blocked on
 * a row lock, so the store cancels it from a second connection with
 * `pg_cancel_backend(pid)` (taken from the pool: with every connection busy the
 * cancel waits for one), waits for the statement to end, and then, for a
 * pg.Pool, destroys the client rather than returning it (a cancel arriving
 * late can then hit nothing of anyone else's); a Kysely transaction is rolled
 * back. The admission rejects with the signal's reason and leaves nothing held.
 * Chosen over `lock_timeout` polling, which would lose the lock queue's order
 * and add latency to every contended admission.
 *
 * Every admission must be settled (`commit()` or `abort()`): an abandoned one
 * keeps its connection and its row lock.
 */
export class PostgresFenceStore<Db extends Database = PgPool, Tx = TransactionOf<Db>> implements FenceStore<Tx> {
  readonly #db: PgPool | KyselyDatabase;

  constructor(db: Db) {
    if (!isKysely(db) && (typeof db !== 'object' || db === null || typeof (db as { connect?: unknown }).connect !== 'function')) {
      throw new InvalidArgumentError('PostgresFenceStore needs a pg.Pool or a Kysely instance');
    }
    this.#db = db as PgPool | KyselyDatabase;
  }

  async current(resource: string): Promise<FencingToken | null> {
    checkResource(resource);
    return currentFence(this.#db, resource);
  }

  async admit(resource: string, token: FencingToken, options: { signal?: AbortSignal } = {}): Promise<FenceAdmission<Tx>> {
    checkResource(resource);
    checkToken(token);
    const signal = options.signal;
    signal?.throwIfAborted();
    return isKysely(this.#db)
      ? this.#admitKysely(this.#db as KyselyDatabase, resource, token, signal)
      : this.#admitPg(this.#db as PgPool, resource, token, signal);
  }

  async #admitPg(pool: PgPool, resource: string, token: FencingToken, signal: AbortSignal | undefined): Promise<FenceAdmission<Tx>> {
    const client = await connectCancellably(pool, signal);
    const release = guardClient(client);
    let advanced: Advanced;
    try {
      if (signal?.aborted) throw signal.reason;
      await client.query({ text: 'BEGIN' });
      advanced = await advanceCancellably(client, resource, token, signal, () => backendPid(client), (pid, needed) => cancelBackendPg(pool, pid, needed));
      await client.query({ text: SAVEPOINT_ADMITTED });
    } catch (error) {
      if (error instanceof CancelledWait) {
        release(new Error('fence wait aborted'));
        throw error.reason;
      }
      let broken: Error | undefined;
      await client.query({ text: 'ROLLBACK' }).catch((rollbackError: unknown) => {
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      });
      release(broken);
      throw error;
    }
    let settled: Promise<void> | undefined;
    const settle = (keepWrites: boolean): Promise<void> =>
      (settled ??= (async () => {
        let broken: Error | undefined;
        try {
          if (!keepWrites) await client.query({ text: ROLLBACK_TO_ADMITTED });
          await client.query({ text: 'COMMIT' });
        } catch (error) {
          broken = error instanceof Error ? error : new Error(String(error));
          await client.query({ text: 'ROLLBACK' }).catch(() => undefined);
          throw error;
        } finally {
          release(broken);
        }
      })());
    return admission(resource, token, advanced.previous, client as unknown as Tx, () => settle(true), () => settle(false));
  }

  #admitKysely(db: KyselyDatabase, resource: string, token: FencingToken, signal: AbortSignal | undefined): Promise<FenceAdmission<Tx>> {
    return new Promise<FenceAdmission<Tx>>((resolve, reject) => {
      let decide: (commit: boolean) => void = () => undefined;
      const decision = new Promise<boolean>((r) => { decide = r; });
      let admitted = false;
      const done: Promise<void> = db.transaction().execute(async (trx) => {
        if (signal?.aborted) throw signal.reason;
        const advanced = await advanceCancellably(trx, resource, token, signal, () => backendPid(trx), (pid, needed) => cancelBackendKysely(db, pid, needed));
        await run(trx, { text: SAVEPOINT_ADMITTED, values: [], prepared: false });
        admitted = true;
        let settled: Promise<void> | undefined;
        const settle = (commit: boolean): Promise<void> => (settled ??= (decide(commit), done));
        resolve(admission(resource, token, advanced.previous, trx as unknown as Tx, () => settle(true), () => settle(false)));
        // Kysely commits when this callback returns. abort(): undo the
        // handler's writes, keep the advance, commit.
        if (!(await decision)) await run(trx, { text: ROLLBACK_TO_ADMITTED, values: [], prepared: false });
      });
      done.catch((error: unknown) => {
        if (!admitted) reject(error instanceof CancelledWait ? error.reason : error);
      });
    });
  }
}

/**
 * Set right after the advance: abort() rolls back to it and commits, undoing
 * the handler's writes but keeping the advance (see the class comment).
 */
const SAVEPOINT_ADMITTED = 'SAVEPOINT fencekeeper_admitted';
const ROLLBACK_TO_ADMITTED = 'ROLLBACK TO SAVEPOINT fencekeeper_admitted';

class CancelledWait {
  constructor(readonly reason: unknown) {}
}

function admission<Tx>(resource: string, token: FencingToken, previous: FencingToken | null, transaction: Tx, commit: () => Promise<void>, abort: () => Promise<void>): FenceAdmission<Tx> {
  return Object.freeze({ resource, token, previous, transaction, commit, abort });
}

/**
 * Advance the fence; if `signal` aborts while the statement waits for the row
 * lock, cancel it on the server and reject with CancelledWait once it has
 * ended (whatever it answered: the caller then throws the work away).
 *
 * The cancel needs a connection of its own from the pool, and the pool may
 * have none to give: every connection can be taken by admissions waiting on
 * the same row. So the wait for the statement to end does not wait for the
 * cancel. Once the statement has ended (it got the row lock after all) the
 * caller rolls back at once, which frees the row and a connection; a cancel
 * still queued for a connection then finds `needed()` false and sends
 * nothing. Waiting for the cancel first would deadlock: our transaction
 * holds the row, the other admissions wait on it with the pool's last
 * connections, and the cancel waits for one of those.
 */
async function advanceCancellably(
  tx: Queryable,
  resource: string,
  token: FencingToken,
  signal: AbortSignal | undefined,
  pidOf: () => Promise<number>,
  cancel: (pid: number, needed: () => boolean) => Promise<void>,
): Promise<Advanced> {
  if (signal === undefined) return advanceFence(tx, resource, token);
  const pid = await pidOf();
  signal.throwIfAborted();
  const pending = advanceFence(tx, resource, token);
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<'aborted'>((resolve) => {
    onAbort = () => resolve('aborted');
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const first = await Promise.race([pending, aborted]);
    if (first !== 'aborted') return first;
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
  let ended = false;
  const statementEnded = pending.then(
    () => { ended = true; },
    () => { ended = true; },
  );
  void cancel(pid, () => !ended).catch(() => undefined);
  await statementEnded;
  throw new CancelledWait(signal.reason);
}

/** pool.connect(), giving up (and returning the client when it comes) if `signal` aborts first. */
async function connectCancellably(pool: PgPool, signal: AbortSignal | undefined): Promise<PgPoolClient> {
  const connecting = pool.connect();
  if (signal === undefined) return connecting;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<'aborted'>((resolve) => {
    onAbort = () => resolve('aborted');
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const first = await Promise.race([connecting, aborted]);
    if (first !== 'aborted') return first;
  } finally {
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
  connecting.then((client) => client.release(), () => undefined);
  throw signal.reason;
}

async function backendPid(tx: Queryable): Promise<number> {
  const known = (tx as { processID?: unknown }).processID;
  if (typeof known === 'number' && known > 0) return known;
  const { rows } = await run(tx, { text: 'SELECT pg_backend_pid() AS pid', values: [], prepared: false });
  return Number(rows[0]?.['pid']);
}

const CANCEL: Statement = Object.freeze({ text: 'SELECT pg_cancel_backend($1)', values: [], prepared: false });

/** Cancel `pid`'s statement from a pooled connection, unless it ended while we waited for the connection. */
async function cancelBackendPg(pool: PgPool, pid: number, needed: () => boolean): Promise<void> {
  const client = await pool.connect();
  const release = guardClient(client);
  let broken: Error | undefined;
  try {
    if (needed()) await run(client, { ...CANCEL, values: [pid] });
  } catch (error) {
    broken = error instanceof Error ? error : new Error(String(error));
    throw error;
  } finally {
    release(broken);
  }
}

/** The same on a Kysely instance: a transaction is the structural way to hold one of its connections. */
async function cancelBackendKysely(db: KyselyDatabase, pid: number, needed: () => boolean): Promise<void> {
  await db.transaction().execute(async (trx) => {
    if (needed()) await run(trx, { ...CANCEL, values: [pid] });
  });
}
