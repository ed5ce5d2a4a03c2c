/**
 * Join a name's queue and wait for our turn: the acquire path shared by the
 * lock, the read-write lock, the semaphore and the election, as the core's
 * fair-queue join (joinQueue of fencekeeper/extend) with PostgreSQL's steps.
 *
 * One statement enters the queue (fencekeeper_lock_enter, migration 010;
 * _enter_kind, migration 013): under the name's row lock it reaps entries of
 * expired sessions, hands a free name to the first live waiter, and then
 * grants us at once (an empty queue), answers busy (a try), or queues us. A
 * waiter then waits for its grant without polling: the releaser NOTIFYs the
 * one waiter it granted, on that waiter's session channel. Only the head
 * waiter keeps a timer, for its holder's lease end (the enter's and every
 * heartbeat's answer say how long that is, on the database's clock), and
 * looks then (fencekeeper_lock_claim): a holder that crashed is replaced
 * when its lease ends, and nobody queries while nothing changes.
 *
 * Every way out but a grant deletes our entry before the caller hears of it
 * (the core's abandon step; an entry whose enter reply was lost too: it is
 * found by its request key).
 */
import { randomBytes } from 'node:crypto';
import { LockLostError, PermitsMismatchError, SessionExpiredError, type SequencerKind } from '../../index.js';
import { DEFAULT_OWNER, joinQueue, safetyMargin, type QueueJoinSteps, type QueueStopper, type WaitGroup } from '../../extend.js';
import { bigintOf, queryRow, type PgSourcePool } from './client.js';
import { checkName, checkWaitOptions } from './input.js';
import type { Counters, PgSession, Waiter } from './session.js';

/** What a join needs of its source. */
export interface JoinSource {
  readonly pool: PgSourcePool;
  readonly leaseMs: number;
  readonly counters: Counters;
  /** The source's waits: their timeouts share one timer, and close() stops them all. */
  readonly waits: WaitGroup;
  /** The live session, opening one if there is none. */
  session(): Promise<PgSession>;
  /** The live session as it is, or null (none yet, ended, the source closed): session() then. */
  live(): PgSession | null;
  /** The error a join rejects with once the source is closed (null while it is open). */
  closedError(): Error | null;
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

/** Our entry as the enter statement answered: granted at once (`token`), or queued (`head`, `holderMs`). */
interface Entered {
  readonly session: PgSession;
  readonly entry: string;
  /** The request key the entry was made with: a leave whose enter reply was lost finds the entry by it. */
  readonly key: string;
  readonly granted: boolean;
  readonly head: boolean;
  /** The holder's lease left, on the database's clock, when we entered at the head. */
  readonly holderMs: number;
}

const ENTER = `SELECT status, entry_id::text AS entry_id, token::text AS token, head, holder_ms::text AS holder_ms, reaped FROM fencekeeper_lock_enter($1, $2, $3, $4, $5, $6)`;
const ENTER_KIND = `SELECT status, entry_id::text AS entry_id, token::text AS token, slot, head, holder_ms::text AS holder_ms, reaped, permits_in_use FROM fencekeeper_lock_enter_kind($1, $2, $3, $4, $5, $6, $7, $8)`;
const SLOT = `SELECT fencekeeper_lock_slot($1, $2) AS slot`;
const CLAIM = `SELECT status, token::text AS token, head, holder_ms::text AS holder_ms, reaped FROM fencekeeper_lock_claim($1, $2)`;
/** A claim that failed (the database unreachable): look again this soon. */
const CLAIM_RETRY_MS = 200;
/** The longest delay setTimeout keeps. */
const MAX_TIMER_MS = 0x7fffffff;

/**
 * A request key for one enter: unique among the keys of the session it is
 * sent with (fencekeeper_lock_leave looks an entry up by session and key),
 * which a counter is, behind a prefix drawn once per process so keys of
 * different processes differ in the table. No random bytes per acquire.
 */
const KEY_PREFIX = randomBytes(9).toString('base64url');
let keys = 0;
function requestKey(): string {
  return `${KEY_PREFIX}${(keys++).toString(36)}`;
}

/** The grant's kind as its sequencer names it: what the self-wait warning keys a name by. */
function grantKind(target: JoinTarget): SequencerKind {
  return target.kind === 'rw' ? target.mode : target.kind;
}

type Steps<T extends { readonly held: boolean }> = QueueJoinSteps<Entered, Entered, number, T>;

/**
 * One join's steps, and what they share: the session and request key of the
 * enter sent last (abandon's leave when its reply is lost), and the grant's
 * token and slot (at the enter, or when the wait ends).
 */
class PgJoin<T extends { readonly held: boolean }> implements Steps<T> {
  readonly kind: SequencerKind;
  readonly name: string;
  readonly mode: 'wait' | 'try';
  /** The grants hang on the source (the self-wait warning is per source and name). */
  readonly client: JoinSource;
  readonly waits: WaitGroup;
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  readonly #request: JoinRequest<T>;
  readonly #owner: string;
  readonly #marginMs: number;
  /** The session and request key of the last enter sent; `#pending` while its reply has not arrived. */
  #session: PgSession | null = null;
  #key = '';
  #pending = false;
  #token = 0n;
  #slot: number | null = null;
  /** A permit's slot lookup (made only for a permit's join). */
  readonly #slotClaim: Steps<T>['claim'];

  constructor(source: JoinSource, request: JoinRequest<T>, owner: string, marginMs: number, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.kind = grantKind(request.target);
    this.name = request.name;
    this.mode = request.mode;
    this.client = source;
    this.waits = source.waits;
    this.signal = signal;
    this.timeoutMs = timeoutMs;
    this.#request = request;
    this.#owner = owner;
    this.#marginMs = marginMs;
    this.#slotClaim = request.target.kind === 'permit' ? (entered) => this.#lookUpSlot(entered) : undefined;
  }

  /**
   * A permit granted without its slot (by a claim, or reported by a
   * heartbeat: a NOTIFY carries the slot) looks it up at its turn; every
   * other grant needs nothing beyond heading the queue, and skips the
   * claim step (and the stopper it would make).
   */
  get claim(): Steps<T>['claim'] {
    return this.#slot === null ? this.#slotClaim : undefined;
  }

  /**
   * The session (the live one as it is: an await on every acquire would cost
   * a turn of the event loop), then the enter statement; one retry when our
   * session turns out to have expired (the next is a new one).
   */
  enter(stopper: QueueStopper | null): Promise<Entered | null> {
    const live = this.client.live();
    return live !== null ? this.#enterOn(live, stopper, 0) : this.#enterOnNew(stopper, 0);
  }

  #enterOnNew(stopper: QueueStopper | null, attempt: number): Promise<Entered | null> {
    const opening = this.client.session();
    return (stopper === null ? opening : stopper.race(opening)).then((session) => this.#enterOn(session, stopper, attempt));
  }

  #enterOn(session: PgSession, stopper: QueueStopper | null, attempt: number): Promise<Entered | null> {
    const source = this.client;
    const { target, name, mode } = this.#request;
    const key = requestKey();
    this.#session = session;
    this.#key = key;
    this.#pending = true;
    const entering =
      target.kind === 'lock' || target.kind === 'election'
        ? queryRow(source.pool, 'fencekeeper_lock_enter_v1', ENTER, [session.idText, target.kind, name, this.#owner, mode === 'wait', key])
        : queryRow(source.pool, 'fencekeeper_lock_enter_kind_v1', ENTER_KIND, [
            session.idText,
            target.kind,
            name,
            this.#owner,
            mode === 'wait',
            key,
            target.kind === 'rw' ? target.mode : null,
            target.kind === 'permit' ? target.permits : null,
          ]);
    return entering.then((row) => {
      this.#pending = false;
      const reaped = row['reaped'];
      if (reaped !== 0 && reaped !== null && reaped !== undefined) source.counters.note('reap', session.id, Number(reaped));
      const status = row['status'];
      if (status === 'granted') {
        this.#token = bigintOf(row['token']) as bigint;
        const slot = row['slot'];
        this.#slot = slot === null || slot === undefined ? null : Number(slot);
        return { session, entry: row['entry_id'] as string, key, granted: true, head: false, holderMs: 0 };
      }
      if (status === 'waiting') return { session, entry: row['entry_id'] as string, key, granted: false, head: row['head'] === true, holderMs: Number(row['holder_ms']) };
      if (status === 'busy') return null;
      if (status === 'mismatch' && target.kind === 'permit') throw new PermitsMismatchError(name, target.permits, Number(row['permits_in_use']));
      if (status !== 'expired') throw new Error(`unreachable: fencekeeper_lock_enter answered ${String(status)}`);
      session.expiredSeen();
      // A stopped join does not open a new session only to leave it.
      if (attempt === 0 && stopper?.isStopped !== true) return this.#enterOnNew(stopper, 1);
      throw new SessionExpiredError(`lock ${name}: the PostgreSQL session expired before the queue could be joined`);
    });
  }

  /** Granted at the enter: our turn; queued: wait (the entry says whether we head the queue, and the holder's lease left). */
  place(entered: Entered): 'turn' | Entered {
    return entered.granted ? 'turn' : entered;
  }

  /**
   * Wait for our entry's grant: a NOTIFY (or a heartbeat's report of it),
   * or our own claim at the holder's lease end while we are the head.
   * Resolves 'turn' (the token, and a permit's slot if the news carried it,
   * kept for build) or 'gone'; rejects when the session ends or the stopper
   * stops. Our entry is deleted by abandon on every way out but a grant.
   */
  waitForTurn(entered: Entered, _wait: Entered, stopper: QueueStopper): Promise<'turn' | 'gone'> {
    const source = this.client;
    const { session, entry } = entered;
    return new Promise<'turn' | 'gone'>((resolve, reject) => {
      let timer: NodeJS.Timeout | null = null;
      let settled = false;
      let unstop: () => void = () => undefined;
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
            // The claim's reaps happened whoever told us of the grant first:
            // its own NOTIFY, on the source's other connection, may have.
            source.counters.note('reap', session.id, Number(row['reaped'] ?? 0));
            if (settled) return;
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
        const t = setTimeout(claim, Math.min(Math.max(0, ms) + 1, MAX_TIMER_MS));
        t.unref();
        return t;
      };
      const waiter: Waiter = {
        granted: (token, slot) => {
          if (!finish()) return;
          this.#token = token;
          this.#slot = slot;
          resolve('turn');
        },
        head(ms) {
          if (settled) return;
          if (timer !== null) clearTimeout(timer);
          timer = arm(ms);
        },
        gone() {
          if (finish()) resolve('gone');
        },
        ended(error) {
          fail(error);
        },
      };
      unstop = stopper.onStop(fail);
      if (settled) return;
      session.register(entry, waiter);
      if (entered.head && !settled) waiter.head(entered.holderMs);
    });
  }

  /** What close() would have stopped, for a join that had no stopper: the source's closed error. */
  ended(): unknown {
    return this.client.closedError();
  }

  lost(entered: Entered): Error {
    return new LockLostError(this.name, 'node_deleted', `lock ${this.name}: our queue entry ${entered.entry} was deleted while waiting (its session had expired)`);
  }

  /** One look at our entry for its slot (a permit granted by a claim or reported by a heartbeat). */
  async #lookUpSlot(entered: Entered): Promise<number> {
    if (this.#slot !== null) return this.#slot;
    const row = await queryRow(this.client.pool, 'fencekeeper_lock_slot_v1', SLOT, [entered.session.idText, entered.entry]);
    return (this.#slot = Number(row['slot']));
  }

  build(entered: Entered | null, claimed: number | null): T {
    const { session, entry, key } = entered as Entered;
    return this.#request.build({ session, entry, request: key, token: this.#token, slot: claimed ?? this.#slot, marginMs: this.#marginMs, owner: this.#owner });
  }

  /**
   * Delete our entry once the enter has settled: the one it answered, or,
   * when its reply never came (the statement failed, the connection broke),
   * whatever it may have put, found by the request key. A busy or mismatched
   * enter put nothing.
   */
  abandon(joining: Promise<Entered | null>): Promise<void> {
    return joining.then(
      (entered) => (entered === null ? undefined : entered.session.leave(entered.entry, entered.key)),
      () => (this.#pending && this.#session !== null ? this.#session.leave(null, this.#key) : undefined),
    );
  }
}

/** Check every argument (a bad one rejects, and nothing is sent), then join and wait (null only in 'try' mode). */
export async function joinAndWait<T extends { readonly held: boolean }>(source: JoinSource, request: JoinRequest<T>): Promise<T | null> {
  const { name, mode } = request;
  checkName(name);
  const options = checkWaitOptions(request.options, mode === 'wait', request.ownerField);
  const marginMs = safetyMargin(source.leaseMs, options.safetyMarginMs);
  options.signal?.throwIfAborted();
  return joinQueue(new PgJoin(source, request, options.owner ?? DEFAULT_OWNER, marginMs, options.signal, options.timeoutMs));
}
