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
import { QueueGrant, traceRelease, type Holding } from '../../extend.js';
import type { Joined } from './join.js';
import type { PgSession } from './session.js';

export abstract class PgEntry extends QueueGrant<never, never> {
  /** The session the entry hangs on (fencekeeper_lock_sessions). */
  readonly session: bigint;
  readonly #session: PgSession;
  readonly #entryText: string;
  #entry: bigint | undefined;
  readonly #request: string;
  readonly #holding: Holding;
  readonly #token: FencingToken;

  /** The one constructor of every grant of this source (lock, read, write, permit, leadership): a join's result on `session`. */
  constructor(joined: Joined, kind: SequencerKind, name: string) {
    const { session, token } = joined;
    super(kind, name, token);
    this.#token = token;
    this.#session = session;
    this.#entryText = joined.entry;
    this.#request = joined.request;
    this.session = session.id;
    this.#holding = session.clock.hold({ lock: this.lockLabel, marginMs: joined.marginMs, token, deadline: session.deadlineOf });
  }

  /** Our entry in fencekeeper_lock_entries (the row withLease share-locks); parsed when first read, not on every acquire. */
  get entry(): bigint {
    return (this.#entry ??= BigInt(this.#entryText));
  }

  /** Leave the queue (release, resign), traced as every source's release. */
  protected end(): Promise<void> {
    return traceRelease('postgres', this.name, this.#token, () => this.leave());
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

  /** The grant's token (a lock's token, a leadership's epoch), for withLease. */
  get grantToken(): FencingToken {
    return this.#token;
  }

  /** The database this grant lives in, `<system identifier>-<database OID>`, for withLease. */
  get sourceId(): string {
    return this.#session.identity.id;
  }

  /** withLease found the grant ended in the database: end the holding too (the database's word is final). */
  endedInDatabase(): void {
    this.#holding.lose('session_expired', 'the database says its lease has ended');
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
