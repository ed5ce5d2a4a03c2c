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
import { traceRelease } from './diagnostics.js';
import { forgetGrant, type SelfWaitNames } from './self-wait.js';
import type { Holding } from './step-down.js';
import type { Sequencer, SequencerKind, SourceIdentity } from './sequencer.js';
import { grantSequencer } from './source-identity.js';
import type { FencingToken } from './token.js';

/** `Op`: what the source's fenced write takes (a multi op, a txn op); `Result`: what it resolves to. */
export abstract class QueueGrant<Op, Result> {
  readonly name: string;
  readonly #kind: SequencerKind;
  /** The name the sequencer carries: the grant's, or a permit's slot (`<name>#<slot>`). */
  readonly #sequencerName: string;
  /** The name LockLostError carries ('jobs/reindex', 'election primary'). */
  protected readonly lockLabel: string;
  readonly #token: FencingToken;
  #leaving: Promise<void> | null = null;
  #sequencer: Sequencer | null = null;
  /** Where the self-wait registry noted this grant (noteGrant fills it in, forgetGrant reads it); declared here so every grant keeps one shape. Not for applications. */
  selfWaitIn: SelfWaitNames | null = null;
  /** The name the self-wait registry noted this grant under (with selfWaitIn). Not for applications. */
  selfWaitName: string | null = null;

  /**
   * `kind`: the grant's (a plain, read or write lock, a permit, a
   * leadership); `token`: our entry's order in the queue (a permit's: its
   * slot's); `sequencerName`: what the sequencer names, when not `name`
   * (a permit's slot, `<name>#<slot>`).
   */
  protected constructor(kind: SequencerKind, name: string, token: FencingToken, sequencerName: string = name) {
    this.#kind = kind;
    this.name = name;
    this.#sequencerName = sequencerName;
    // A plain lock by its name; the other kinds say which they are ('election primary', 'read jobs', 'permit pool#2').
    this.lockLabel = kind === 'lock' ? name : `${kind} ${sequencerName}`;
    this.#token = token;
  }

  /** The grant's kind, as its sequencer carries it. */
  protected get grantKind(): SequencerKind {
    return this.#kind;
  }

  /** The grant's token (a lock's token, a leadership's epoch). */
  protected get queueToken(): FencingToken {
    return this.#token;
  }

  /** Where the grant's entry lives, for toJSON (`{ path }` of a node, `{ key }` of a key). */
  protected entryJSON(): Record<string, string> {
    return {};
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
    return (this.#sequencer ??= grantSequencer(this.#kind, this.#sequencerName, this.sourceIdentity(), this.#token));
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
      forgetGrant(this);
      this.#leaving = this.leaveEntry();
    }
    return this.#leaving;
  }
}

/** A QueueGrant subclass of a source (its entry hooks filled in), abstract or not: what the grant mixins extend. */
// A mixin's base takes any constructor arguments (TypeScript's mixin rule).
export type QueueGrantClass<Op, Result> = abstract new (...args: any[]) => QueueGrant<Op, Result>;

/** What lockGrant adds to a source's queue grant: a Lock's token, release, fenced ops and JSON form. */
export interface LockGrantMethods<Op, Result> {
  /** The grant's fencing token: larger than every conflicting grant's before it. */
  readonly token: FencingToken;
  /** Give the lock back: the signal aborts at once (reason 'released'), then our entry leaves the queue. Idempotent. */
  release(): Promise<void>;
  /** Apply `ops` (the source's fenced write) only while the lock is held; LockLostError, nothing written, otherwise. */
  ifHeld(ops: readonly Op[]): Promise<Result>;
  /** The grant for a log: name, kind (when not a plain lock), token, where its entry lives, held. */
  toJSON(): Record<string, unknown>;
}

/**
 * The held lock of a queueing source, written once: mixed over the
 * source's QueueGrant subclass (its entry hooks), so a grant stays one
 * object. `source` names it in the release's tracing ('zookeeper', 'etcd').
 * Serves every kind a lock has (plain, read, write, a permit's slot):
 *
 *   class HeldLock extends lockGrant('zookeeper', HeldNode) {}
 */
export function lockGrant<Op, Result, Base extends QueueGrantClass<Op, Result>>(source: string, base: Base): Base & (abstract new (...args: any[]) => LockGrantMethods<Op, Result>) {
  abstract class HeldLock extends base implements LockGrantMethods<Op, Result> {
    get token(): FencingToken {
      return this.queueToken;
    }

    release(): Promise<void> {
      return traceRelease(source, this.name, this.queueToken, () => this.leave());
    }

    ifHeld(ops: readonly Op[]): Promise<Result> {
      return this.fenced('ifHeld', ops);
    }

    toJSON(): Record<string, unknown> {
      const kind = this.grantKind;
      return { name: this.name, ...(kind !== 'lock' && { kind }), token: this.queueToken.toString(), ...this.entryJSON(), held: this.held };
    }
  }
  return HeldLock;
}

/** What leadershipGrant adds to a source's queue grant: a Leadership's epoch, resign and fenced ops. */
export interface LeadershipGrantMethods<Op, Result> {
  /** The leadership's epoch: larger than every earlier leader's. */
  readonly epoch: FencingToken;
  /** Hand leadership on: the signal aborts at once, then our entry leaves the queue. Idempotent. */
  resign(): Promise<void>;
  /** Apply `ops` only while this candidate leads; LockLostError, nothing written, otherwise. */
  ifLeader(ops: readonly Op[]): Promise<Result>;
}

/**
 * The leadership of a queueing source's election, written once: mixed over
 * the source's QueueGrant subclass as lockGrant is.
 *
 *   class HeldLeadership extends leadershipGrant('etcd', HeldKey) { readonly id: string; ... }
 */
export function leadershipGrant<Op, Result, Base extends QueueGrantClass<Op, Result>>(source: string, base: Base): Base & (abstract new (...args: any[]) => LeadershipGrantMethods<Op, Result>) {
  abstract class HeldLeadership extends base implements LeadershipGrantMethods<Op, Result> {
    get epoch(): FencingToken {
      return this.queueToken;
    }

    resign(): Promise<void> {
      return traceRelease(source, this.name, this.queueToken, () => this.leave());
    }

    ifLeader(ops: readonly Op[]): Promise<Result> {
      return this.fenced('ifLeader', ops);
    }
  }
  return HeldLeadership;
}
