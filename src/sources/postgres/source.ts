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
 * queue and its tokens: migration 010 and ./join.ts.
 */
import {
  ClientClosedError,
  type AcquireOptions,
  type CampaignOptions,
  type FencingToken,
  type LockObserver,
  type LockSource,
  type PermitOptions,
  type SourceIdentity,
  type SourceObserver,
  type TryAcquireOptions,
  type TryPermitOptions,
} from '../../index.js';
import { DEFAULT_OWNER, WaitGroup, traceAcquire, traceCampaign } from '../../extend.js';
import type { PgSourcePool } from './client.js';
import { PgLeadership, type PostgresLeadership } from './election.js';
import { checkName, checkPermits, checkPool, checkSourceOptions, type PostgresSourceOptions } from './input.js';
import { joinAndWait, type JoinSource, type JoinTarget } from './join.js';
import { PgLock, type PostgresLock } from './lock.js';
import { PgQueueObserver } from './observer.js';
import { PgPermit, type PostgresPermit } from './permit.js';
import {
  readKindQueue,
  readQueue,
  type PostgresKindStatus,
  type PostgresLockStatus,
  type PostgresPermitEntry,
  type PostgresQueueEntry,
  type PostgresRwQueueEntry,
} from './queue.js';
import { Counters, PgSession, type PostgresSourceStats } from './session.js';

/** The PostgreSQL source: every method of LockSource, with PostgreSQL's richer results, and close(). */
export interface PostgresSource extends LockSource {
  readonly kind: 'postgres';
  /** The session's lease in ms (PostgresSourceOptions.leaseMs). */
  readonly leaseMs: number;
  acquireLock(name: string, options?: AcquireOptions): Promise<PostgresLock>;
  tryAcquireLock(name: string, options?: TryAcquireOptions): Promise<PostgresLock | null>;
  /**
   * A read lock (migration 013): held together with the name's other
   * readers, never with its writer; arrival order, a waiting writer holding
   * back every later reader. Its own queue, apart from the plain lock's
   * (sequencer kind 'read'); readers held together carry tokens in any
   * order, so check a fence with it without advancing it.
   */
  acquireReadLock(name: string, options?: AcquireOptions): Promise<PostgresLock>;
  /** A read lock only if no writer holds or waits for the name; null otherwise, leaving no row. */
  tryAcquireReadLock(name: string, options?: TryAcquireOptions): Promise<PostgresLock | null>;
  /**
   * The write lock of the read-write pair (sequencer kind 'write'): held
   * alone, in arrival order; its token is larger than every grant of the
   * name before it, read or write.
   */
  acquireWriteLock(name: string, options?: AcquireOptions): Promise<PostgresLock>;
  /** The write lock only if nobody holds or waits for the name; null otherwise, leaving no row. */
  tryAcquireWriteLock(name: string, options?: TryAcquireOptions): Promise<PostgresLock | null>;
  /**
   * One of `options.permits` permits (migration 013), in arrival order: at
   * most that many held at once. Its token is taken when it claims its slot,
   * so per slot tokens strictly increase; its sequencer is `{ kind:
   * 'permit', name: '<name>#<slot>' }`. Another `permits` while the name is
   * in use: PermitsMismatchError.
   */
  acquirePermit(name: string, options: PermitOptions): Promise<PostgresPermit>;
  /** A permit only if nobody waits and a slot is free; null otherwise, leaving no row. */
  tryAcquirePermit(name: string, options: TryPermitOptions): Promise<PostgresPermit | null>;
  /** Stand for election (the same fair queue, kind 'election'); resolves when elected. */
  campaign(name: string, options?: CampaignOptions): Promise<PostgresLeadership>;
  /** The lock's live holder and waiters, and the database's synchronous_commit / synchronous_standby_names. One statement. */
  lockStatus(name: string): Promise<PostgresLockStatus>;
  /**
   * The lock's queue from a cache a NOTIFY keeps fresh (the core's
   * LockObserver). The source's session registers the observer; its
   * queue's changes are NOTIFYd only while someone observes it.
   */
  observeLock(name: string): LockObserver<PostgresQueueEntry>;
  /** A read-write lock's holders (one writer, or readers together) and waiters with their modes: one statement. */
  rwLockStatus(name: string): Promise<PostgresKindStatus<PostgresRwQueueEntry>>;
  /** A semaphore's holders with their slots, and its waiters: one statement. */
  permitStatus(name: string): Promise<PostgresKindStatus<PostgresPermitEntry>>;
  /**
   * Who leads an election, without campaigning: current() answers from a
   * cache a NOTIFY keeps fresh (as observeLock's), onChange when it may
   * have changed, close() to stop.
   */
  observeLeader(name: string): PostgresLeaderObserver;
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
  /** close(), for `await using source = postgresSource(pool)`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** The current leader of a PostgreSQL election, as observers see it. */
export interface PostgresLeaderInfo {
  /** The leader's CampaignOptions.id. */
  readonly id: string;
  readonly epoch: FencingToken;
  /** Its entry in fencekeeper_lock_entries. */
  readonly entry: bigint;
}

/** An election watched from outside it (PostgresSource.observeLeader). */
export interface PostgresLeaderObserver extends SourceObserver {
  /** The current leader, from the cache while it is fresh; null when nobody leads. */
  current(): Promise<PostgresLeaderInfo | null>;
}

class Source implements JoinSource {
  readonly pool: PgSourcePool;
  readonly leaseMs: number;
  readonly counters = new Counters();
  /** Every join's wait on this source: one timer for their timeouts; close() stops them all. */
  readonly waits = new WaitGroup();
  #session: PgSession | null = null;
  #opening: Promise<PgSession> | null = null;
  #closedError: ClientClosedError | null = null;
  #closing: Promise<void> | null = null;

  constructor(pool: PgSourcePool, leaseMs: number) {
    this.pool = pool;
    this.leaseMs = leaseMs;
  }

  closedError(): ClientClosedError | null {
    return this.#closedError;
  }

  live(): PgSession | null {
    const live = this.#session;
    return live !== null && live.endedReason === null && this.#closedError === null ? live : null;
  }

  session(): Promise<PgSession> {
    if (this.#closedError !== null) return Promise.reject(new ClientClosedError('the PostgreSQL source was closed'));
    const live = this.#session;
    if (live !== null && live.endedReason === null) return Promise.resolve(live);
    if (this.#opening === null) {
      const opening = PgSession.open(this.pool, this.leaseMs, DEFAULT_OWNER, this.counters, (ended) => {
        if (this.#session === ended) this.#session = null;
      }).then(
        (session) => {
          this.#opening = null;
          if (this.#closedError !== null) {
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
      const error = new ClientClosedError('the PostgreSQL source was closed');
      this.#closedError = error;
      // A join between its steps (entering, looking up a slot) stops now too, and deletes what it put.
      this.waits.stopAll(error);
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

/** The one acquire of a lock, read lock or write lock: a traced join of `target`'s queue, granted as a PgLock of `kind`. */
function lock(source: Source, target: JoinTarget, kind: 'lock' | 'read' | 'write', name: string, mode: 'wait' | 'try', options: unknown): Promise<PgLock | null> {
  return traceAcquire('postgres', name, mode, () => joinAndWait(source, { target, name, mode, options, ownerField: 'owner', build: (joined) => new PgLock(joined, kind, name) }));
}

/** A permit's acquire: `permits` checked (before the name, as the other sources), then a traced join of the semaphore's queue. */
async function permit(source: Source, name: string, mode: 'wait' | 'try', options: unknown): Promise<PgPermit | null> {
  const permits = checkPermits(options);
  return traceAcquire('postgres', name, mode, () =>
    joinAndWait(source, { target: { kind: 'permit', permits }, name, mode, options, ownerField: 'owner', build: (joined) => new PgPermit(joined, name, permits) }));
}

/**
 * A LockSource over a pg.Pool (it keeps one of the pool's connections for
 * its heartbeat and LISTEN: the pool needs max >= 2). Tables and functions
 * come from migrate() (migration 010); a database without them answers
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
    acquireLock: (name: string, o?: AcquireOptions) => lock(source, { kind: 'lock' }, 'lock', name, 'wait', o) as Promise<PgLock>,
    tryAcquireLock: (name: string, o?: TryAcquireOptions) => lock(source, { kind: 'lock' }, 'lock', name, 'try', o),
    acquireReadLock: (name: string, o?: AcquireOptions) => lock(source, { kind: 'rw', mode: 'read' }, 'read', name, 'wait', o) as Promise<PgLock>,
    tryAcquireReadLock: (name: string, o?: TryAcquireOptions) => lock(source, { kind: 'rw', mode: 'read' }, 'read', name, 'try', o),
    acquireWriteLock: (name: string, o?: AcquireOptions) => lock(source, { kind: 'rw', mode: 'write' }, 'write', name, 'wait', o) as Promise<PgLock>,
    tryAcquireWriteLock: (name: string, o?: TryAcquireOptions) => lock(source, { kind: 'rw', mode: 'write' }, 'write', name, 'try', o),
    acquirePermit: (name: string, o: PermitOptions) => permit(source, name, 'wait', o) as Promise<PgPermit>,
    tryAcquirePermit: (name: string, o: TryPermitOptions) => permit(source, name, 'try', o),
    campaign: (name: string, o?: CampaignOptions) =>
      traceCampaign('postgres', name, () => joinAndWait(source, { target: { kind: 'election' }, name, mode: 'wait', options: o, ownerField: 'id', build: (joined) => new PgLeadership(joined, name) }) as Promise<PgLeadership>),
    lockStatus: async (name: string) => {
      checkName(name);
      return readQueue(pool, 'lock', name);
    },
    observeLock: (name: string) => {
      checkName(name);
      const queue = new PgQueueObserver(source, 'lock', name);
      return {
        holder: async () => {
          const head = (await queue.entries())[0];
          return head !== undefined && !head.waiting ? head : null;
        },
        queue: () => queue.entries(),
        onChange: (listener: () => void) => queue.onChange(listener),
        close: () => queue.close(),
      };
    },
    rwLockStatus: async (name: string) => {
      checkName(name);
      return readKindQueue(pool, 'rw', name);
    },
    permitStatus: async (name: string) => {
      checkName(name);
      return readKindQueue(pool, 'permit', name);
    },
    observeLeader: (name: string) => {
      checkName(name);
      const queue = new PgQueueObserver(source, 'election', name);
      return {
        current: async () => {
          const head = (await queue.entries())[0];
          return head === undefined || head.waiting ? null : { id: head.owner, epoch: head.token, entry: head.entry };
        },
        onChange: (listener: () => void) => queue.onChange(listener),
        close: () => queue.close(),
      };
    },
    identity: async () => (await source.session()).identity,
    stats: () => source.counters.snapshot(),
    close,
    [Symbol.asyncDispose]: close,
  });
}
