/**
 * PostgreSQL as a LockSource: a fair lock (and, from the same queue,
 * elections) whose tokens come from the database the application already
 * runs, over a pg.Pool.
 *
 *   const source = postgresSource(pool, { leaseMs: 10_000 });
 *   const lock = await source.acquireLock('jobs/reindex', { timeoutMs: 5000 });
 *   try { ... lock.token ... } finally { await lock.release(); }
 *   await source.close();
 *
 * One session per source (../session.ts): a row whose lease the database's
 * clock measures, renewed every third of it on a connection the source keeps
 * for itself (with LISTEN), and every grant of the source hangs on it. The
 * queue and its tokens: migration 009 and ./join.ts.
 */
import { ClientClosedError, type AcquireOptions, type LockSource, type SourceIdentity, type TryAcquireOptions } from '../../index.js';
import { DEFAULT_OWNER, traceAcquire } from '../../extend.js';
import type { PgSourcePool } from './client.js';
import { checkPool, checkSourceOptions, type PostgresSourceOptions } from './input.js';
import { joinAndWait, type JoinSource } from './join.js';
import { PgLock, type PostgresLock } from './lock.js';
import { Counters, PgSession, type PostgresSourceStats } from './session.js';

/** The PostgreSQL source: every method of LockSource, with PostgreSQL's richer results, and close(). */
export interface PostgresSource extends LockSource {
  readonly kind: 'postgres';
  /** The session's lease in ms (PostgresSourceOptions.leaseMs). */
  readonly leaseMs: number;
  acquireLock(name: string, options?: AcquireOptions): Promise<PostgresLock>;
  tryAcquireLock(name: string, options?: TryAcquireOptions): Promise<PostgresLock | null>;
  /** The database's identity: kind 'postgres', id `<system identifier>-<database OID>`. */
  identity(): Promise<SourceIdentity>;
  /** Counters since the source was made (renewals, NOTIFY wake-ups, head waiters' claims, reaps, sessions). */
  stats(): PostgresSourceStats;
  /**
   * End the session: every grant ends at once (its signal aborts, reason
   * 'closed'), every waiter rejects with ClientClosedError, and the
   * session's entries and row are deleted in one transaction, each lock
   * handed to its next live waiter. The pool is the caller's to end. Idempotent.
   */
  close(): Promise<void>;
}

class Source implements JoinSource {
  readonly pool: PgSourcePool;
  readonly leaseMs: number;
  readonly counters = new Counters();
  #session: PgSession | null = null;
  #opening: Promise<PgSession> | null = null;
  #closed = false;
  #closing: Promise<void> | null = null;

  constructor(pool: PgSourcePool, leaseMs: number) {
    this.pool = pool;
    this.leaseMs = leaseMs;
  }

  session(): Promise<PgSession> {
    if (this.#closed) return Promise.reject(new ClientClosedError('the PostgreSQL source was closed'));
    const live = this.#session;
    if (live !== null && live.endedReason === null) return Promise.resolve(live);
    if (this.#opening === null) {
      const opening = PgSession.open(this.pool, this.leaseMs, DEFAULT_OWNER, this.counters, (ended) => {
        if (this.#session === ended) this.#session = null;
      }).then(
        (session) => {
          this.#opening = null;
          if (this.#closed) {
            void session.close();
            throw new ClientClosedError('the PostgreSQL source was closed');
          }
          this.#session = session;
          return session;
        },
        (error: unknown) => {
          this.#opening = null;
          throw error;
        },
      );
      this.#opening = opening;
    }
    return this.#opening;
  }

  close(): Promise<void> {
    if (this.#closing === null) {
      this.#closed = true;
      const opening = this.#opening;
      this.#closing = (async () => {
        const session = this.#session ?? (await opening?.catch(() => null)) ?? null;
        this.#session = null;
        await session?.close();
      })();
    }
    return this.#closing;
  }
}

/**
 * A LockSource over a pg.Pool (it keeps one of the pool's connections for
 * its heartbeat and LISTEN: the pool needs max >= 2). Tables and functions
 * come from migrate() (migration 009); a database without them answers
 * SchemaMissingError. Options are checked here, before any statement.
 */
export function postgresSource(pool: PgSourcePool, options?: PostgresSourceOptions): PostgresSource {
  checkPool(pool);
  const { leaseMs } = checkSourceOptions(options);
  const source = new Source(pool, leaseMs);
  const close = (): Promise<void> => source.close();
  return Object.freeze({
    kind: 'postgres' as const,
    description: `PostgreSQL, one ${leaseMs} ms session lease per source`,
    leaseMs,
    acquireLock: (name: string, o?: AcquireOptions) =>
      traceAcquire('postgres', name, 'wait', () =>
        joinAndWait(source, { kind: 'lock', name, mode: 'wait', options: o, ownerField: 'owner', build: (s, entry, request, token, marginMs, owner) => new PgLock(s, name, entry, request, token, marginMs, owner) }) as Promise<PgLock>),
    tryAcquireLock: (name: string, o?: TryAcquireOptions) =>
      traceAcquire('postgres', name, 'try', () =>
        joinAndWait(source, { kind: 'lock', name, mode: 'try', options: o, ownerField: 'owner', build: (s, entry, request, token, marginMs, owner) => new PgLock(s, name, entry, request, token, marginMs, owner) })),
    identity: async () => (await source.session()).identity,
    stats: () => source.counters.snapshot(),
    close,
    [Symbol.asyncDispose]: close,
  });
}
