/**
 * A fair distributed lock whose every grant carries a fencing token.
 *
 *   const lock = await acquireLock(zk, 'jobs/reindex');
 *   await withFence(db, 'jobs/reindex', lock.token, work);   // the resource checks the token
 *   await lock.release();
 *
 * The lock tells a holder when to stop (lock.signal, lock.held); the token
 * lets the resource refuse a holder that did not stop in time. Queue and
 * token semantics: ./queue.ts. Holding and step-down: ./holding.ts.
 */
import { hostname } from 'node:os';
import {
  ClientClosedError,
  InvalidArgumentError,
  LockLostError,
  LockTimeoutError,
  SessionExpiredError,
  ZooKeeperError,
} from './errors.js';
import { Holding, safetyMargin } from './holding.js';
import { QueueObserver } from './observer.js';
import { LOCKS_ROOT, enqueue, leaveQueue, position, queueParent, sortQueue, waitForTurn, withoutStrays, type QueueNode } from './queue.js';
import type { FencingToken } from './token.js';
import type { ClientState, ZooKeeperClient } from './zookeeper/client.js';
import { joinPath } from './zookeeper/paths.js';

/** Computed once: os.hostname() is a system call, and acquire is a hot path. */
const DEFAULT_OWNER = `${hostname()}:${process.pid}`;

export interface AcquireOptions {
  /** Give up waiting when this aborts (rejects with its reason; our queue node is removed first). */
  readonly signal?: AbortSignal;
  /** Give up waiting after this long (LockTimeoutError; our queue node is removed first). */
  readonly timeoutMs?: number;
  /**
   * How long before the earliest possible session expiry the holder steps
   * down. Default: a quarter of the negotiated session timeout.
   */
  readonly safetyMarginMs?: number;
  /** Stored as the queue node's data, shown by `fencekeeper status`. Default: hostname:pid. */
  readonly owner?: string;
}

export interface Lock {
  readonly name: string;
  /** The czxid of our queue node: larger for every later grant of any lock. */
  readonly token: FencingToken;
  /** Our queue node's path. */
  readonly path: string;
  /** Aborts with LockLostError when the lock can no longer be assumed held. */
  readonly signal: AbortSignal;
  /** Checked synchronously against the step-down deadline on the monotonic clock. */
  readonly held: boolean;
  /** Delete our node and abort the signal. Idempotent. */
  release(): Promise<void>;
}

class HeldLock implements Lock {
  readonly name: string;
  readonly token: FencingToken;
  readonly path: string;
  readonly #zk: ZooKeeperClient;
  readonly #node: QueueNode;
  readonly #holding: Holding;
  #releasing: Promise<void> | null = null;

  constructor(zk: ZooKeeperClient, name: string, node: QueueNode, marginMs: number) {
    this.#zk = zk;
    this.#node = node;
    this.name = name;
    this.token = node.token;
    this.path = node.path;
    this.#holding = new Holding(zk, name, node.path, marginMs);
  }

  get signal(): AbortSignal {
    return this.#holding.signal;
  }

  get held(): boolean {
    return this.#holding.held;
  }

  release(): Promise<void> {
    if (this.#releasing === null) {
      this.#holding.lose('released');
      this.#releasing = leaveQueue(this.#zk, this.#node);
    }
    return this.#releasing;
  }

  toJSON(): { name: string; token: string; path: string; held: boolean } {
    return { name: this.name, token: this.token.toString(), path: this.path, held: this.held };
  }
}

/** Wait for the lock (fair: in the order of arrival) and return it. */
export async function acquireLock(zk: ZooKeeperClient, name: string, options: AcquireOptions = {}): Promise<Lock> {
  const lock = await joinAndWait(zk, LOCKS_ROOT, name, options, false, (node, margin) => new HeldLock(zk, name, node, margin));
  return lock as Lock;
}

/** Take the lock if nobody holds it or waits for it; null otherwise (leaving nothing behind). */
export function tryAcquireLock(zk: ZooKeeperClient, name: string, options: Omit<AcquireOptions, 'timeoutMs'> = {}): Promise<Lock | null> {
  return joinAndWait(zk, LOCKS_ROOT, name, options, true, (node, margin) => new HeldLock(zk, name, node, margin));
}

/**
 * Shared by locks and elections: join the queue, wait for our turn, and
 * build the holder. Any way out other than success removes our node first.
 */
export async function joinAndWait<T>(
  zk: ZooKeeperClient,
  root: string,
  name: string,
  options: AcquireOptions,
  tryOnly: boolean,
  build: (node: QueueNode, marginMs: number) => T,
): Promise<T | null> {
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options must be an object');
  const parent = queueParent(root, name);
  const { signal, timeoutMs } = options;
  if (timeoutMs !== undefined && (!Number.isFinite(timeoutMs) || timeoutMs < 0)) {
    throw new InvalidArgumentError(`timeoutMs must be a non-negative number, got ${String(timeoutMs)}`);
  }
  const marginMs = safetyMargin(zk, options.safetyMarginMs);
  if (options.owner !== undefined && typeof options.owner !== 'string') throw new InvalidArgumentError('owner must be a string');
  signal?.throwIfAborted();
  if (zk.state === 'expired') throw new SessionExpiredError();
  if (zk.state === 'closed') throw new ClientClosedError();

  const stopper = new Stopper(zk, name, signal, timeoutMs);
  const data = Buffer.from(options.owner ?? DEFAULT_OWNER, 'utf8');
  const joining = enqueue(zk, root, parent, data);
  let node: QueueNode | null = null;
  let handedOver = false;
  try {
    const joined = await Promise.race([joining, stopper.stopped]);
    node = joined.node;
    let outcome: 'turn' | 'gone' | 'busy';
    if (tryOnly) {
      const where = position(withoutStrays(zk, node, joined.children), node.child);
      outcome = where === null ? 'gone' : where.turn ? 'turn' : 'busy';
    } else {
      outcome = await waitForTurn(zk, parent, node, joined.children, stopper.stopped);
    }
    if (outcome === 'busy') return null;
    if (outcome === 'gone') {
      stopper.check();
      throw new LockLostError(name, 'node_deleted', `lock ${name}: our queue node ${node.path} was deleted while waiting`);
    }
    stopper.check();
    const holder = build(node, marginMs);
    handedOver = true;
    return holder;
  } finally {
    stopper.dispose();
    if (!handedOver) {
      // Every way out but a grant removes our node before the caller hears
      // of it. If the stop won the race against the create, wait for the
      // create to settle and remove what it made.
      const cleanup = (async () => {
        const leftover = node ?? (await joining.then((j) => j.node, () => null));
        if (leftover !== null) await leaveQueue(zk, leftover);
      })().catch(() => undefined);
      // ...while connected, that is a round trip or two. Disconnected, the
      // create and the delete wait for the reconnect (or for the session's
      // expiry, which removes the node as well): a caller's timeout or abort
      // must not wait that long, so the removal finishes in the background.
      await whileConnected(zk, cleanup);
    }
  }
}

/** Wait for `work` while the client stays connected; return early if it is (or goes) offline. */
async function whileConnected(zk: ZooKeeperClient, work: Promise<void>): Promise<void> {
  if (zk.state !== 'connected') return;
  let onState!: (state: ClientState) => void;
  const offline = new Promise<void>((resolve) => {
    onState = (state) => {
      if (state !== 'connected') resolve();
    };
    zk.on('state', onState);
  });
  try {
    await Promise.race([work, offline]);
  } finally {
    zk.off('state', onState);
  }
}

/** Everything that ends a wait early, as one promise that rejects. */
class Stopper {
  readonly stopped: Promise<never>;
  #reason: unknown = null;
  #reject!: (reason: unknown) => void;
  readonly #zk: ZooKeeperClient;
  readonly #signal: AbortSignal | undefined;
  readonly #timer: NodeJS.Timeout | null;

  constructor(zk: ZooKeeperClient, name: string, signal: AbortSignal | undefined, timeoutMs: number | undefined) {
    this.#zk = zk;
    this.#signal = signal;
    this.stopped = new Promise<never>((_, reject) => {
      this.#reject = reject;
    });
    this.stopped.catch(() => undefined);
    signal?.addEventListener('abort', this.#onAbort, { once: true });
    zk.on('state', this.#onState);
    this.#timer =
      timeoutMs === undefined
        ? null
        : setTimeout(() => this.#stop(new LockTimeoutError(name, timeoutMs)), timeoutMs);
  }

  readonly #onAbort = (): void => this.#stop(this.#signal?.reason);

  readonly #onState = (state: ClientState): void => {
    if (state === 'expired') this.#stop(new SessionExpiredError());
    else if (state === 'closed') this.#stop(new ClientClosedError());
  };

  #stop(reason: unknown): void {
    if (this.#reason !== null) return;
    this.#reason = reason ?? new Error('stopped');
    this.#reject(this.#reason);
  }

  /** Throw if a stop arrived (the wait may have finished in the same tick). */
  check(): void {
    if (this.#reason !== null) throw this.#reason;
  }

  dispose(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#zk.off('state', this.#onState);
  }
}

export interface QueueEntryInfo {
  readonly path: string;
  readonly token: FencingToken;
  readonly owner: string;
  readonly sessionId: bigint;
}

/**
 * The lock's queue in grant order: the first entry holds, the rest wait.
 * For operators (`fencekeeper status`); costs one read per entry.
 */
export async function lockStatus(zk: ZooKeeperClient, name: string): Promise<{ name: string; holder: QueueEntryInfo | null; waiters: QueueEntryInfo[] }> {
  const parent = queueParent(LOCKS_ROOT, name);
  let children: string[];
  try {
    children = await zk.getChildren(parent);
  } catch (error) {
    if (error instanceof ZooKeeperError && error.code === 'ZK_NONODE') return { name, holder: null, waiters: [] };
    throw error;
  }
  const reads = sortQueue(children).map(async (child) => {
    const path = joinPath(parent, child);
    try {
      const { data, stat } = await zk.getData(path);
      return { path, token: stat.czxid, owner: Buffer.from(data).toString('utf8'), sessionId: stat.ephemeralOwner };
    } catch (error) {
      if (error instanceof ZooKeeperError && error.code === 'ZK_NONODE') return null; // left meanwhile
      throw error;
    }
  });
  const entries = (await Promise.all(reads)).filter((e): e is QueueEntryInfo => e !== null);
  return { name, holder: entries[0] ?? null, waiters: entries.slice(1) };
}

export interface LockHolder {
  readonly token: FencingToken;
  readonly path: string;
  readonly owner: string;
  readonly sessionId: bigint;
}

/**
 * Who holds `name`, from a cache kept fresh by a watch: a resource uses it
 * to admit only the current holder's token (verifyWithZooKeeper).
 */
export class LockObserver {
  readonly #queue: QueueObserver;
  constructor(zk: ZooKeeperClient, name: string) {
    this.#queue = new QueueObserver(zk, queueParent(LOCKS_ROOT, name));
  }
  holder(): Promise<LockHolder | null> {
    return this.#queue.head();
  }
  onChange(listener: () => void): () => void {
    return this.#queue.onChange(listener);
  }
  close(): void {
    this.#queue.close();
  }
}

export function observeLock(zk: ZooKeeperClient, name: string): LockObserver {
  return new LockObserver(zk, name);
}
