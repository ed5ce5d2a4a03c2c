/**
 * Our entry at the head of a PostgreSQL queue: the core's queue grant
 * (../../queue-grant.ts) on the source's session.
 *
 * It holds until the session's step-down deadline (send time of the last
 * acknowledged renewal + lease - margin), until the session ends, or until
 * we leave (release / resign), which ends the holding at once and then
 * deletes the entry, handing the name to the next live waiter.
 */
import type { FencingToken, SequencerKind, SourceIdentity } from '../../index.js';
import { QueueGrant, type Holding } from '../../extend.js';
import type { PgSession } from './session.js';

export abstract class PgEntry extends QueueGrant<never, never> {
  /** Our entry in fencekeeper_lock_entries (the row withLease share-locks). */
  readonly entry: bigint;
  /** The session the entry hangs on (fencekeeper_lock_sessions). */
  readonly session: bigint;
  readonly #session: PgSession;
  readonly #entryText: string;
  readonly #request: string;
  readonly #holding: Holding;

  constructor(session: PgSession, kind: SequencerKind, name: string, entry: string, request: string, token: FencingToken, marginMs: number) {
    super(kind, name, token);
    this.#session = session;
    this.#entryText = entry;
    this.#request = request;
    this.entry = BigInt(entry);
    this.session = session.id;
    this.#holding = session.clock.hold({ lock: this.lockLabel, marginMs, token, deadline: () => session.deadline });
  }

  protected holding(): Holding {
    return this.#holding;
  }

  protected sourceIdentity(): SourceIdentity | undefined {
    return this.#session.identity;
  }

  get deadline(): number {
    return this.#holding.deadline;
  }

  /** The PostgreSQL session this grant hangs on, for withLease (it must be this source's). */
  protected get pgSession(): PgSession {
    return this.#session;
  }

  /**
   * The queue grant's fenced-ops hook, which PostgreSQL has no use for: a
   * write in the source's own database is fenced by withLease (the lease
   * checked by the write itself), elsewhere by the token. Never called.
   */
  protected fenced(): Promise<never> {
    return Promise.reject(new Error(`unreachable: ${this.lockLabel} has no fenced ops on PostgreSQL`));
  }

  protected leaveEntry(): Promise<void> {
    return this.#session.leave(this.#entryText, this.#request);
  }
}
