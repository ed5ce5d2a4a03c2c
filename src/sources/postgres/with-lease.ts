/**
 * withLease: a write in the source's own database that commits only while
 * the grant is live, checked by the database itself (migration 012).
 *
 * Stronger than a token compare: a fence admits an equal token, so a holder
 * whose lease ended but whose successor has not written yet still gets
 * through; withLease refuses once the lease has ended, on the database's
 * clock, whoever has written since. It needs the resource and the source in
 * one database; elsewhere, fence with the token.
 *
 * Over a pg.Pool, the check and COMMIT go in one message. Over Kysely
 * (which sends COMMIT itself once the callback returns), the check is the
 * transaction's last statement and COMMIT follows in the next message: a
 * lease that ends in between lets the commit through, and that is still
 * sound, since the grant's row stays share-locked until the commit, so no
 * successor can be granted (let alone write) before it.
 */
import { InvalidArgumentError, LockLostError, type Leadership, type Lock } from '../../index.js';
import { sqlState } from '../../shared/postgres/schema-missing.js';
import { rawQuery, type KyselyCompiledQuery } from '../../shared/postgres/raw-query.js';
import { schemaMissing } from '../../shared/postgres/schema-missing.js';
import { queryRow, type PgSourceClient, type PgSourceQuery, type PgSourceResult } from './client.js';
import { PgEntry } from './grant.js';

/** The client a pool hands out (pg.Pool's connect() is overloaded: the promise form is matched first). */
export type LeaseClientOf<P> = P extends {
  /** The promise form of connect(). */
  connect(): Promise<infer C>;
  /** The callback form of connect() (pg.Pool has both). */
  connect(callback: (...args: never[]) => unknown): void;
}
  ? C
  : P extends {
    /** A pool with the promise form only. */
    connect(): Promise<infer C>;
  }
    ? C
    : PgSourceClient;

/** What withLease takes: a pg.Pool on the source's database. */
export interface LeasePool {
  /** Check out the connection the lease's transaction runs on. */
  connect(): Promise<PgSourceClient>;
  /** Send one statement on any connection of the pool. */
  query(config: PgSourceQuery): Promise<PgSourceResult>;
}

/** What withLease takes over Kysely: a Kysely<DB> instance on the source's database (its Transaction<DB> is what `work` gets). */
export interface LeaseKysely<Trx extends LeaseKyselyExecutor = LeaseKyselyExecutor> {
  /** Kysely's db.transaction(): the lease's transaction runs in its execute(callback). */
  transaction(): {
    /** Runs `callback` in one transaction: committed when it resolves, rolled back when it throws. */
    execute<T>(callback: (trx: Trx) => Promise<T>): Promise<T>;
  };
}

/** A Kysely Transaction<DB>, as far as withLease uses it: raw statements through executeQuery. */
export interface LeaseKyselyExecutor {
  /** Runs one compiled query (Kysely's executeQuery). */
  executeQuery(query: KyselyCompiledQuery): Promise<{ readonly rows: unknown[] }>;
}

const BEGIN = `SELECT fencekeeper_lock_lease_begin($1, $2, $3, $4)::text AS left_ms`;
const CHECK = `SELECT fencekeeper_lock_lease_check($1, $2, $3)`;

/**
 * Run `work(client)` in one transaction on `db` (a pg.Pool on the database
 * of the postgresSource that granted `lock`) that commits only while the
 * grant is live: the grant's row is share-locked first (so no release,
 * reap or hand-over can pass it until this transaction ends), its lease is
 * checked on the database's clock before the work and again in the
 * statement sent with COMMIT, and the transaction is bounded by what is
 * left of the lease (a holder paused inside it cannot block a takeover:
 * its backend ends the transaction at the lease's end). Otherwise
 * LockLostError, and nothing of the work commits.
 *
 * A lock whose `held` is false is refused with LockLostError before any
 * statement; a lock of another source, or of a postgresSource on another
 * database, is an InvalidArgumentError.
 */
export function withLease<P extends LeasePool, T>(db: P, lock: Lock | Leadership, work: (client: LeaseClientOf<P>) => Promise<T>): Promise<T>;
/**
 * withLease over a Kysely instance on the source's database: `work(trx)`
 * runs in one Kysely transaction that commits only while the grant is
 * live, checked as over a pg.Pool (the grant's row share-locked first, the
 * lease checked before the work and as the transaction's last statement,
 * the transaction bounded by what is left of the lease). Otherwise
 * LockLostError, and nothing of the work commits.
 */
export function withLease<Trx extends LeaseKyselyExecutor, T>(db: LeaseKysely<Trx>, lock: Lock | Leadership, work: (trx: Trx) => Promise<T>): Promise<T>;
export async function withLease<T>(db: LeasePool | LeaseKysely, lock: Lock | Leadership, work: (client: never) => Promise<T>): Promise<T> {
  const kysely = isLeaseKysely(db);
  if (!kysely && (db === null || typeof db !== 'object' || typeof (db as Partial<LeasePool>).connect !== 'function')) {
    throw new InvalidArgumentError('withLease takes a pg.Pool or a Kysely instance on the source\'s database');
  }
  if (typeof work !== 'function') throw new InvalidArgumentError('withLease takes a work function');
  if (!(lock instanceof PgEntry)) throw new InvalidArgumentError('withLease takes a lock or leadership of postgresSource (the lease it checks lives in that database)');
  if (!lock.held) throw lock.signal.reason as LockLostError;
  const run = work as (client: unknown) => Promise<T>;
  if (kysely) return overKysely(db, lock, run);
  return overPool(db as LeasePool, lock, run);
}

function isLeaseKysely(db: unknown): db is LeaseKysely {
  return typeof db === 'object' && db !== null && typeof (db as { transaction?: unknown }).transaction === 'function' && typeof (db as { executeQuery?: unknown }).executeQuery === 'function';
}

/** Kysely's transaction: the lease begun as its first statement, checked as its last (Kysely sends the COMMIT). */
function overKysely<T>(db: LeaseKysely, lock: PgEntry, work: (trx: unknown) => Promise<T>): Promise<T> {
  const entry = lock.entry.toString();
  const session = lock.session.toString();
  const token = lock.grantToken.toString();
  const send = async (trx: LeaseKyselyExecutor, sql: string, values: unknown[]): Promise<Record<string, unknown> | undefined> => {
    try {
      return (await trx.executeQuery(rawQuery(sql, values))).rows[0] as Record<string, unknown> | undefined;
    } catch (error) {
      throw schemaMissing(error) ?? error;
    }
  };
  return db.transaction().execute(async (trx) => {
    const left = BigInt(String((await send(trx, BEGIN, [entry, session, token, lock.sourceId]))?.['left_ms']));
    if (left === -2n) throw new InvalidArgumentError(`withLease: lock ${lock.name} was granted by a PostgreSQL source on another database (${lock.sourceId})`);
    if (left <= 0n) throw lost(lock);
    const result = await work(trx);
    try {
      await send(trx, CHECK, [entry, session, token]);
    } catch (error) {
      if (sqlState(error) === 'FK410') throw lost(lock, error);
      throw error;
    }
    return result;
  });
}

async function overPool<T>(db: LeasePool, lock: PgEntry, work: (client: unknown) => Promise<T>): Promise<T> {
  const entry = lock.entry.toString();
  const session = lock.session.toString();
  const token = lock.grantToken.toString();
  const client = await db.connect();
  let broken: Error | undefined;
  const onError = (error: Error): void => {
    broken ??= error;
  };
  client.on('error', onError);
  let open = false;
  try {
    await client.query({ text: 'BEGIN' });
    open = true;
    const left = BigInt(String((await queryRow(client, 'fencekeeper_lock_lease_begin_v1', BEGIN, [entry, session, token, lock.sourceId]))['left_ms']));
    if (left === -2n) throw new InvalidArgumentError(`withLease: lock ${lock.name} was granted by a PostgreSQL source on another database (${lock.sourceId})`);
    if (left <= 0n) throw lost(lock);
    const result = await work(client);
    // One message: if the check raises, the COMMIT after it never runs.
    try {
      await client.query({ text: `SELECT fencekeeper_lock_lease_check(${entry}, ${session}, ${token}); COMMIT` });
    } catch (error) {
      if (sqlState(error) === 'FK410') throw lost(lock, error);
      throw error;
    }
    open = false;
    return result;
  } catch (error) {
    if (open) {
      await client.query({ text: 'ROLLBACK' }).catch((rollbackError: unknown) => {
        broken ??= rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      });
    }
    throw error;
  } finally {
    client.removeListener('error', onError);
    client.release(broken ?? false);
  }
}

function lost(lock: PgEntry, cause?: unknown): LockLostError {
  lock.endedInDatabase();
  return new LockLostError(lock.name, 'session_expired', `lock ${lock.name} lost: the database says its lease has ended; nothing of the work was committed`, cause === undefined ? undefined : { cause });
}
