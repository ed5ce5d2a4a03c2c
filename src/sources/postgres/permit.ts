/**
 * One permit of a PostgreSQL semaphore (migration 013): a lock on one slot
 * of `[0, permits)`, its token taken when it claimed the slot (nextval
 * under the name's row lock, which covers the slot's row), so per slot the
 * tokens of successive holders strictly increase. Its sequencer names the
 * slot, `<name>#<slot>`: a resource fenced per slot refuses a stale holder
 * of that slot, and one slot's holder cannot advance another slot's fence.
 */
import type { Permit, Sequencer } from '../../index.js';
import { grantSequencer } from '../../extend.js';
import type { Joined } from './join.js';
import { PgLock, type PostgresLock } from './lock.js';

/** A permit granted by postgresSource: the core's Permit, with where it lives in the database. */
export interface PostgresPermit extends Permit, PostgresLock {}

export class PgPermit extends PgLock implements PostgresPermit {
  readonly slot: number;
  readonly permits: number;
  #permitSequencer: Sequencer | null = null;

  constructor(joined: Joined, name: string, permits: number) {
    super(joined, 'permit', name);
    if (joined.slot === null) throw new Error(`unreachable: permit ${name} granted without a slot`);
    this.slot = joined.slot;
    this.permits = permits;
  }

  /** Names the slot, not the semaphore: each slot is fenced on its own. */
  override get sequencer(): Sequencer {
    return (this.#permitSequencer ??= grantSequencer('permit', `${this.name}#${this.slot}`, this.sourceIdentity(), this.token));
  }

  override toJSON(): { name: string; slot: number; permits: number; token: string; entry: string; held: boolean } {
    return { name: this.name, slot: this.slot, permits: this.permits, token: this.token.toString(), entry: this.entry.toString(), held: this.held };
  }
}
