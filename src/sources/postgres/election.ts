/**
 * Leader election on the same queue as the lock (kind 'election'): electing
 * a leader is acquiring a lock that is held for longer. The leader's epoch
 * comes from the same sequence under the same rules as a lock's token
 * (migration 010), so every later leader's epoch is larger.
 */
import type { FencingToken, Leadership } from '../../index.js';
import { PgEntry } from './grant.js';
import type { Joined } from './join.js';

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

  constructor(joined: Joined, name: string) {
    super(joined, 'election', name);
    this.epoch = joined.token;
    this.id = joined.owner;
  }

  resign(): Promise<void> {
    return this.end();
  }
}
