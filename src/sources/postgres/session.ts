/**
 * One session per postgresSource: the row every grant of the process hangs
 * on, its lease kept on the database's clock, and the one connection of the
 * source's own that carries the heartbeat and LISTEN.
 *
 * The lease lives in the database (fencekeeper_lock_sessions.expires_at,
 * clock_timestamp() + lease at each renewal); other clients take our locks
 * once it has passed there. The heartbeat renews it every third of the lease
 * with one statement that never revives an expired session. The holder's own
 * step-down (../../step-down.ts) counts from the *send* time of the last
 * renewal the database acknowledged: the database stamped expires_at no
 * earlier than that, so it cannot pass before
 *
 *     (send time of the last acknowledged renewal) + lease
 *
 * The heartbeat runs on a connection the source keeps checked out of the
 * pool, so a pool busy with the application's queries cannot delay it; the
 * same connection LISTENs on the session's channel, where a releaser NOTIFYs
 * the one waiter it granted. The heartbeat also reports on the entries this
 * session still waits with (granted meanwhile; at the head, and how long the
 * holder has left), so a notification lost with a connection is recovered at
 * the next beat, and a waiter learns it has become the head without a query
 * of its own.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { ClientClosedError, ListenUnavailableError, SessionExpiredError, type LossReason, type SourceIdentity } from '../../index.js';
import { StepDownClock, publishSessionState, publishSourceActivity } from '../../extend.js';
import { bigintOf, queryRow, type PgNotification, type PgSourceClient, type PgSourcePool } from './client.js';

/** What the session tells a waiting entry (the acquire that registered it). */
export interface Waiter {
  /** The entry was granted, with this token (and, for a permit, its slot when the news carried it; null otherwise). */
  granted(token: bigint, slot: number | null): void;
  /** The entry waits at the head of its queue; its holder's lease ends in `holderMs` (database clock; 0: no live holder). */
  head(holderMs: number): void;
  /** The entry no longer exists (reaped with an expired session). */
  gone(): void;
  /** The session ended: stop waiting with this error. */
  ended(error: Error): void;
}

/** A grant heard before its acquire followed the entry. */
interface Granted {
  readonly token: bigint;
  readonly slot: number | null;
}

/** What a source counts, for tests and operators: cumulative since the source was made. */
export interface PostgresSourceStats {
  /** Renewals the database acknowledged. */
  readonly renewals: number;
  /** NOTIFYs received on the session's channel (one per grant handed to a waiter of this source). */
  readonly wakeups: number;
  /** Head waiters' looks at their holder's lease end. */
  readonly claims: number;
  /** Entries of expired sessions this source deleted. */
  readonly reaps: number;
  /** Sessions opened. */
  readonly sessions: number;
}

export class Counters {
  renewals = 0;
  wakeups = 0;
  claims = 0;
  reaps = 0;
  sessions = 0;

  /** Count `n` of `activity` by `session`, and publish it on fencekeeper:source:activity (when subscribed). */
  note(activity: 'renewal' | 'wakeup' | 'claim' | 'reap', session: bigint, n = 1): void {
    if (n <= 0) return;
    if (activity === 'renewal') this.renewals += n;
    else if (activity === 'wakeup') this.wakeups += n;
    else if (activity === 'claim') this.claims += n;
    else this.reaps += n;
    publishSourceActivity('postgres', sessionName(session), activity, n);
  }

  snapshot(): PostgresSourceStats {
    return { renewals: this.renewals, wakeups: this.wakeups, claims: this.claims, reaps: this.reaps, sessions: this.sessions };
  }
}

const OPEN = `SELECT session_id::text AS session_id, system_identifier, database_oid FROM fencekeeper_lock_session_open($1, $2, $3)`;
const HEARTBEAT = `SELECT renewed, ids, tokens, heads, holder_ms FROM fencekeeper_lock_heartbeat($1, $2::bigint[])`;
const CLOSE = `SELECT fencekeeper_lock_session_close($1) AS names`;
const LEAVE = `SELECT fencekeeper_lock_leave($1, $2, $3)::text AS granted`;
const SWEEP = `SELECT fencekeeper_lock_sweep($1) AS reaped`;
/** The sweep's period, in leases. */
const SWEEP_EVERY_LEASES = 5;
/** Names with expired entries handed on per sweep: bounded, so one sweep stays short. */
const SWEEP_LIMIT = 100;
/** After the source's connection broke: connect again this soon, not a whole beat later. */
const RECONNECT_DELAY_MS = 100;

/** How long the LISTEN probe waits for its own NOTIFY: a round trip, with room for a loaded machine. */
const PROBE_MS = 2000;

/**
 * NOTIFY our channel through the pool (another connection, as a releaser's
 * would be) and wait for it on ours: a path that does not deliver
 * notifications (PgBouncer in transaction pooling mode) would leave every
 * waiter asleep until its timeout, so the source refuses to start instead.
 */
async function probeListen(pool: PgSourcePool, client: PgSourceClient, channel: string, leaseMs: number): Promise<void> {
  const payload = `probe ${randomBytes(6).toString('hex')}`;
  let heard: () => void = () => undefined;
  const arrived = new Promise<void>((resolve) => (heard = resolve));
  const listener = (message: PgNotification): void => {
    if (message.channel === channel && message.payload === payload) heard();
  };
  client.on('notification', listener);
  let timer: NodeJS.Timeout | undefined;
  try {
    await pool.query({ text: 'SELECT pg_notify($1, $2)', values: [channel, payload] });
    const waitMs = Math.min(PROBE_MS, leaseMs);
    const outcome = await Promise.race([arrived.then(() => true), new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), waitMs)))]);
    if (!outcome) {
      throw new ListenUnavailableError(
        `the PostgreSQL source's connection did not deliver its own NOTIFY within ${waitMs} ms: LISTEN does not work on this path ` +
          '(PgBouncer in transaction or statement pooling mode?); connect the source\'s pool to PostgreSQL directly or through session pooling',
      );
    }
  } finally {
    clearTimeout(timer);
    client.removeListener('notification', listener);
  }
}

/** How fencekeeper:session:state (and :source:activity) names a session. */
export function sessionName(id: bigint): string {
  return `session ${id}`;
}

export class PgSession {
  readonly id: bigint;
  readonly idText: string;
  readonly leaseMs: number;
  readonly clock: StepDownClock;
  readonly identity: SourceIdentity;
  readonly #pool: PgSourcePool;
  readonly #channel: string;
  readonly #counters: Counters;
  #client: PgSourceClient | null;
  #connecting = false;
  #ackedSentAt: number;
  #beatSentAt: number | null = null;
  #endedReason: LossReason | null = null;
  #endError: Error | null = null;
  readonly #waiters = new Map<string, Waiter>();
  /**
   * Grants notified before their acquire registered (the NOTIFY can overtake
   * the enter's reply), or after it stopped following (a claim's reply came
   * first). Two generations, turned at every beat: nothing stays past two beats.
   */
  #early = new Map<string, Granted>();
  #earlier = new Map<string, Granted>();
  /** Leaves that failed (an unreachable database), by entry id or request key: retried at every beat until the session ends. */
  readonly #unleft = new Map<string, { readonly entry: string | null; readonly request: string }>();
  /** Further channels LISTENed on (observers), with who is told of a NOTIFY there. */
  readonly #channels = new Map<string, Set<() => void>>();
  #tick: NodeJS.Timeout | null = null;
  #expiry: NodeJS.Timeout | null = null;
  #sweep: NodeJS.Timeout | null = null;
  readonly #onEnd: (session: PgSession) => void;

  /**
   * Check a connection out of the pool, LISTEN on a channel of our own, and
   * insert the session row (its lease starting on the database's clock).
   */
  static async open(pool: PgSourcePool, leaseMs: number, owner: string, counters: Counters, onEnd: (session: PgSession) => void): Promise<PgSession> {
    const channel = `fencekeeper_${randomBytes(12).toString('hex')}`;
    const client = await pool.connect();
    const onError = (): void => undefined;
    client.on('error', onError);
    try {
      // LISTEN before the row exists: no grant can be NOTIFYd to the channel before we hear it.
      await client.query({ text: `LISTEN "${channel}"` });
      await probeListen(pool, client, channel, leaseMs);
      const sentAt = performance.now();
      const row = await queryRow(client, 'fencekeeper_lock_session_open_v1', OPEN, [channel, owner, leaseMs]);
      const id = bigintOf(row['session_id']);
      if (id === null) throw new Error('unreachable: no session id');
      const identity: SourceIdentity = Object.freeze({ kind: 'postgres', id: `${String(row['system_identifier'])}-${String(row['database_oid'])}` });
      client.removeListener('error', onError);
      counters.sessions++;
      return new PgSession(pool, client, channel, id, leaseMs, sentAt, identity, counters, onEnd);
    } catch (error) {
      client.removeListener('error', onError);
      client.release(true);
      throw error;
    }
  }

  private constructor(
    pool: PgSourcePool,
    client: PgSourceClient,
    channel: string,
    id: bigint,
    leaseMs: number,
    sentAt: number,
    identity: SourceIdentity,
    counters: Counters,
    onEnd: (session: PgSession) => void,
  ) {
    this.#pool = pool;
    this.#channel = channel;
    this.id = id;
    this.idText = id.toString();
    this.leaseMs = leaseMs;
    this.identity = identity;
    this.#counters = counters;
    this.#ackedSentAt = sentAt;
    this.#onEnd = onEnd;
    this.clock = new StepDownClock({ name: 'PostgreSQL', grant: 'session', kind: 'postgres', ended: () => this.#endedReason });
    this.#client = client;
    this.#attach(client);
    const intervalMs = Math.max(50, Math.floor(leaseMs / 3));
    this.#tick = setInterval(() => this.#beat(), intervalMs);
    this.#tick.unref();
    // The backstop for names nobody contends (their next user reaps them anyway): rare, so it never does a head waiter's job.
    this.#sweep = setInterval(() => this.#sweepExpired(), SWEEP_EVERY_LEASES * leaseMs);
    this.#sweep.unref();
    this.#armExpiry();
    publishSessionState('postgres', sessionName(id), null, 'connected');
  }

  /** The earliest instant (performance.now()) the database may expire the session: last acknowledged send + lease. */
  get deadline(): number {
    return this.#ackedSentAt + this.leaseMs;
  }

  /** `deadline` as the function every holding of the session reads: one per session, not a closure per grant. */
  readonly deadlineOf = (): number => this.#ackedSentAt + this.leaseMs;

  /** Null while the session lives; else why it ended. */
  get endedReason(): LossReason | null {
    return this.#endedReason;
  }

  /** The error a waiter on an ended session rejects with (null while it lives). */
  get endError(): Error | null {
    return this.#endError;
  }

  /** Follow an entry that waits: told when it is granted, at the head, gone, or the session ends. */
  register(entry: string, waiter: Waiter): void {
    const early = this.#early.get(entry) ?? this.#earlier.get(entry);
    if (early !== undefined) {
      this.unregister(entry);
      waiter.granted(early.token, early.slot);
      return;
    }
    if (this.#endError !== null) {
      waiter.ended(this.#endError);
      return;
    }
    this.#waiters.set(entry, waiter);
  }

  unregister(entry: string): void {
    this.#waiters.delete(entry);
    this.#early.delete(entry);
    this.#earlier.delete(entry);
  }

  /**
   * Delete our entry and hand its name on (a release, a waiter giving up).
   * A leave that cannot reach the database is retried at every beat while
   * the session lives (else the entry would block its lock until the
   * session ends); once the session has ended, the lease has taken it.
   */
  leave(entry: string | null, request: string): Promise<void> {
    if (entry !== null) this.unregister(entry);
    return queryRow(this.#pool, 'fencekeeper_lock_leave_v1', LEAVE, [this.idText, entry, request]).then(
      () => {
        if (this.#unleft.size > 0) this.#unleft.delete(request);
      },
      () => {
        if (this.#endedReason === null) this.#unleft.set(request, { entry, request });
      },
    );
  }

  /**
   * LISTEN on `channel` too (an observer's): `listener` is called on every
   * NOTIFY there, after the source's connection was made again (what was
   * sent meanwhile is lost), and when the session ends. Resolves, once
   * listening, to the function that stops it (answering whether that was
   * the channel's last listener, now UNLISTENed).
   */
  async listen(channel: string, listener: () => void): Promise<() => boolean> {
    if (this.#endError !== null) throw this.#endError;
    let listeners = this.#channels.get(channel);
    if (listeners === undefined) {
      listeners = new Set();
      this.#channels.set(channel, listeners);
      // No connection now: the reconnect LISTENs on every channel, then tells every listener.
      await this.#client?.query({ text: `LISTEN "${channel}"` });
    }
    listeners.add(listener);
    return () => {
      const set = this.#channels.get(channel);
      if (set === undefined || !set.delete(listener) || set.size > 0) return false;
      this.#channels.delete(channel);
      this.#client?.query({ text: `UNLISTEN "${channel}"` }).catch(() => undefined);
      return true;
    };
  }

  #tellChannels(): void {
    for (const listeners of [...this.#channels.values()]) for (const listener of [...listeners]) listener();
  }

  /** The database answered that this session has expired (an enter found it gone): end it now. */
  expiredSeen(): void {
    this.#end('session_expired', new SessionExpiredError(`the PostgreSQL session ${this.id} expired (its lease of ${this.leaseMs} ms passed on the database's clock)`));
  }

  /** End every grant ('closed'), then delete the session's entries (handing their names on) and its row. Idempotent. */
  async close(): Promise<void> {
    if (this.#endedReason !== null) return;
    this.#end('closed', new ClientClosedError('the PostgreSQL source was closed'));
    try {
      await queryRow(this.#pool, 'fencekeeper_lock_session_close_v1', CLOSE, [this.idText]);
    } catch {
      // Unreachable: the session expires on its own within its lease, and its entries with it.
    }
  }

  #attach(client: PgSourceClient): void {
    client.on('notification', this.#onNotification);
    // Kept on the client for good: pg emits 'error' on a broken connection, and nobody else listens on a checked-out client.
    client.on('error', () => {
      if (client !== this.#client) return;
      this.#dropClient();
      this.#reconnectSoon();
    });
  }

  readonly #onNotification = (message: PgNotification): void => {
    if (message.channel !== this.#channel) {
      const listeners = this.#channels.get(message.channel);
      if (listeners !== undefined) for (const listener of [...listeners]) listener();
      return;
    }
    // "<entry> <token>", and " <slot>" for a permit (migration 013).
    const parts = message.payload?.split(' ') ?? [];
    if (parts.length < 2) return;
    const entry = parts[0] as string;
    const token = BigInt(parts[1] as string);
    const slot = parts[2] === undefined ? null : Number(parts[2]);
    this.#counters.note('wakeup', this.id);
    const waiter = this.#waiters.get(entry);
    if (waiter === undefined) {
      this.#early.set(entry, { token, slot });
      return;
    }
    this.#waiters.delete(entry);
    waiter.granted(token, slot);
  };

  #dropClient(): void {
    const client = this.#client;
    if (client === null) return;
    this.#client = null;
    this.#beatSentAt = null;
    client.removeListener('notification', this.#onNotification);
    client.release(true);
    if (this.#endedReason === null) publishSessionState('postgres', sessionName(this.id), 'connected', 'disconnected');
  }

  #reconnectSoon(): void {
    if (this.#endedReason !== null) return;
    setTimeout(() => this.#beat(), RECONNECT_DELAY_MS).unref();
  }

  #connect(): void {
    if (this.#connecting || this.#endedReason !== null) return;
    this.#connecting = true;
    void (async () => {
      let client: PgSourceClient | null = null;
      const ignore = (): void => undefined;
      try {
        client = await this.#pool.connect();
        client.on('error', ignore);
        await client.query({ text: `LISTEN "${this.#channel}"` });
        for (const channel of this.#channels.keys()) await client.query({ text: `LISTEN "${channel}"` });
      } catch {
        if (client !== null) client.release(true);
        this.#connecting = false;
        this.#reconnectSoon();
        return;
      }
      this.#connecting = false;
      if (this.#endedReason !== null) {
        client.release(true);
        return;
      }
      this.#client = client;
      this.#attach(client);
      publishSessionState('postgres', sessionName(this.id), 'disconnected', 'connected');
      // Listening again: what was NOTIFYd meanwhile is read back by this beat, and by the observers.
      this.#beat();
      this.#tellChannels();
    })();
  }

  #beat(): void {
    if (this.#endedReason !== null) return;
    const client = this.#client;
    if (client === null) {
      this.#connect();
      return;
    }
    const now = performance.now();
    if (this.#beatSentAt !== null) {
      // A beat unanswered for a third of the lease: the connection is stuck (black-holed); a new one may get through.
      if (now - this.#beatSentAt >= this.leaseMs / 3) {
        this.#dropClient();
        this.#connect();
      }
      return;
    }
    this.#beatSentAt = now;
    this.#earlier = this.#early;
    this.#early = new Map();
    const waiting = [...this.#waiters.keys()];
    for (const { entry, request } of [...this.#unleft.values()]) void this.leave(entry, request);
    queryRow(client, 'fencekeeper_lock_heartbeat_v1', HEARTBEAT, [this.idText, waiting]).then(
      (row) => {
        if (client !== this.#client) return;
        this.#beatSentAt = null;
        this.#answered(now, waiting, row);
      },
      () => {
        if (client !== this.#client) return;
        this.#dropClient();
        this.#reconnectSoon();
      },
    );
  }

  #answered(sentAt: number, asked: readonly string[], row: Record<string, unknown>): void {
    if (this.#endedReason !== null) return;
    if (row['renewed'] !== true) {
      this.#end('session_expired', new SessionExpiredError(`the PostgreSQL session ${this.id} expired (its lease of ${this.leaseMs} ms passed on the database's clock)`));
      return;
    }
    if (sentAt > this.#ackedSentAt) {
      this.#ackedSentAt = sentAt;
      this.#counters.note('renewal', this.id);
      this.#armExpiry();
    }
    const ids = row['ids'] as string[];
    const tokens = row['tokens'] as (string | null)[];
    const heads = row['heads'] as boolean[];
    const holderMs = row['holder_ms'] as string[];
    const seen = new Set<string>();
    for (let i = 0; i < ids.length; i++) {
      const entry = ids[i] as string;
      seen.add(entry);
      const waiter = this.#waiters.get(entry);
      if (waiter === undefined) continue;
      const token = tokens[i];
      if (token !== null && token !== undefined) {
        this.#waiters.delete(entry);
        waiter.granted(BigInt(token), null);
      } else if (heads[i] === true) {
        waiter.head(Number(holderMs[i]));
      }
    }
    // An entry asked about and not found: reaped (or deleted by hand) while it waited.
    for (const entry of asked) {
      if (seen.has(entry)) continue;
      const waiter = this.#waiters.get(entry);
      if (waiter === undefined) continue;
      this.#waiters.delete(entry);
      waiter.gone();
    }
  }

  #sweepExpired(): void {
    if (this.#endedReason !== null) return;
    queryRow(this.#pool, 'fencekeeper_lock_sweep_v1', SWEEP, [SWEEP_LIMIT]).then(
      (row) => {
        this.#counters.note('reap', this.id, Number(row['reaped'] ?? 0));
      },
      () => undefined,
    );
  }

  /** At the deadline, with no acknowledgement since: the session may be gone; treat it as gone. */
  #armExpiry(): void {
    if (this.#expiry !== null) clearTimeout(this.#expiry);
    this.#expiry = setTimeout(() => {
      this.#expiry = null;
      if (performance.now() < this.deadline) {
        this.#armExpiry();
        return;
      }
      this.#end('session_expired', new SessionExpiredError(`no renewal of the PostgreSQL session ${this.id} was acknowledged within its ${this.leaseMs} ms lease: it may have expired`));
      // If it still lives, its entries would block their locks for nobody: take them away.
      queryRow(this.#pool, 'fencekeeper_lock_session_close_v1', CLOSE, [this.idText]).catch(() => undefined);
    }, Math.max(0, this.deadline - performance.now()) + 1);
    this.#expiry.unref();
  }

  #end(reason: LossReason, error: Error): void {
    if (this.#endedReason !== null) return;
    this.#endedReason = reason;
    this.#endError = error;
    for (const timer of [this.#tick, this.#sweep]) if (timer !== null) clearInterval(timer);
    if (this.#expiry !== null) clearTimeout(this.#expiry);
    this.#tick = null;
    this.#sweep = null;
    this.#expiry = null;
    const client = this.#client;
    this.#client = null;
    if (client !== null) {
      client.removeListener('notification', this.#onNotification);
      // Destroyed, not returned: a pooled connection must not keep our LISTEN.
      client.release(true);
    }
    this.clock.end(reason, reason === 'closed' ? undefined : error.message);
    const waiters = [...this.#waiters.values()];
    this.#waiters.clear();
    this.#early.clear();
    this.#earlier.clear();
    for (const waiter of waiters) waiter.ended(error);
    this.#tellChannels();
    this.#channels.clear();
    publishSessionState('postgres', sessionName(this.id), 'connected', reason === 'closed' ? 'closed' : 'expired');
    this.#onEnd(this);
  }
}
