/**
 * What it means to hold a lock (or a leadership) between grant and release.
 *
 * A holder can only ever know that it *held* the lock; whether it still does
 * is a statement about the server's view of our session. The server expires
 * a session it has not heard from for the negotiated timeout, and it heard
 * from us no earlier than the send time of the last request whose reply
 * arrived (ZooKeeperClient.lastAckedSendTime). So a holding ends, by our own
 * monotonic clock, at lastAckedSendTime + timeout - safetyMargin unless a
 * newer reply moves that deadline; at once when the session expires or the
 * client closes; when our node is deleted by anyone; and on release.
 *
 * `held` compares against that deadline synchronously: code resuming after
 * a long pause (seed 000's 25 s GC pause, a SIGSTOP) reads false before any
 * timer has had a chance to run. The signal aborts with LockLostError, from
 * one timer per client (one heartbeat per process, not a loop per lock).
 */
import { performance } from 'node:perf_hooks';
import { ConnectionLossError, InvalidArgumentError, LockLostError } from './errors.js';
import type { ClientState, ZooKeeperClient } from './zookeeper/client.js';

export type LossReason = LockLostError['reason'];

export class Holding {
  readonly #controller = new AbortController();
  readonly #zk: ZooKeeperClient;
  readonly #name: string;
  readonly #path: string;
  readonly #marginMs: number;

  constructor(zk: ZooKeeperClient, name: string, path: string, marginMs: number) {
    this.#zk = zk;
    this.#name = name;
    this.#path = path;
    this.#marginMs = marginMs;
    SessionGuard.of(zk).add(this);
    // The own-node watch is a request of its own: sent eagerly, it leaves in
    // a socket write of its own (create2 + getChildren have gone, release's
    // delete comes later) and costs a reply and a notification on top. A
    // holder that releases within this turn of the event loop never needs
    // it, so it goes out on the next one. Nothing is missed meanwhile: if the
    // node is deleted first, exists() answers null and the holding ends.
    setImmediate(() => {
      if (!this.#controller.signal.aborted) this.#watchNode();
    });
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** The step-down instant on the performance.now() clock. */
  get deadline(): number {
    return this.#zk.sessionDeadline - this.#marginMs;
  }

  get held(): boolean {
    if (this.#controller.signal.aborted) return false;
    const state = this.#zk.state;
    if (state === 'expired' || state === 'closed') {
      this.lose(state === 'expired' ? 'session_expired' : 'closed');
      return false;
    }
    if (performance.now() >= this.deadline) {
      this.lose('deadline');
      return false;
    }
    return true;
  }

  lose(reason: LossReason): void {
    if (this.#controller.signal.aborted) return;
    SessionGuard.of(this.#zk).remove(this);
    const why =
      reason === 'deadline'
        ? `no reply from ZooKeeper in time: the session may expire at any moment (stepped down ${this.#marginMs} ms before the earliest expiry)`
        : reason === 'session_expired'
          ? 'the ZooKeeper session expired'
          : reason === 'node_deleted'
            ? 'its node was deleted'
            : reason === 'closed'
              ? 'the ZooKeeper client was closed'
              : 'released';
    this.#controller.abort(new LockLostError(this.#name, reason, `lock ${this.#name} lost: ${why}`));
  }

  /** Our own node vanishing (an operator's delete, a session expiry seen first by the server) ends the holding. */
  #watchNode(): void {
    const watch = (event: { type: string }): void => {
      if (event.type === 'deleted') this.lose('node_deleted');
      else if (!this.#controller.signal.aborted) this.#watchNode();
    };
    const check = (): void => {
      this.#zk.exists(this.#path, { watch }).then(
        (stat) => {
          if (stat === null) this.lose('node_deleted');
        },
        (error: unknown) => {
          if (error instanceof ConnectionLossError && !this.#controller.signal.aborted) check();
          // Session expiry and close reach us through the guard.
        },
      );
    };
    check();
  }
}

/** One timer and one state listener per client, for all of its holdings. */
class SessionGuard {
  static readonly #guards = new WeakMap<ZooKeeperClient, SessionGuard>();

  static of(zk: ZooKeeperClient): SessionGuard {
    let guard = SessionGuard.#guards.get(zk);
    if (guard === undefined) {
      guard = new SessionGuard(zk);
      SessionGuard.#guards.set(zk, guard);
    }
    return guard;
  }

  readonly #zk: ZooKeeperClient;
  readonly #holdings = new Set<Holding>();
  #timer: NodeJS.Timeout | null = null;
  #listening = false;

  private constructor(zk: ZooKeeperClient) {
    this.#zk = zk;
  }

  readonly #onState = (state: ClientState): void => {
    if (state === 'expired' || state === 'closed') {
      for (const h of [...this.#holdings]) h.lose(state === 'expired' ? 'session_expired' : 'closed');
    }
  };

  /** Closing the client ends its holdings at once, before the session has finished ending. */
  readonly #onClosing = (): void => {
    for (const h of [...this.#holdings]) h.lose('closed');
  };

  add(holding: Holding): void {
    this.#holdings.add(holding);
    if (!this.#listening) {
      this.#zk.on('state', this.#onState);
      this.#zk.on('closing', this.#onClosing);
      this.#listening = true;
    }
    this.#arm();
  }

  remove(holding: Holding): void {
    this.#holdings.delete(holding);
    if (this.#holdings.size === 0) {
      if (this.#timer) clearTimeout(this.#timer);
      this.#timer = null;
      if (this.#listening) {
        this.#zk.off('state', this.#onState);
        this.#zk.off('closing', this.#onClosing);
      }
      this.#listening = false;
    }
  }

  /** Wake at the earliest deadline; the deadline usually moved on by then (a newer reply), so re-arm. */
  #arm(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#holdings.size === 0) return;
    let earliest = Infinity;
    for (const h of this.#holdings) earliest = Math.min(earliest, h.deadline);
    this.#timer = setTimeout(this.#check, Math.max(0, earliest - performance.now()) + 1);
    this.#timer.unref();
  }

  readonly #check = (): void => {
    this.#timer = null;
    // `held` performs the comparison and aborts the ones past their deadline.
    for (const h of [...this.#holdings]) void h.held;
    this.#arm();
  };
}

/** The documented default: a quarter of the negotiated session timeout. */
export function safetyMargin(zk: ZooKeeperClient, requested: number | undefined): number {
  const timeout = zk.sessionTimeoutMs;
  if (requested === undefined) return Math.round(timeout / 4);
  // Pings go out after a third of the timeout of silence, so a margin at or
  // above two thirds would step down a healthy holder between two pings.
  if (!Number.isFinite(requested) || requested < 0 || requested >= (timeout * 2) / 3) {
    throw new InvalidArgumentError(`safetyMarginMs must be in [0, ${Math.floor((timeout * 2) / 3)}) for a ${timeout} ms session, got ${String(requested)}`);
  }
  return requested;
}
