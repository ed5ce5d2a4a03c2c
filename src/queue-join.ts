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
 *   waitForTurn wait behind it (each waiter watches only what it waits for)
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

/** Join the queue and wait for our turn (see QueueJoinSteps); null only in 'try' mode. */
export async function joinQueue<Joined, Wait, Claimed, Grant extends { readonly held: boolean }>(steps: QueueJoinSteps<Joined, Wait, Claimed, Grant>): Promise<Grant | null> {
  const { mode, signal, timeoutMs } = steps;
  let stopper = steps.stopperFirst === true || signal !== undefined || timeoutMs !== undefined ? new QueueStopper(steps.waits, steps.name, signal, timeoutMs) : null;
  let joining: Promise<Joined | null> | null = null;
  let claiming: Promise<Claimed | null> | null = null;
  let grant: Grant | null = null;
  try {
    if (steps.shortcut !== undefined) {
      stopper ??= new QueueStopper(steps.waits, steps.name, undefined, undefined);
      claiming = steps.shortcut(stopper);
      const claimed = await stopper.race(claiming);
      if (claimed !== null) return (grant = handOver(steps, null, claimed));
      claiming = null;
      if (mode === 'try') return null;
    }
    joining = steps.enter(stopper);
    const joined = await (stopper === null ? joining : stopper.race(joining));
    if (joined === null) return null;
    const confirming = steps.confirmEntry?.(joined) ?? null;
    if (confirming !== null) await (stopper === null ? confirming : stopper.race(confirming));
    const place = steps.place(joined);
    let outcome: 'turn' | 'gone';
    if (place === 'turn' || place === 'gone') outcome = place as 'turn' | 'gone';
    else if (mode === 'try') return null;
    else {
      warnIfSelfWait(steps.client, steps.kind, steps.name);
      stopper ??= new QueueStopper(steps.waits, steps.name, undefined, undefined);
      outcome = await steps.waitForTurn(joined, place as Wait, stopper);
    }
    if (outcome === 'turn') {
      const holding = steps.holdBack?.(joined) ?? null;
      if (holding !== null) {
        stopper ??= new QueueStopper(steps.waits, steps.name, undefined, undefined);
        await stopper.race(holding);
      }
    }
    if (stopper !== null) stopper.check();
    else {
      // What a stopper would have caught: the client ended as the turn arrived.
      const error = steps.ended?.() ?? null;
      if (error !== null) throw error;
    }
    if (outcome === 'gone') throw steps.lost(joined);
    if (steps.claim === undefined) return (grant = handOver(steps, joined, null));
    stopper ??= new QueueStopper(steps.waits, steps.name, undefined, undefined);
    claiming = steps.claim(joined, stopper, () => warnIfSelfWait(steps.client, steps.kind, steps.name));
    const claimed = await stopper.race(claiming);
    if (claimed === null) return null;
    return (grant = handOver(steps, joined, claimed));
  } finally {
    (stopper as QueueStopper | null)?.dispose();
    if (grant === null) {
      if (joining !== null) await steps.abandon(joining);
      if (claiming !== null && steps.unclaim !== undefined) await steps.unclaim(claiming);
    }
  }
}

/** Build the grant and note it against its client (the self-wait warning): from here on it is the caller's. */
function handOver<Joined, Wait, Claimed, Grant extends { readonly held: boolean }>(steps: QueueJoinSteps<Joined, Wait, Claimed, Grant>, joined: Joined | null, claimed: Claimed | null): Grant {
  const grant = steps.build(joined, claimed);
  noteGrant(steps.client, steps.kind, steps.name, grant);
  return grant;
}
