/**
 * ZooKeeper as the CLI's lock service: zookeeper:// URLs, or the connect
 * string of --zookeeper / $ZOOKEEPER, with --session-timeout.
 */
import {
  ConnectionLossError,
  InvalidArgumentError,
  SessionExpiredError,
  ZooKeeperClient,
  safetyMargin,
  zookeeperSource,
} from '../../index.js';
import { ELECTIONS_ROOT } from '../../zookeeper/recipes/election.js';
import { LOCKS_ROOT } from '../../zookeeper/recipes/lock.js';
import { queueParent } from '../../zookeeper/recipes/queue-order.js';
import { UsageError, positiveInt, type ParsedArgs } from '../args.js';
import { UnreachableError, type LockService, type LockServiceAddress, type LockServiceKind, type QueueEntry } from '../lock-service.js';

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
