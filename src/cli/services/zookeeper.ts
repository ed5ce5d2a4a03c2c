/**
 * ZooKeeper as the CLI's lock service: zookeeper:// URLs, or the connect
 * string of --zookeeper / $ZOOKEEPER, with --session-timeout.
 */
import {
  ConnectionLossError,
  InvalidArgumentError,
  SessionExpiredError,
  ZooKeeperClient,
  ZooKeeperError,
  safetyMargin,
  zookeeperSource,
  type ClientState,
  type QueueEntry as ZooKeeperQueueEntry,
} from '../../index.js';
import { ELECTIONS_ROOT } from '../../zookeeper/recipes/election.js';
import { LOCKS_ROOT } from '../../zookeeper/recipes/lock.js';
import { readEntry } from '../../zookeeper/recipes/queue.js';
import { queueParent, sortQueue } from '../../zookeeper/recipes/queue-order.js';
import { UsageError, positiveInt, type ParsedArgs } from '../args.js';
import {
  UnreachableError,
  type LockService,
  type LockServiceAddress,
  type LockServiceKind,
  type QueueEntry,
  type QueueEvent,
} from '../lock-service.js';

/** The ensemble of --zookeeper / $ZOOKEEPER (what the commands use when no --lock-service is given). */
export function zookeeperAddress(values: ParsedArgs['values'], env: NodeJS.ProcessEnv): LockServiceAddress {
  const connectString = (values.zookeeper as string | undefined) ?? env.ZOOKEEPER;
  if (connectString === undefined || connectString === '') {
    throw new UsageError('no lock service to talk to: pass --lock-service URL (or set FENCEKEEPER_LOCK_SERVICE), or --zookeeper host:port[,host:port][/chroot] (or set ZOOKEEPER)');
  }
  return ensembleAddress(connectString, values, '--zookeeper');
}

/** zookeeper://h1:2181,h2:2181/chroot: the connect string, as --zookeeper takes it. */
export const ZOOKEEPER_SERVICE: LockServiceKind = {
  example: 'zookeeper://127.0.0.1:2181[,host:port...][/chroot]',
  address(rest, context) {
    if (/[@?#]/.test(rest)) {
      throw new UsageError(`${context.origin}: a zookeeper:// URL carries hosts and an optional chroot only (no credentials, query or fragment)`);
    }
    const connectString = rest.endsWith('/') ? rest.slice(0, -1) : rest;
    if (connectString === '' || connectString.startsWith('/')) throw new UsageError(`${context.origin}: zookeeper:// needs at least one host:port`);
    return ensembleAddress(connectString, context.values, context.origin);
  },
};

/** `origin`: where the connect string came from, for messages. */
function ensembleAddress(connectString: string, values: ParsedArgs['values'], origin: string): LockServiceAddress {
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
        if (error instanceof InvalidArgumentError) throw new UsageError(`${origin} ${JSON.stringify(connectString)}: ${error.message}`);
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
          deadline: () => holding.deadline,
          end: () => ('release' in holding ? holding.release() : holding.resign()),
        };
      } catch (error) {
        throw unreachable(error);
      }
    },
    async queue(name) {
      try {
        const { holder, waiters } = await source.lockStatus(name);
        return entries(holder === null ? waiters : [holder, ...waiters]);
      } catch (error) {
        throw unreachable(error);
      }
    },
    watchQueue: (name, onChange, signal) => watchQueue(zk, name, onChange, signal),
    close: () => zk.close(),
  };
}

/** The recipes' entries, in grant order, as the commands show them. */
function entries(queue: readonly ZooKeeperQueueEntry[]): QueueEntry[] {
  return queue.map((e, i) => ({
    role: i === 0 ? 'holder' : 'waiter',
    token: e.token,
    owner: e.owner,
    session: `0x${e.sessionId.toString(16)}`,
    node: e.path,
  }));
}

/**
 * The lock's queue, read again each time a watch says it changed: a children
 * watch on the lock's parent (an exists watch while the parent is missing:
 * it is a container, removed once its last node is gone, and created again
 * by the next acquire). One listing costs a getChildren and a getData per
 * node; nothing is read while the queue does not change. After a lost
 * connection the client re-arms the watch with setWatches, which fires it if
 * the queue changed meanwhile, so nothing is missed and nothing is re-read
 * for nothing; a read that was in flight is sent again.
 */
async function watchQueue(zk: ZooKeeperClient, name: string, onChange: (event: QueueEvent) => void, signal: AbortSignal): Promise<void> {
  const parent = queueParent(LOCKS_ROOT, name);
  let changed = true;
  let wake: (() => void) | null = null;
  let ended: 'expired' | 'closed' | null = null;
  const poke = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  const watch = (): void => {
    changed = true;
    poke();
  };
  const onState = (state: ClientState): void => {
    if (state === 'suspended') {
      onChange({ type: 'disconnected', detail: `lost the connection to ZooKeeper; reconnecting (the session lasts ${zk.sessionTimeoutMs} ms without one)` });
    } else if (state === 'connected') {
      onChange({ type: 'reconnected', detail: `connected to ZooKeeper again, session 0x${zk.sessionId.toString(16)} kept` });
    } else if (state === 'expired' || state === 'closed') {
      ended = state;
      poke();
    }
  };
  zk.on('state', onState);
  signal.addEventListener('abort', poke);
  try {
    let shown: string | undefined;
    for (;;) {
      if (signal.aborted) return;
      if (ended !== null) throw new UnreachableError(`ZooKeeper: session 0x${zk.sessionId.toString(16)} ${ended === 'expired' ? 'expired' : 'closed'}`);
      if (!changed) {
        await new Promise<void>((resolve) => (wake = resolve));
        continue;
      }
      changed = false;
      let queue: QueueEntry[];
      try {
        queue = entries(await readQueue(zk, parent, watch));
      } catch (error) {
        if (signal.aborted) return;
        // In flight when the connection dropped: send it again (it waits for the reconnect).
        if (error instanceof ConnectionLossError) {
          changed = true;
          continue;
        }
        throw unreachable(error);
      }
      // A watch that fired for a node that came and went before the listing shows nothing new.
      const key = JSON.stringify(queue, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
      if (key === shown) continue;
      shown = key;
      onChange({ type: 'queue', entries: queue });
    }
  } finally {
    zk.off('state', onState);
    signal.removeEventListener('abort', poke);
  }
}

/** List the queue, leaving a watch that fires on its next change. */
async function readQueue(zk: ZooKeeperClient, parent: string, watch: () => void): Promise<ZooKeeperQueueEntry[]> {
  for (;;) {
    let children: string[];
    try {
      children = await zk.getChildren(parent, { watch });
    } catch (error) {
      if (!(error instanceof ZooKeeperError && error.code === 'ZK_NONODE')) throw error;
      if ((await zk.exists(parent, { watch })) === null) return [];
      continue; // created between the two reads: list it
    }
    const read = await Promise.all(sortQueue(children).map((child) => readEntry(zk, `${parent}/${child}`)));
    // null: the node left between the listing and its read (the watch has fired for it)
    return read.filter((e): e is ZooKeeperQueueEntry => e !== null);
  }
}

/** A session lost while we waited is the service becoming unreachable, not a bug. */
function unreachable(error: unknown): unknown {
  if (error instanceof ConnectionLossError || error instanceof SessionExpiredError) {
    return new UnreachableError(`ZooKeeper: ${error.message}`);
  }
  return error;
}
