/**
 * A fair lock in PostgreSQL whose every grant carries a fencing token: a
 * value of the fencekeeper_lock_tokens sequence, taken in the granting
 * transaction under the lock's row lock (migration 010 says why that makes
 * it strictly increasing and never repeated). The same class is a read or
 * write lock of a read-write pair (migration 013), told apart by its
 * sequencer's kind.
 */
import type { FencingToken, Lock } from '../../index.js';
import { PgEntry } from './grant.js';
import type { Joined } from './join.js';

/** A lock granted by postgresSource (plain, read or write): the core's Lock, with where it lives in the database. */
export interface PostgresLock extends Lock {
  /** Our entry in fencekeeper_lock_entries: the row withLease share-locks. */
  readonly entry: bigint;
  /** The source's session (fencekeeper_lock_sessions) the grant hangs on. */
  readonly session: bigint;
  /** AcquireOptions.owner of this acquire (default hostname:pid), as lockStatus shows it. */
  readonly owner: string;
}

export class PgLock extends PgEntry implements PostgresLock {
  readonly token: FencingToken;
  readonly owner: string;

  constructor(joined: Joined, kind: 'lock' | 'read' | 'write' | 'permit', name: string) {
    super(joined, kind, name);
    this.token = joined.token;
    this.owner = joined.owner;
  }

  release(): Promise<void> {
    return this.end();
  }

  toJSON(): { name: string; token: string; entry: string; held: boolean } {
    return { name: this.name, token: this.token.toString(), entry: this.entry.toString(), held: this.held };
  }
}
