/**
 * Join a fair queue and wait for our turn: the acquire path of every
 * queueing source's lock, read-write lock, semaphore and election, written
 * once. A source fills in the steps (QueueJoinSteps) with its own requests
 * (ZooKeeper's sequential nodes, etcd's keys under a prefix, a table's
 * rows); the order of the steps, the stop (signal, timeout, the client's
 * end), the self-wait warning and the rule that any way out but a grant
 * leaves nothing behind are here.
 *
 *   shortcut?   a grant taken without a queue entry (a semaphore's free slot while nobody waits)
 *   enter       our entry in the queue, and where it stands (null: a try found the queue busy)
 *   confirmEntry?  check the queue we joined before we wait in it (ZooKeeper: the parent's ACL)
 *   place       our turn, our entry gone, or what to wait for
 *   waitForTurn wait behind it (each waiter watches only what it waits for);
 *               awaitTurn? the same without a promise (a state object the waiter resumes)
 *   holdBack?   at our turn, before the grant (ZooKeeper's lock-delay after an unclean release)
 *   claim?      what a grant needs beyond heading the queue (a semaphore's slot)
 *   build       the grant (a QueueGrant), handed to the caller
 *   abandon / unclaim   every other way out: remove what enter / claim put
 *
 * The stop is made only when something can stop the join before its
 * requests fail on their own: the caller's signal or timeout, a wait, or a
 * source that asks for it from the start (stopperFirst). An uncontended
 * acquire without either makes none.
 */
import { noteGrant, warnIfSelfWait } from './self-wait.js';
import type { SequencerKind } from './sequencer.js';
import { QueueStopper, type WaitGroup } from './queue-stopper.js';

/**
 * A source's steps of one join. `Joined`: our entry as the source knows it;
 * `Wait`: what a waiter waits for; `Claimed`: what a claim takes (a slot);
 * `Grant`: the grant handed out.
 */
export interface QueueJoinSteps<Joined, Wait, Claimed, Grant extends { readonly held: boolean }> {
  /** The kind of grant (the self-wait warning tells a read-write lock's from a plain one's). */
  readonly kind: SequencerKind;
  /** The lock's name: a timeout names it. */
  readonly name: string;
  /** 'wait' for our turn, or 'try': take it only if it is ours at once (else null, leaving nothing behind). */
  readonly mode: 'wait' | 'try';
  /** What the grants hang on (the client, the session): the self-wait warning is per client and name. */
  readonly client: object;
  /** The client's waits: their timeouts share one timer, the client's end stops them all. */
  readonly waits: WaitGroup;
  /** The caller's signal and timeout, checked already. */
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  /** Make the stopper before the first step even without a signal or a timeout (a source whose steps follow it from the start). */
  readonly stopperFirst?: boolean;
  /** Before joining: a grant taken without a queue entry, or null to join (a 'try' then answers null). */
  readonly shortcut?: ((stopper: QueueStopper) => Promise<Claimed | null>) | undefined;
  /** Join the queue: our entry and where it stands; null: a 'try' found the queue busy and wrote nothing. */
  enter(stopper: QueueStopper | null): Promise<Joined | null>;
  /** Check the queue we joined (our entry is in it) before we wait in it; throws to leave. Null: nothing to check. */
  confirmEntry?(joined: Joined): Promise<void> | null;
  /** Where our entry stands after the join: our turn, gone (deleted), or what to wait for. */
  place(joined: Joined): 'turn' | 'gone' | Wait;
  /** Wait behind `wait` until our turn ('gone': our entry was deleted meanwhile); rejects with the stop's reason. */
  waitForTurn(joined: Joined, wait: Wait, stopper: QueueStopper): Promise<'turn' | 'gone'>;
  /**
   * Instead of waitForTurn, for a source whose waits are many: wait behind
   * `wait` without a promise, telling `turn` once how it ended (arrived:
   * our turn, or our entry gone; failed: the stop's reason, which the waiter
   * hears with stopper.tell, or a request's error). A waiting acquire then
   * keeps the waiter's state object and nothing of an async function's.
   */
  awaitTurn?(joined: Joined, wait: Wait, stopper: QueueStopper, turn: QueueTurn): void;
  /** At our turn, before the grant: a delay the source imposes (null: none). Raced against the stop. */
  holdBack?(joined: Joined): Promise<void> | null;
  /** Without a stopper, what the source's end would have stopped: its error (null: none). */
  ended?(): unknown;
  /** The error for our entry deleted while we waited. */
  lost(joined: Joined): Error;
  /**
   * Heading the queue, take what the grant needs beyond it (null in 'try'
   * mode when it cannot be had at once). Call `waiting()` before waiting for
   * it (the self-wait warning). Raced against the stop; unclaim removes it then.
   */
  readonly claim?: ((joined: Joined, stopper: QueueStopper, waiting: () => void) => Promise<Claimed | null>) | undefined;
  /** The grant: of our entry (`claimed` null), or of what the shortcut or the claim took (`joined` null after a shortcut). */
  build(joined: Joined | null, claimed: Claimed | null): Grant;
  /** Remove our entry once `joining` has settled (it may have been applied although it failed). */
  abandon(joining: Promise<Joined | null>): Promise<void>;
  /** Remove what a shortcut or a claim took, once it has settled, when the grant was not handed out. */
  readonly unclaim?: ((claiming: Promise<Claimed | null>) => Promise<void>) | undefined;
}

/**
 * How a waiter that waits without a promise (QueueJoinSteps.awaitTurn) tells
 * the join how its wait ended: exactly one call, arrived() or failed().
 */
export interface QueueTurn {
  /** Our turn came ('turn'), or our entry was deleted meanwhile ('gone'). */
  arrived(outcome: 'turn' | 'gone'): void;
  /** The wait ended otherwise: the stop's reason, or a request's error. The join leaves the queue and rejects with it. */
  failed(error: unknown): void;
}

/** Join the queue and wait for our turn (see QueueJoinSteps); null only in 'try' mode. */
export function joinQueue<Joined, Wait, Claimed, Grant extends { readonly held: boolean }>(steps: QueueJoinSteps<Joined, Wait, Claimed, Grant>): Promise<Grant | null> {
  return new QueueJoin(steps).run();
}

/**
 * One join: the steps in their order and what leaving needs (our entry, a
 * claim). Up to the wait it is one async function. A source whose waiter
 * waits without a promise (awaitTurn) is waited for without one either:
 * run() returns the join itself as a thenable, its then() starts the wait
 * and keeps the caller's resolve and reject, and the waiter calls
 * arrived() or failed(). So, while thousands of acquires wait, each keeps
 * this object and its waiter, and no suspended async function, promise
 * chain or race (some 2.4 KB a wait when it was written with them).
 */
class QueueJoin<Joined, Wait, Claimed, Grant extends { readonly held: boolean }> implements QueueTurn {
  readonly #steps: QueueJoinSteps<Joined, Wait, Claimed, Grant>;
  #stopper: QueueStopper | null;
  /** Our entry on its way: abandon() waits for it to settle. While waiting without a promise, `#joined` stands for it. */
  #joining: Promise<Joined | null> | null = null;
  #joined: Joined | null = null;
  #claiming: Promise<Claimed | null> | null = null;
  #grant: Grant | null = null;
  /** What the wait started by then() is behind; the caller's settle functions once it has started. */
  #wait: Wait | null = null;
  #resolve: ((grant: Grant | null) => void) | null = null;
  #reject: ((error: unknown) => void) | null = null;

  constructor(steps: QueueJoinSteps<Joined, Wait, Claimed, Grant>) {
    this.#steps = steps;
    const { signal, timeoutMs } = steps;
    this.#stopper = steps.stopperFirst === true || signal !== undefined || timeoutMs !== undefined ? new QueueStopper(steps.waits, steps.name, signal, timeoutMs) : null;
  }

  #stopperNow(): QueueStopper {
    return (this.#stopper ??= new QueueStopper(this.#steps.waits, this.#steps.name, undefined, undefined));
  }

  async run(): Promise<Grant | null> {
    const steps = this.#steps;
    let waiting = false;
    try {
      if (steps.shortcut !== undefined) {
        const stopper = this.#stopperNow();
        this.#claiming = steps.shortcut(stopper);
        const claimed = await stopper.race(this.#claiming);
        if (claimed !== null) return (this.#grant = handOver(steps, null, claimed));
        this.#claiming = null;
        if (steps.mode === 'try') return null;
      }
      const stopper = this.#stopper;
      const joining = (this.#joining = steps.enter(stopper));
      const joined = await (stopper === null ? joining : stopper.race(joining));
      if (joined === null) return null;
      const confirming = steps.confirmEntry?.(joined) ?? null;
      if (confirming !== null) await (stopper === null ? confirming : stopper.race(confirming));
      const place = steps.place(joined);
      if (place === 'turn' || place === 'gone') {
        const granting = this.#fromTurn(joined, place as 'turn' | 'gone');
        return granting instanceof Promise ? await granting : granting;
      }
      if (steps.mode === 'try') return null;
      warnIfSelfWait(steps.client, steps.kind, steps.name);
      if (steps.awaitTurn === undefined) return await this.#fromTurn(joined, await steps.waitForTurn(joined, place as Wait, this.#stopperNow()));
      // Waited for without a promise: then() starts the wait, and the rest follows arrived() or failed().
      this.#stopperNow();
      this.#joining = null;
      this.#joined = joined;
      this.#wait = place as Wait;
      waiting = true;
      return this as unknown as Grant | null;
    } finally {
      if (!waiting) await this.#leave();
    }
  }

  /**
   * Called once, by the promise run() returned, with the caller's settle
   * functions (run() resolved with this join, a thenable): start the wait.
   */
  then(resolve: (grant: Grant | null) => void, reject: (error: unknown) => void): void {
    this.#resolve = resolve;
    this.#reject = reject;
    const wait = this.#wait as Wait;
    this.#wait = null;
    try {
      // run() hands over to then() only when the steps have awaitTurn.
      this.#steps.awaitTurn?.(this.#joined as Joined, wait, this.#stopper as QueueStopper, this);
    } catch (error) {
      this.failed(error);
    }
  }

  arrived(outcome: 'turn' | 'gone'): void {
    const resolve = this.#resolve;
    const reject = this.#reject;
    if (resolve === null || reject === null) return;
    this.#resolve = this.#reject = null;
    this.#afterWait(outcome).then(resolve, reject);
  }

  failed(error: unknown): void {
    const reject = this.#reject;
    if (reject === null) return;
    this.#resolve = this.#reject = null;
    this.#leave().then(() => reject(error), reject);
  }

  async #afterWait(outcome: 'turn' | 'gone'): Promise<Grant | null> {
    try {
      return await this.#fromTurn(this.#joined as Joined, outcome);
    } finally {
      await this.#leave();
    }
  }

  /**
   * Our turn came (or our entry went): lock-delay's hold-back, a stop that
   * came meanwhile, the claim, the grant. Without a hold-back or a claim (an
   * uncontended lock) the grant is returned as it is, without a promise.
   */
  #fromTurn(joined: Joined, outcome: 'turn' | 'gone'): Grant | null | Promise<Grant | null> {
    if (outcome === 'turn') {
      const holding = this.#steps.holdBack?.(joined) ?? null;
      if (holding !== null) return this.#stopperNow().race(holding).then(() => this.#afterHoldBack(joined, outcome));
    }
    return this.#afterHoldBack(joined, outcome);
  }

  #afterHoldBack(joined: Joined, outcome: 'turn' | 'gone'): Grant | null | Promise<Grant | null> {
    const steps = this.#steps;
    const stopper = this.#stopper;
    if (stopper !== null) stopper.check();
    else {
      // What a stopper would have caught: the client ended as the turn arrived.
      const error = steps.ended?.() ?? null;
      if (error !== null) throw error;
    }
    if (outcome === 'gone') throw steps.lost(joined);
    if (steps.claim === undefined) return (this.#grant = handOver(steps, joined, null));
    return this.#claim(joined);
  }

  async #claim(joined: Joined): Promise<Grant | null> {
    const steps = this.#steps;
    const stopper = this.#stopperNow();
    this.#claiming = (steps.claim as NonNullable<typeof steps.claim>)(joined, stopper, () => warnIfSelfWait(steps.client, steps.kind, steps.name));
    const claimed = await stopper.race(this.#claiming);
    if (claimed === null) return null;
    return (this.#grant = handOver(steps, joined, claimed));
  }

  /** However the join ended: the stop disposed; unless granted, our entry and a claim removed. */
  async #leave(): Promise<void> {
    this.#stopper?.dispose();
    if (this.#grant !== null) return;
    const steps = this.#steps;
    const joining = this.#joining ?? (this.#joined === null ? null : Promise.resolve(this.#joined));
    if (joining !== null) await steps.abandon(joining);
    if (this.#claiming !== null && steps.unclaim !== undefined) await steps.unclaim(this.#claiming);
  }
}

/** Build the grant and note it against its client (the self-wait warning): from here on it is the caller's. */
function handOver<Joined, Wait, Claimed, Grant extends { readonly held: boolean }>(steps: QueueJoinSteps<Joined, Wait, Claimed, Grant>, joined: Joined | null, claimed: Claimed | null): Grant {
  const grant = steps.build(joined, claimed);
  noteGrant(steps.client, steps.kind, steps.name, grant);
  return grant;
}
