/**
 * Our entry at the head of a fair queue: what a held lock and a leadership
 * share, whichever source keeps the queue (ZooKeeper's sequential nodes,
 * etcd's keys under a prefix, a table's rows).
 *
 * A grant holds until its step-down deadline (./step-down.ts), until the
 * source reports a loss (the session or lease ended, someone deleted our
 * entry), or until we leave (release / resign), which ends the holding at
 * once and then deletes our entry. `held` and `signal` read the holding;
 * the sequencer is made when first asked for.
 *
 * What differs per source are the hooks below: how the holding is made (a
 * source may make it only when the holder first looks, as ZooKeeper does,
 * so that an acquire, a write and a release cost no AbortController), where
 * the deadline comes from, how our entry leaves the queue, and how a write
 * is fenced on our entry (a multi with a check, a txn with a compare).
 * A source subclasses this once, for the state its hooks keep, so a grant
 * is one object: no layer of delegation on the acquire/release path.
 */
import type { Holding } from './step-down.js';
import type { Sequencer, SequencerKind, SourceIdentity } from './sequencer.js';
import { grantSequencer } from './source-identity.js';
import type { FencingToken } from './token.js';

/** `Op`: what the source's fenced write takes (a multi op, a txn op); `Result`: what it resolves to. */
export abstract class QueueGrant<Op, Result> {
  readonly name: string;
  readonly #kind: SequencerKind;
  /** The name LockLostError carries ('jobs/reindex', 'election primary'). */
  protected readonly lockLabel: string;
  readonly #token: FencingToken;
  #leaving: Promise<void> | null = null;
  #sequencer: Sequencer | null = null;

  /** `kind`: a lock's grant or a leadership; `token`: our entry's order in the queue. */
  protected constructor(kind: SequencerKind, name: string, token: FencingToken) {
    this.#kind = kind;
    this.name = name;
    this.lockLabel = kind === 'lock' ? name : `election ${name}`;
    this.#token = token;
  }

  /** The step-down holding behind `held` and `signal` (a source may make it on first use). */
  protected abstract holding(): Holding;

  /** The step-down instant on the performance.now() clock. */
  abstract get deadline(): number;

  /** The source's identity as this grant's client knows it (known before the grant was handed out). */
  protected abstract sourceIdentity(): SourceIdentity | undefined;

  /** Delete our entry from the queue (after the holding has ended). */
  protected abstract leaveEntry(): Promise<void>;

  /** ifHeld / ifLeader: `ops` applied by the source only while our entry is at the head. */
  protected abstract fenced(what: 'ifHeld' | 'ifLeader', ops: readonly Op[]): Promise<Result>;

  /** How leaving ends the holding: at once, as 'released' (a source with a lazy holding may only note it). */
  protected released(): void {
    this.holding().lose('released');
  }

  /** The grant's sequencer (our kind, name and token, the source's identity), made when first asked for. */
  get sequencer(): Sequencer {
    return (this.#sequencer ??= grantSequencer(this.#kind, this.name, this.sourceIdentity(), this.#token));
  }

  get signal(): AbortSignal {
    return this.holding().signal;
  }

  get held(): boolean {
    return this.holding().held;
  }

  /** Whether we have begun to leave. */
  protected get leaving(): boolean {
    return this.#leaving !== null;
  }

  /**
   * `await using`: leaving the scope ends the grant as the grant's own
   * release() (a lock, a permit) or resign() (a leadership) does, with its
   * tracing; a subclass with neither just leaves. Idempotent, as they are.
   */
  [Symbol.asyncDispose](): Promise<void> {
    const self = this as unknown as { release?: () => Promise<void>; resign?: () => Promise<void> };
    const end = self.release ?? self.resign;
    return end === undefined ? this.leave() : end.call(this);
  }

  /** End the holding, then delete our entry. Idempotent: every call returns the first one's promise. */
  protected leave(): Promise<void> {
    if (this.#leaving === null) {
      this.released();
      this.#leaving = this.leaveEntry();
    }
    return this.#leaving;
  }
}
