/**
 * Where the commands get their locks: the one place that turns flags and
 * environment into a connection, and that knows what a lock of that
 * service means to a command (its name rule, its step-down deadline, its
 * queue). Today the service is a ZooKeeper ensemble, from --zookeeper or
 * $ZOOKEEPER and --session-timeout; the commands (run, elect, status, and
 * the demo's holders) see only the interfaces below.
 *
 * Locks come from a LockSource (the core's contract), so the commands work
 * the same with any source; what the contract does not carry yet is here, in
 * the ZooKeeper part: the name rule checked before connecting, and the
 * step-down deadline a supervised command's lease is lent until. The CLI
 * ships inside the core package, so it may use the recipes' own name rule
 * instead of copying it; everything else in src/cli goes through the public
 * API, ../index.js.
 */
import {
  ConnectionLossError,
  InvalidArgumentError,
  SessionExpiredError,
  ZooKeeperClient,
  safetyMargin,
  zookeeperSource,
  type FencingToken,
} from '../index.js';
import { ELECTIONS_ROOT } from '../zookeeper/recipes/election.js';
import { LOCKS_ROOT } from '../zookeeper/recipes/lock.js';
import { queueParent } from '../zookeeper/recipes/queue-order.js';
import { UsageError, positiveInt, type ParsedArgs } from './args.js';

/** The flags every command that talks to the lock service accepts (node:util parseArgs form). */
export const LOCK_SERVICE_OPTIONS = {
  zookeeper: { type: 'string' },
  'session-timeout': { type: 'string' },
} as const;

export type Kind = 'lock' | 'election';

/** The lock service did not answer (or the session ended while we waited): exit 69. */
export class UnreachableError extends Error {
  override readonly name = 'UnreachableError';
}

/** A lock or a leadership, as the commands use it. */
export interface Holding {
  readonly token: FencingToken;
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
}

export interface QueueEntry {
  readonly role: 'holder' | 'waiter';
  readonly token: FencingToken;
  readonly owner: string;
  /** The ZooKeeper session that owns the entry, 0x-hex. */
  readonly session: string;
  readonly node: string;
}

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
  close(): Promise<void>;
}

export interface LockServiceAddress {
  /** Where, for messages: 'ZooKeeper at 127.0.0.1:2181'. */
  readonly description: string;
  /** Throws a UsageError for a name the service cannot hold; no I/O. */
  checkName(kind: Kind, name: string): void;
  /** UsageError for settings the service refuses, UnreachableError when it does not answer. */
  connect(): Promise<LockService>;
}

/** The lock service the flags (or the environment) name. Checks what it can without connecting. */
export function lockServiceFrom(values: ParsedArgs['values'], env: NodeJS.ProcessEnv = process.env): LockServiceAddress {
  const connectString = (values.zookeeper as string | undefined) ?? env.ZOOKEEPER;
  if (connectString === undefined || connectString === '') {
    throw new UsageError('no ZooKeeper to talk to: pass --zookeeper host:port[,host:port][/chroot] or set ZOOKEEPER');
  }
  const sessionTimeoutMs = positiveInt(values['session-timeout'] as string | undefined, '--session-timeout');
  return {
    description: `ZooKeeper at ${connectString}`,
    checkName(kind, name) {
      try {
        queueParent(kind === 'lock' ? LOCKS_ROOT : ELECTIONS_ROOT, name);
      } catch (error) {
        if (error instanceof InvalidArgumentError) {
          throw new UsageError(`bad ${kind} name ${JSON.stringify(name)} (${error.message}): a name is a relative path of non-empty segments, without '.' or '..', like "jobs/reindex"`);
        }
        throw error;
      }
    },
    async connect() {
      let zk: ZooKeeperClient;
      try {
        zk = await ZooKeeperClient.connect({ connectString, ...(sessionTimeoutMs !== undefined && { sessionTimeoutMs }) });
      } catch (error) {
        // connect() checks its options before it opens a socket.
        if (error instanceof InvalidArgumentError) throw new UsageError(`--zookeeper ${JSON.stringify(connectString)}: ${error.message}`);
        throw new UnreachableError(`cannot reach ZooKeeper at ${connectString}: ${(error as Error).message}`);
      }
      return zookeeperService(zk);
    },
  };
}

function zookeeperService(zk: ZooKeeperClient): LockService {
  const source = zookeeperSource(zk);
  return {
    get sessionTimeoutMs() {
      return zk.sessionTimeoutMs;
    },
    safetyMargin(requested) {
      try {
        return safetyMargin(zk.sessionTimeoutMs, requested);
      } catch (error) {
        if (error instanceof InvalidArgumentError) throw new UsageError(`--safety-margin ${String(requested)}: ${error.message}`);
        throw error;
      }
    },
    async hold(kind, name, options) {
      const common = {
        safetyMarginMs: options.safetyMarginMs,
        ...(options.signal !== undefined && { signal: options.signal }),
      };
      try {
        const holding =
          kind === 'lock'
            ? await source.acquireLock(name, {
                ...common,
                ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
                ...(options.owner !== undefined && { owner: options.owner }),
              })
            : await source.campaign(name, { ...common, ...(options.id !== undefined && { id: options.id }) });
        return {
          token: 'token' in holding ? holding.token : holding.epoch,
          get held() {
            return holding.held;
          },
          signal: holding.signal,
          // The recipes' step-down deadline: the earliest possible session
          // expiry (send time of the last acknowledged request + timeout)
          // minus the margin.
          deadline: () => zk.sessionDeadline - options.safetyMarginMs,
          end: () => ('release' in holding ? holding.release() : holding.resign()),
        };
      } catch (error) {
        throw unreachable(error);
      }
    },
    async queue(name) {
      try {
        const { holder, waiters } = await source.lockStatus(name);
        const entry = (role: QueueEntry['role'], e: (typeof waiters)[number]): QueueEntry => ({
          role,
          token: e.token,
          owner: e.owner,
          session: `0x${e.sessionId.toString(16)}`,
          node: e.path,
        });
        return [...(holder ? [entry('holder', holder)] : []), ...waiters.map((w) => entry('waiter', w))];
      } catch (error) {
        throw unreachable(error);
      }
    },
    close: () => zk.close(),
  };
}

/** A session lost while we waited is the service becoming unreachable, not a bug. */
function unreachable(error: unknown): unknown {
  if (error instanceof ConnectionLossError || error instanceof SessionExpiredError) {
    return new UnreachableError(`ZooKeeper: ${error.message}`);
  }
  return error;
}
