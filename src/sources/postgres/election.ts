/**
 * Leader election on the same queue as the lock (kind 'election'): electing
 * a leader is acquiring a lock that is held for longer. The leader's epoch
 * comes from the same sequence under the same rules as a lock's token
 * (migration 010), so every later leader's epoch is larger.
 */
import type { FencingToken, Leadership } from '../../index.js';
import { traceRelease } from '../../extend.js';
import { PgEntry } from './grant.js';
import type { PgSession } from './session.js';

/** A leadership won on postgresSource: the core's Leadership, our id, and where it lives in the database. */
export interface PostgresLeadership extends Leadership {
  /** This candidate's id (CampaignOptions.id, default hostname:pid), as lockStatus and observers show it. */
  readonly id: string;
  /** Our entry in fencekeeper_lock_entries. */
  readonly entry: bigint;
  /** The source's session the leadership hangs on. */
  readonly session: bigint;
}

export class PgLeadership extends PgEntry implements PostgresLeadership {
  readonly epoch: FencingToken;
  readonly id: string;

  constructor(session: PgSession, name: string, entry: string, request: string, epoch: FencingToken, marginMs: number, id: string) {
    super(session, 'election', name, entry, request, epoch, marginMs);
    this.epoch = epoch;
    this.id = id;
  }

  resign(): Promise<void> {
    return traceRelease('postgres', this.name, this.epoch, () => this.leave());
  }
}
