/**
 * One lease per client: the session that every lock and leadership of a
 * process hangs on.
 *
 * etcd deletes the keys of a lease it has not heard a keepalive for within
 * the lease's TTL. A lease per lock would cost a grant and a keepalive
 * stream for every acquire; one lease per client costs one keepalive every
 * TTL / 3, however many locks are held, and losing it (expiry, revoke,
 * keepalives failing past the deadline) ends every grant on it at once.
 *
 * The keepalive stream is driven here, through etcd3's raw lease service,
 * because the step-down deadline needs what etcd3's Lease object does not
 * tell: when each acknowledged keepalive was *sent*. etcd heard us no
 * earlier than that, so the lease cannot expire before
 *
 *     (send time of the last keepalive whose response arrived) + TTL
 *
 * with the TTL the server granted (it may raise a short one to its minimum),
 * never the one asked for. Responses on one stream come back in the order
 * the requests went out, so each response is matched to the oldest
 * unanswered send.
 */
import { performance } from 'node:perf_hooks';
import { ClientClosedError, InvalidArgumentError, SessionExpiredError, type LossReason } from '../../index.js';
import { StepDownClock, publishSessionState } from '../../extend.js';
import { int64, type EtcdClient, type EtcdDuplexStream, type EtcdKeepAliveResponse } from './client.js';
import { checkClient } from './input.js';
import { isClosedClient } from './client-errors.js';
import { closeWatchStreamWhenIdle } from './watches.js';

/** The lease of an etcd client's session: its TTL in seconds. */
export interface EtcdSessionOptions {
  /** The lease's TTL to ask for, in whole seconds (etcd may grant more). Default 10. */
  readonly ttlSeconds?: number;
}

export const DEFAULT_TTL_SECONDS = 10;
const MAX_TTL_SECONDS = 86_400;
/** After a keepalive stream broke or could not be opened: try again this soon, not a whole interval later. */
const REOPEN_DELAY_MS = 100;

const sessions = new WeakMap<EtcdClient, EtcdSession>();

/**
 * The session of `etcd`: made by the first call (with `options`), the same
 * object for every later call until it is closed. Asking for another TTL
 * while it is open is refused: every lock of the client shares its lease.
 */
export function etcdSession(etcd: EtcdClient, options?: EtcdSessionOptions): EtcdSession {
  checkClient(etcd);
  const ttlSeconds = checkSessionOptions(options);
  const open = sessions.get(etcd);
  if (open !== undefined && !open.closed) {
    if (ttlSeconds !== undefined && ttlSeconds !== open.requestedTtlSeconds) {
      throw new InvalidArgumentError(`this etcd client's session already asks for a ${open.requestedTtlSeconds} s lease; close it before asking for ${ttlSeconds} s`);
    }
    return open;
  }
  const session = new EtcdSession(etcd, ttlSeconds ?? DEFAULT_TTL_SECONDS);
  sessions.set(etcd, session);
  return session;
}

function checkSessionOptions(options: EtcdSessionOptions | undefined): number | undefined {
  if (options === undefined) return undefined;
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('etcd session options must be an object');
  const { ttlSeconds } = options;
  if (ttlSeconds === undefined) return undefined;
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > MAX_TTL_SECONDS) {
    throw new InvalidArgumentError(`ttlSeconds must be a whole number of seconds in [1, ${MAX_TTL_SECONDS}], got ${String(ttlSeconds)}`);
  }
  return ttlSeconds;
}

/**
 * A client's lease, granted on first use and granted again after a loss
 * (the grants on the lost lease have ended; later acquires get the new one).
 */
export class EtcdSession {
  readonly requestedTtlSeconds: number;
  readonly #etcd: EtcdClient;
  #lease: Lease | null = null;
  #granting: Promise<Lease> | null = null;
  /** An ended lease a new grant replaces (its expired state is then closed on fencekeeper:session:state). */
  #replaced: Lease | null = null;
  #closed = false;

  /** @internal etcdSession makes sessions. */
  constructor(etcd: EtcdClient, ttlSeconds: number) {
    this.#etcd = etcd;
    this.requestedTtlSeconds = ttlSeconds;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** The current lease's id (null before the first grant and after a loss). */
  get leaseId(): bigint | null {
    return this.#lease?.id ?? null;
  }

  /** The TTL the server granted the current lease, in ms (null without one). */
  get ttlMs(): number | null {
    return this.#lease?.ttlMs ?? null;
  }

  /** The current lease's earliest possible expiry on the performance.now() clock (null without one). */
  get deadline(): number | null {
    return this.#lease?.deadline ?? null;
  }

  /** The live lease, if there is one now (null: `lease()` would have to grant one, or the session is closed). */
  get live(): Lease | null {
    return !this.#closed && this.#lease !== null && this.#lease.endedReason === null ? this.#lease : null;
  }

  /** The live lease, granting one if there is none. */
  lease(): Promise<Lease> {
    if (this.#closed) return Promise.reject(new ClientClosedError('the etcd session was closed'));
    if (this.#lease !== null && this.#lease.endedReason === null) return Promise.resolve(this.#lease);
    if (this.#granting === null) {
      const granting = Lease.grant(this.#etcd, this.requestedTtlSeconds, (ended) => {
        if (this.#lease === ended) this.#lease = null;
        const state = ended.endedReason === 'closed' ? 'closed' : 'expired';
        if (state === 'expired') this.#replaced = ended;
        publishSessionState('etcd', leaseName(ended), 'connected', state);
      }).then(
        (lease) => {
          this.#granting = null;
          if (this.#closed) {
            void lease.close();
            throw new ClientClosedError('the etcd session was closed');
          }
          // The lease this one replaces (it expired) is gone for good.
          if (this.#replaced !== null) publishSessionState('etcd', leaseName(this.#replaced), 'expired', 'closed');
          this.#replaced = null;
          this.#lease = lease;
          publishSessionState('etcd', leaseName(lease), null, 'connected');
          return lease;
        },
        (error: unknown) => {
          this.#granting = null;
          throw isClosedClient(error) ? new ClientClosedError('the etcd3 client was closed', { cause: error }) : error;
        },
      );
      this.#granting = granting;
    }
    return this.#granting;
  }

  /** Revoke the lease (deleting every key on it) and end its grants ('closed'). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (sessions.get(this.#etcd) === this) sessions.delete(this.#etcd);
    closeWatchStreamWhenIdle(this.#etcd);
    const lease = this.#lease ?? (await this.#granting?.catch(() => null)) ?? null;
    this.#lease = null;
    await lease?.close();
  }

  /** `await using session = etcdSession(etcd)`: revokes the lease (as close()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** How fencekeeper:session:state names a lease. */
function leaseName(lease: Lease): string {
  return `lease 0x${lease.id.toString(16)}`;
}

/** One granted lease: its keepalive stream, its step-down clock, and how it ended. */
export class Lease {
  readonly id: bigint;
  /** The id as etcd's requests carry it. */
  readonly idText: string;
  /** The id in hex, as our keys' names carry it. */
  readonly idHex: string;
  readonly clock: StepDownClock;
  #ttlMs: number;
  #ackedSentAt: number;
  readonly #etcd: EtcdClient;
  readonly #intervalMs: number;
  readonly #onEnd: (lease: Lease) => void;
  readonly #ended = new AbortController();
  #endedReason: LossReason | null = null;
  /** Told when the lease ends (cheaper than a listener on `signal`: every acquire and release adds one and removes it). */
  readonly #endListeners = new Set<(error: Error) => void>();
  #stream: EtcdDuplexStream<{ ID: string }, EtcdKeepAliveResponse> | null = null;
  #opening = false;
  /** Send times of the keepalives on the current stream not answered yet, oldest first. */
  #pending: number[] = [];
  #tick: NodeJS.Timeout | null = null;
  #expiry: NodeJS.Timeout | null = null;
  /** Keepalive responses that moved the deadline on (for tests and diagnostics). */
  acknowledged = 0;

  static async grant(etcd: EtcdClient, ttlSeconds: number, onEnd: (lease: Lease) => void): Promise<Lease> {
    const sentAt = performance.now();
    const granted = await etcd.leaseClient.leaseGrant({ TTL: ttlSeconds });
    if (typeof granted.error === 'string' && granted.error !== '') throw new SessionExpiredError(`etcd refused a lease: ${granted.error}`);
    const ttl = int64(granted.TTL, 'lease TTL');
    if (ttl <= 0n) throw new SessionExpiredError('etcd granted a lease without a TTL');
    return new Lease(etcd, int64(granted.ID, 'lease id'), Number(ttl) * 1000, sentAt, onEnd);
  }

  private constructor(etcd: EtcdClient, id: bigint, ttlMs: number, sentAt: number, onEnd: (lease: Lease) => void) {
    this.#etcd = etcd;
    this.id = id;
    this.idText = id.toString();
    this.idHex = id.toString(16);
    this.#ttlMs = ttlMs;
    this.#ackedSentAt = sentAt;
    this.#onEnd = onEnd;
    this.#intervalMs = Math.max(50, Math.floor(ttlMs / 3));
    this.clock = new StepDownClock({ name: 'etcd', grant: 'lease', ended: () => this.#endedReason });
    this.#tick = setInterval(() => this.#keepAlive(), this.#intervalMs);
    this.#tick.unref();
    this.#armExpiry();
  }

  /** The TTL the server granted, in ms. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /** The earliest instant (performance.now()) the lease may expire: last acknowledged send + TTL. */
  get deadline(): number {
    return this.#ackedSentAt + this.#ttlMs;
  }

  /** Null while the lease lives; else why it ended. */
  get endedReason(): LossReason | null {
    return this.#endedReason;
  }

  /** Aborts when the lease ends, its reason the error a waiter on it rejects with. */
  get signal(): AbortSignal {
    return this.#ended.signal;
  }

  /**
   * Call `listener` once when the lease ends, with the error `signal` aborts
   * with (at once if it has ended). Returns the function that stops it.
   */
  onEnd(listener: (error: Error) => void): () => void {
    if (this.#endedReason !== null) {
      listener(this.#ended.signal.reason as Error);
      return () => undefined;
    }
    this.#endListeners.add(listener);
    return () => void this.#endListeners.delete(listener);
  }

  /** Revoke the lease and end its grants with 'closed'. */
  async close(): Promise<void> {
    if (this.#endedReason !== null) return;
    this.#end('closed', new ClientClosedError('the etcd session was closed'));
    try {
      await this.#etcd.leaseClient.leaseRevoke({ ID: this.idText });
    } catch {
      // Unreachable or already gone: the lease expires on its own within its TTL, taking its keys.
    }
  }

  /** `await using`: revokes the lease (as close()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #keepAlive(): void {
    if (this.#endedReason !== null) return;
    const oldest = this.#pending[0];
    // A keepalive unanswered for a whole interval: the stream is stuck (a
    // member that lost its leader answers nothing); a new one may reach a
    // member that can forward to the new leader.
    if (oldest !== undefined && performance.now() - oldest >= this.#intervalMs) this.#dropStream();
    if (this.#stream === null) {
      this.#open();
      return;
    }
    this.#pending.push(performance.now());
    this.#stream.write({ ID: this.idText });
  }

  #open(): void {
    if (this.#opening) return;
    this.#opening = true;
    this.#etcd.leaseClient.leaseKeepAlive().then(
      (stream) => {
        this.#opening = false;
        if (this.#endedReason !== null) {
          stream.cancel();
          return;
        }
        this.#stream = stream;
        this.#pending = [];
        stream.on('data', (response) => {
          if (stream === this.#stream) this.#acknowledged(response);
        });
        const broken = (): void => {
          if (stream !== this.#stream) return;
          this.#dropStream();
          this.#retrySoon();
        };
        stream.on('error', broken);
        stream.on('end', broken);
        this.#keepAlive();
      },
      (error: unknown) => {
        this.#opening = false;
        if (isClosedClient(error)) {
          this.#end('closed', new ClientClosedError('the etcd3 client was closed'));
          return;
        }
        this.#retrySoon();
      },
    );
  }

  #retrySoon(): void {
    if (this.#endedReason !== null) return;
    setTimeout(() => this.#keepAlive(), REOPEN_DELAY_MS).unref();
  }

  #dropStream(): void {
    const stream = this.#stream;
    this.#stream = null;
    this.#pending = [];
    if (stream !== null) {
      try {
        stream.cancel();
      } catch {
        // already closed
      }
    }
  }

  #acknowledged(response: EtcdKeepAliveResponse): void {
    if (response.ID !== this.idText) return;
    const sentAt = this.#pending.shift();
    const ttl = int64(response.TTL, 'keepalive TTL');
    if (ttl <= 0n) {
      this.#end('session_expired', new SessionExpiredError(`the etcd lease ${this.#hex()} expired`));
      return;
    }
    this.#ttlMs = Number(ttl) * 1000;
    if (sentAt !== undefined && sentAt > this.#ackedSentAt) {
      this.#ackedSentAt = sentAt;
      this.acknowledged++;
      this.#armExpiry();
    }
  }

  /** At the deadline, with no acknowledgement since: the lease may be gone; treat it as gone. */
  #armExpiry(): void {
    if (this.#expiry !== null) clearTimeout(this.#expiry);
    this.#expiry = setTimeout(() => {
      this.#expiry = null;
      if (performance.now() < this.deadline) {
        this.#armExpiry();
        return;
      }
      const error = new SessionExpiredError(`no keepalive of the etcd lease ${this.#hex()} was acknowledged within its ${this.#ttlMs} ms TTL: it may have expired`);
      this.#end('session_expired', error);
      // If it still lives, its keys would block their locks for nobody: take them away.
      this.#etcd.leaseClient.leaseRevoke({ ID: this.idText }).catch(() => undefined);
    }, Math.max(0, this.deadline - performance.now()) + 1);
    this.#expiry.unref();
  }

  #end(reason: LossReason, error: Error): void {
    if (this.#endedReason !== null) return;
    this.#endedReason = reason;
    if (this.#tick !== null) clearInterval(this.#tick);
    if (this.#expiry !== null) clearTimeout(this.#expiry);
    this.#tick = null;
    this.#expiry = null;
    this.#dropStream();
    this.clock.end(reason, reason === 'closed' ? undefined : error.message);
    this.#ended.abort(error);
    const listeners = [...this.#endListeners];
    this.#endListeners.clear();
    for (const listener of listeners) listener(error);
    this.#onEnd(this);
  }

  #hex(): string {
    return `0x${this.id.toString(16)}`;
  }
}
