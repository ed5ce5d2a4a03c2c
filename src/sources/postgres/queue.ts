/**
 * A name's queue as operators see it (lockStatus, observeLock): its live
 * entries in grant order, the holder first, and what the database says of
 * its commit durability, which bounds every guarantee of this source.
 */
import type { FencingToken, LockStatus, LockStatusEntry, SequencerKind } from '../../index.js';
import { bigintOf, queryRows, type PgSourcePool } from './client.js';

/** One entry of a PostgreSQL queue. */
export interface PostgresQueueEntry extends LockStatusEntry {
  /**
   * The holder's token. A waiter has none yet (its token is taken when it
   * is granted, never when it joins): 0n.
   */
  readonly token: FencingToken;
  /** Whether this entry waits (false: it holds). */
  readonly waiting: boolean;
  /** The entry's row (fencekeeper_lock_entries.id): its place in arrival order. */
  readonly entry: bigint;
  /** The session it hangs on (fencekeeper_lock_sessions.id). */
  readonly session: bigint;
}

/** lockStatus's answer: holder and waiters, and the settings that say how durable a grant is. */
export interface PostgresLockStatus extends LockStatus<PostgresQueueEntry> {
  /**
   * The database's synchronous_commit for the pool's sessions (the source's
   * own transactions always run with 'on'; this says what other writers get).
   */
  readonly synchronousCommit: string;
  /**
   * synchronous_standby_names: empty means a commit is acknowledged once it
   * is on the primary's disk, so a failover to an asynchronous replica can
   * lose acknowledged grants (a double grant, a repeated token); a standby
   * named here must have the commit too before it is acknowledged.
   */
  readonly synchronousStandbyNames: string;
}

const QUEUE = `SELECT entry_id, session_id, owner, token, synchronous_commit, synchronous_standby_names FROM fencekeeper_lock_queue($1, $2)`;
const SETTINGS = `SELECT current_setting('synchronous_commit') AS synchronous_commit, current_setting('synchronous_standby_names') AS synchronous_standby_names`;

export async function readQueue(pool: PgSourcePool, kind: SequencerKind, name: string): Promise<PostgresLockStatus> {
  const rows = await queryRows(pool, 'fencekeeper_lock_queue_v1', QUEUE, [kind, name]);
  const settings = rows[0] ?? (await queryRows(pool, 'fencekeeper_lock_settings_v1', SETTINGS, []))[0] ?? {};
  const entries: PostgresQueueEntry[] = rows.map((row) => {
    const token = bigintOf(row['token']);
    return Object.freeze({
      token: token ?? 0n,
      owner: String(row['owner']),
      waiting: token === null,
      entry: bigintOf(row['entry_id']) as bigint,
      session: bigintOf(row['session_id']) as bigint,
    });
  });
  const holder = entries[0] !== undefined && !entries[0].waiting ? entries[0] : null;
  return {
    name,
    holder,
    waiters: holder === null ? entries : entries.slice(1),
    synchronousCommit: String(settings['synchronous_commit']),
    synchronousStandbyNames: String(settings['synchronous_standby_names']),
  };
}

/** One entry of a read-write lock's queue: a PostgreSQL queue entry, reading or writing. */
export interface PostgresRwQueueEntry extends PostgresQueueEntry {
  readonly mode: 'read' | 'write';
}

/** One entry of a semaphore's queue: a holder's slot (null while it waits). */
export interface PostgresPermitEntry extends PostgresQueueEntry {
  readonly slot: number | null;
}

/**
 * A read-write lock's or semaphore's queue: `holders` (one writer, the
 * readers held together, or up to `permits` permits), in grant order, then
 * `waiters` in the order they will be granted.
 */
export interface PostgresKindStatus<Entry extends PostgresQueueEntry> {
  readonly name: string;
  readonly holders: readonly Entry[];
  readonly waiters: readonly Entry[];
}

const QUEUE_KIND = `SELECT entry_id, session_id, owner, token, mode, slot, permits FROM fencekeeper_lock_queue_kind($1, $2)`;

/** A read-write queue ('rw') or a semaphore ('permit') for operators: one statement. */
export async function readKindQueue(pool: PgSourcePool, kind: 'rw', name: string): Promise<PostgresKindStatus<PostgresRwQueueEntry>>;
export async function readKindQueue(pool: PgSourcePool, kind: 'permit', name: string): Promise<PostgresKindStatus<PostgresPermitEntry>>;
export async function readKindQueue(pool: PgSourcePool, kind: 'rw' | 'permit', name: string): Promise<PostgresKindStatus<PostgresRwQueueEntry | PostgresPermitEntry>> {
  const rows = await queryRows(pool, 'fencekeeper_lock_queue_kind_v1', QUEUE_KIND, [kind, name]);
  const entries = rows.map((row) => {
    const token = bigintOf(row['token']);
    const base = {
      token: token ?? 0n,
      owner: String(row['owner']),
      waiting: token === null,
      entry: bigintOf(row['entry_id']) as bigint,
      session: bigintOf(row['session_id']) as bigint,
    };
    return Object.freeze(kind === 'rw' ? { ...base, mode: row['mode'] === 'write' ? ('write' as const) : ('read' as const) } : { ...base, slot: row['slot'] === null ? null : Number(row['slot']) });
  });
  return { name, holders: entries.filter((e) => !e.waiting), waiters: entries.filter((e) => e.waiting) };
}
