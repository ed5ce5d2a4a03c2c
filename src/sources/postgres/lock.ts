/**
 * A fair lock in PostgreSQL whose every grant carries a fencing token: a
 * value of the fencekeeper_lock_tokens sequence, taken in the granting
 * transaction under the lock's row lock (migration 009 says why that makes
 * it strictly increasing and never repeated).
 */
import type { FencingToken, Lock } from '../../index.js';
import { traceRelease } from '../../extend.js';
import { PgEntry } from './grant.js';
import type { PgSession } from './session.js';

/** A lock granted by postgresSource: the core's Lock, with where it lives in the database. */
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

  constructor(session: PgSession, name: string, entry: string, request: string, token: FencingToken, marginMs: number, owner: string) {
    super(session, 'lock', name, entry, request, token, marginMs);
    this.token = token;
    this.owner = owner;
  }

  release(): Promise<void> {
    return traceRelease('postgres', this.name, this.token, () => this.leave());
  }

  toJSON(): { name: string; token: string; entry: string; held: boolean } {
    return { name: this.name, token: this.token.toString(), entry: this.entry.toString(), held: this.held };
  }
}
