/**
 * Where the commands get their locks: the one place that turns flags and
 * environment into a connection, and that knows what a lock of that
 * service means to a command (its name rule, its step-down deadline, its
 * queue). The commands (run, elect, status, and the demo's holders) see
 * only the interfaces below.
 *
 * The service is named by a URL (./services/index.ts: lockServiceFrom), `--lock-service URL` or
 * $FENCEKEEPER_LOCK_SERVICE, whose scheme picks the source (one file per
 * source under ./services/); without one, the ZooKeeper ensemble of
 * --zookeeper or $ZOOKEEPER, as before the other sources existed.
 *
 * Locks come from a LockSource (the core's contract), so the commands work
 * the same with any source. Everything in src/cli goes through the public
 * API, ../index.js, except where a source's own name rule lives in its
 * recipes (the CLI ships inside the core package, so it may reuse it
 * instead of copying it).
 */
import type { FencingToken, Sequencer } from '../index.js';
import type { ParsedArgs } from './args.js';

export type Kind = 'lock' | 'election';

/** The lock service did not answer (or the session ended while we waited): exit 69. */
export class UnreachableError extends Error {
  override readonly name = 'UnreachableError';
}

/** A lock or a leadership, as the commands use it. */
export interface Holding {
  readonly token: FencingToken;
  /** The grant's sequencer (its lock, source and token), for the command's FENCEKEEPER_SEQUENCER. */
  readonly sequencer: Sequencer;
  /** Read synchronously against the step-down deadline. */
  readonly held: boolean;
  /** Aborts when the holding ends (lost, or released). */
  readonly signal: AbortSignal;
  /** The step-down instant on the performance.now() clock; each acknowledged renewal moves it. */
  deadline(): number;
  /** Release the lock (resign the leadership). Idempotent. */
  end(): Promise<void>;
}

export interface HoldOptions {
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
  /** From service.safetyMargin(): the step-down deadline is computed with it. */
  readonly safetyMarginMs: number;
  /** elect: the candidate's id. */
  readonly id?: string;
  /** run: shown by `status` as the holder's owner. */
  readonly owner?: string;
  /** run --lock-delay: the lock's lockDelayMs (only where the address has `lockDelay`). */
  readonly lockDelayMs?: number;
}

export interface QueueEntry {
  readonly role: 'holder' | 'waiter';
  /** 0n for a waiter of a source that takes the token only when it grants (PostgreSQL): `status` shows '-'. */
  readonly token: FencingToken;
  readonly owner: string;
  /** What holds the entry alive, as the source names it (ZooKeeper: the session, 0x-hex). */
  readonly session: string;
  /** Where the entry lives in the source (ZooKeeper: the queue node's path; Redis: the key). */
  readonly node: string;
}

/**
 * What LockService.watchQueue reports, in order. 'queue' comes first with the
 * queue as it is, then after every change the source was told about; the
 * connection events tell an operator why nothing is shown for a while.
 */
export type QueueEvent =
  | { readonly type: 'queue'; readonly entries: readonly QueueEntry[] }
  /** The connection dropped; the source is trying to get it back (changes made meanwhile are reported after). */
  | { readonly type: 'disconnected'; readonly detail: string }
  | { readonly type: 'reconnected'; readonly detail: string };

export interface LockService {
  /** The negotiated session timeout, for messages. */
  readonly sessionTimeoutMs: number;
  /**
   * The safety margin a holding of this session steps down with: `requested`
   * if it fits the negotiated session timeout, else a UsageError; the
   * default (a quarter of the timeout) when undefined.
   */
  safetyMargin(requested: number | undefined): number;
  hold(kind: Kind, name: string, options: HoldOptions): Promise<Holding>;
  /** A lock's queue in grant order: the holder first, then the waiters. */
  queue(name: string): Promise<QueueEntry[]>;
  /**
   * Follow a lock's queue (`status --watch`): onChange gets the queue now,
   * then again each time the source says it changed, until `signal` aborts
   * (the promise then resolves). Never by polling: the source must push
   * changes. Rejects with UnreachableError once this connection can no
   * longer watch (a session that expired): the caller connects again.
   *
   * Absent where the source cannot push changes. What a source needs to
   * offer it: ZooKeeper arms a children watch on the lock's parent with each
   * listing (an exists watch while the parent is missing), and setWatches
   * re-arms it after a reconnect. Redis would need a change feed: keyspace
   * notifications on the lock's keys (off by default; `expired` events are
   * the only sign of a TTL running out) or a channel its lock script
   * publishes to, subscribed before the first read, read again on every
   * message and after the subscriber reconnects. etcd: a Watch on the lock's
   * key prefix from the revision of the read that listed it (+1), so no
   * change between the read and the watch is missed; a compacted revision
   * means reading again.
   */
  watchQueue?(name: string, onChange: (event: QueueEvent) => void, signal: AbortSignal): Promise<void>;
  /**
   * What the service says about how durable a grant is, as settings by
   * name (PostgreSQL: synchronous_commit and synchronous_standby_names, which
   * decide whether a failover can lose an acknowledged grant). Absent where
   * the source reports nothing of the kind.
   */
  durability?(name: string): Promise<Readonly<Record<string, string>>>;
  close(): Promise<void>;
}

export interface LockServiceAddress {
  /** Where, for messages: 'ZooKeeper at 127.0.0.1:2181'. */
  readonly description: string;
  /** Throws a UsageError for a name the service cannot hold; no I/O. */
  checkName(kind: Kind, name: string): void;
  /** True where a lock takes lockDelayMs (`run --lock-delay`): ZooKeeper's locks. */
  readonly lockDelay?: boolean;
  /**
   * UsageError for settings the service refuses, UnreachableError when it
   * does not answer. Once `signal` aborts (an operator's SIGINT or SIGTERM),
   * the attempt is given up at once: its connections are closed and it
   * rejects.
   */
  connect(signal?: AbortSignal): Promise<LockService>;
}

/** What a source's URL parser (./services/) is given beside the URL. */
export interface LockServiceContext {
  /** Where the URL came from, for messages: '--lock-service' or 'FENCEKEEPER_LOCK_SERVICE'. */
  readonly origin: string;
  /**
   * True when the URL was given on the command line, where `ps` shows it to
   * every user of the machine: a URL that carries a password must be refused
   * then (it is accepted from the environment only).
   */
  readonly fromCommandLine: boolean;
  readonly values: ParsedArgs['values'];
  readonly env: NodeJS.ProcessEnv;
}

export interface LockServiceKind {
  /** Shown in usage errors. */
  readonly example: string;
  /**
   * `rest`: the URL after 'scheme://' (hosts, credentials, path, query), which
   * each service parses itself. UsageError for a URL (or flags) this service
   * cannot use; no I/O.
   */
  address(rest: string, context: LockServiceContext): LockServiceAddress;
}
