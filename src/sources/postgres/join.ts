/**
 * Join a name's queue and wait for our turn: the acquire path shared by the
 * lock and the election.
 *
 * One statement enters the queue (fencekeeper_lock_enter, migration 010):
 * under the name's row lock it reaps entries of expired sessions, hands a
 * free name to the first live waiter, and then grants us at once (an empty
 * queue), answers busy (a try), or queues us. A waiter then waits for its
 * grant without polling: the releaser NOTIFYs the one waiter it granted, on
 * that waiter's session channel. Only the head waiter keeps a timer, for its
 * holder's lease end (the enter's and every heartbeat's answer say how long
 * that is, on the database's clock), and looks then (fencekeeper_lock_claim):
 * a holder that crashed is replaced when its lease ends, and nobody queries
 * while nothing changes.
 *
 * Every way out but a grant deletes our entry before the caller hears of it
 * (an entry whose enter reply was lost too: it is found by its request key).
 */
import { randomBytes } from 'node:crypto';
import { LockLostError, LockTimeoutError, PermitsMismatchError, SessionExpiredError } from '../../index.js';
import { DEFAULT_OWNER, noteGrant, safetyMargin, warnIfSelfWait, type SelfWaitGrant } from '../../extend.js';
import type { SequencerKind } from '../../index.js';
import { bigintOf, queryRow, type PgSourcePool } from './client.js';
import { checkName, checkWaitOptions } from './input.js';
import type { Counters, PgSession, Waiter } from './session.js';

/** What a join needs of its source. */
export interface JoinSource {
  readonly pool: PgSourcePool;
  readonly leaseMs: number;
  readonly counters: Counters;
  /** The live session, opening one if there is none. */
  session(): Promise<PgSession>;
}

/**
 * Which queue of a name: the plain lock's, the election's, the read-write
 * lock's (readers and writers in one queue, told apart by `mode`), or the
 * semaphore's (migration 013).
 */
export type QueueKind = 'lock' | 'election' | 'rw' | 'permit';

/** Where an entry joins: its queue, and for the kinds of migration 013 its mode or the semaphore's size. */
export type JoinTarget =
  | { readonly kind: 'lock' | 'election' }
  | { readonly kind: 'rw'; readonly mode: 'read' | 'write' }
  | { readonly kind: 'permit'; readonly permits: number };

/** What a granted join hands its builder: our entry, its token and (a permit) its slot. */
export interface Joined {
  readonly session: PgSession;
  readonly entry: string;
  readonly request: string;
  readonly token: bigint;
  /** A permit's slot; null for every other kind. */
  readonly slot: number | null;
  readonly marginMs: number;
  readonly owner: string;
}

export interface JoinRequest<T> {
  readonly target: JoinTarget;
  readonly name: string;
  /** 'wait' for our turn, or 'try': take it only if nobody holds or waits (else null). */
  readonly mode: 'wait' | 'try';
  readonly options: unknown;
  /** 'owner' for a lock, 'id' for a campaign. */
  readonly ownerField: 'owner' | 'id';
  readonly build: (joined: Joined) => T;
}

/** The grant's kind as its sequencer names it: what the self-wait warning keys a name by. */
function grantKind(target: JoinTarget): SequencerKind {
  return target.kind === 'rw' ? target.mode : target.kind;
}

/** Hand the grant out, noted against its source (a later wait of the same source on the name warns FENCEKEEPER_SELF_WAIT). */
function handOver<T>(source: JoinSource, request: JoinRequest<T>, joined: Joined): T {
  const grant = request.build(joined);
  noteGrant(source, grantKind(request.target), request.name, grant as unknown as SelfWaitGrant);
  return grant;
}

const ENTER = `SELECT status, entry_id::text AS entry_id, token::text AS token, head, holder_ms::text AS holder_ms, reaped FROM fencekeeper_lock_enter($1, $2, $3, $4, $5, $6)`;
const ENTER_KIND = `SELECT status, entry_id::text AS entry_id, token::text AS token, slot, head, holder_ms::text AS holder_ms, reaped, permits_in_use FROM fencekeeper_lock_enter_kind($1, $2, $3, $4, $5, $6, $7, $8)`;
const SLOT = `SELECT fencekeeper_lock_slot($1, $2) AS slot`;
const CLAIM = `SELECT status, token::text AS token, head, holder_ms::text AS holder_ms, reaped FROM fencekeeper_lock_claim($1, $2)`;
/** A claim that failed (the database unreachable): look again this soon. */
const CLAIM_RETRY_MS = 200;

/** Check every argument (a bad one rejects, and nothing is sent), then join and wait. */
export async function joinAndWait<T>(source: JoinSource, request: JoinRequest<T>): Promise<T | null> {
  const { name, mode } = request;
  checkName(name);
  const options = checkWaitOptions(request.options, mode === 'wait', request.ownerField);
  const marginMs = safetyMargin(source.leaseMs, options.safetyMarginMs);
  options.signal?.throwIfAborted();
  return join(source, request, options.owner ?? DEFAULT_OWNER, marginMs, new Stopper(name, options.signal, options.timeoutMs));
}

async function join<T>(source: JoinSource, request: JoinRequest<T>, owner: string, marginMs: number, stopper: Stopper): Promise<T | null> {
  const { target, name, mode } = request;
  try {
    // One retry when our session turns out to have expired: the next is a new one.
    for (let attempt = 0; ; attempt++) {
      const session = await stopper.race(source.session());
      const key = randomBytes(12).toString('base64url');
      const entering =
        target.kind === 'lock' || target.kind === 'election'
          ? queryRow(source.pool, 'fencekeeper_lock_enter_v1', ENTER, [session.idText, target.kind, name, owner, mode === 'wait', key])
          : queryRow(source.pool, 'fencekeeper_lock_enter_kind_v1', ENTER_KIND, [
              session.idText,
              target.kind,
              name,
              owner,
              mode === 'wait',
              key,
              target.kind === 'rw' ? target.mode : null,
              target.kind === 'permit' ? target.permits : null,
            ]);
      let row: Record<string, unknown>;
      try {
        row = await stopper.race(entering);
      } catch (error) {
        // Stopped, or the statement failed (its outcome unknown if the connection broke): delete whatever it put.
        await entering.then(
          (entered) => (entered['entry_id'] === null ? undefined : session.leave(String(entered['entry_id']), key)),
          () => session.leave(null, key),
        );
        throw error;
      }
      source.counters.note('reap', session.id, Number(row['reaped'] ?? 0));
      const status = row['status'];
      if (status === 'expired') {
        session.expiredSeen();
        if (attempt === 0) continue;
        throw new SessionExpiredError(`lock ${name}: the PostgreSQL session expired before the queue could be joined`);
      }
      if (status === 'busy') return null;
      if (status === 'mismatch' && target.kind === 'permit') throw new PermitsMismatchError(name, target.permits, Number(row['permits_in_use']));
      const entry = String(row['entry_id']);
      if (status === 'granted') {
        const token = bigintOf(row['token']) as bigint;
        if (stopper.isStopped) {
          await session.leave(entry, key);
          stopper.check();
        }
        const slot = row['slot'] === null || row['slot'] === undefined ? null : Number(row['slot']);
        return handOver(source, request, { session, entry, request: key, token, slot, marginMs, owner });
      }
      // Queued: a source that holds this name itself now waits for itself (two tasks sharing it, or a bug).
      warnIfSelfWait(source, grantKind(target), name);
      const granted = await waitForGrant(source, session, name, entry, key, row['head'] === true, Number(row['holder_ms']), stopper);
      let slot = granted.slot;
      if (target.kind === 'permit' && slot === null) {
        // Granted by a claim or reported by a heartbeat (a NOTIFY carries the slot): one look at our entry.
        try {
          slot = Number((await queryRow(source.pool, 'fencekeeper_lock_slot_v1', SLOT, [session.idText, entry]))['slot']);
        } catch (error) {
          await session.leave(entry, key);
          throw error;
        }
      }
      return handOver(source, request, { session, entry, request: key, token: granted.token, slot, marginMs, owner });
    }
  } finally {
    stopper.dispose();
  }
}

/**
 * Wait for our entry's grant: a NOTIFY (or a heartbeat's report of it), or
 * our own claim at the holder's lease end while we are the head. On any
 * other way out, our entry is deleted (and, had it just been granted, the
 * name handed on) before the rejection.
 */
async function waitForGrant(source: JoinSource, session: PgSession, name: string, entry: string, key: string, head: boolean, holderMs: number, stopper: Stopper): Promise<{ token: bigint; slot: number | null }> {
  let timer: NodeJS.Timeout | null = null;
  let settled = false;
  let unstop: () => void = () => undefined;
  const waiting = new Promise<{ token: bigint; slot: number | null }>((resolve, reject) => {
    const finish = (): boolean => {
      if (settled) return false;
      settled = true;
      if (timer !== null) clearTimeout(timer);
      timer = null;
      session.unregister(entry);
      unstop();
      return true;
    };
    const fail = (error: unknown): void => {
      if (finish()) reject(error);
    };
    const claim = (): void => {
      timer = null;
      if (settled) return;
      source.counters.note('claim', session.id);
      queryRow(source.pool, 'fencekeeper_lock_claim_v1', CLAIM, [session.idText, entry]).then(
        (row) => {
          if (settled) return;
          source.counters.note('reap', session.id, Number(row['reaped'] ?? 0));
          if (row['status'] === 'granted') waiter.granted(bigintOf(row['token']) as bigint, null);
          else if (row['status'] === 'gone') waiter.gone();
          else if (row['head'] === true) waiter.head(Number(row['holder_ms']));
        },
        () => {
          if (!settled && timer === null) timer = arm(CLAIM_RETRY_MS);
        },
      );
    };
    const arm = (ms: number): NodeJS.Timeout => {
      // The answer left the database after it measured `ms`: counted from now, the timer fires no earlier than the lease's end there.
      const t = setTimeout(claim, Math.min(Math.max(0, ms) + 1, 0x7fffffff));
      t.unref();
      return t;
    };
    const waiter: Waiter = {
      granted(token, slot) {
        if (finish()) resolve({ token, slot });
      },
      head(ms) {
        if (settled) return;
        if (timer !== null) clearTimeout(timer);
        timer = arm(ms);
      },
      gone() {
        fail(new LockLostError(name, 'node_deleted', `lock ${name}: our queue entry ${entry} was deleted while waiting (its session had expired)`));
      },
      ended(error) {
        fail(error);
      },
    };
    unstop = stopper.onStop(fail);
    session.register(entry, waiter);
    if (head && !settled) waiter.head(holderMs);
  });
  try {
    const granted = await waiting;
    stopper.check();
    return granted;
  } catch (error) {
    await session.leave(entry, key);
    throw error;
  }
}

/** The longest delay setTimeout keeps. */
const MAX_TIMER_MS = 0x7fffffff;

/** Everything that ends a wait early (the caller's signal, its timeout), as the rejection of whatever is raced against it. */
class Stopper {
  #reason: unknown = null;
  readonly #listeners = new Set<(reason: unknown) => void>();
  readonly #signal: AbortSignal | undefined;
  #timer: NodeJS.Timeout | null = null;

  constructor(name: string, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#signal = signal;
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    if (timeoutMs !== undefined) {
      const at = performance.now() + timeoutMs;
      const tick = (): void => {
        const left = at - performance.now();
        if (left <= 0) this.stop(new LockTimeoutError(name, timeoutMs));
        else this.#timer = setTimeout(tick, Math.min(Math.ceil(left), MAX_TIMER_MS));
      };
      this.#timer = setTimeout(tick, Math.min(timeoutMs, MAX_TIMER_MS));
    }
  }

  readonly #onAbort = (): void => this.stop(this.#signal?.reason);

  /** `work`'s outcome, or the stop's reason if the wait is stopped first (`work` is left to settle on its own). */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.#reason !== null) {
      work.catch(() => undefined);
      return Promise.reject(this.#reason);
    }
    return new Promise<T>((resolve, reject) => {
      const off = this.onStop(reject);
      work.then(
        (value) => {
          off();
          resolve(value);
        },
        (error: unknown) => {
          off();
          reject(error);
        },
      );
    });
  }

  /** Call `listener` with the reason when stopped (at once if stopped already). Returns the function that stops it. */
  onStop(listener: (reason: unknown) => void): () => void {
    if (this.#reason !== null) {
      listener(this.#reason);
      return () => undefined;
    }
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }

  stop(reason: unknown): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('stopped');
    for (const listener of [...this.#listeners]) listener(this.#reason);
    this.#listeners.clear();
  }

  get isStopped(): boolean {
    return this.#reason !== null;
  }

  check(): void {
    if (this.#reason !== null) throw this.#reason;
  }

  dispose(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }
}
