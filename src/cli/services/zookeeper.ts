/**
 * ZooKeeper as the CLI's lock service: zookeeper:// URLs, or the connect
 * string of --zookeeper / $ZOOKEEPER, with --session-timeout, TLS to the
 * servers' secure port (--zookeeper-tls-ca/-cert/-key/-servername, or
 * --zookeeper-tls for the system's CA roots; $ZOOKEEPER_TLS_* likewise), and
 * digest credentials.
 *
 * Credentials never come from the command line: every user of the machine
 * sees a process's arguments (`ps`, /proc/PID/cmdline). They come from
 * $ZOOKEEPER_AUTH ('user:password') or from a file named by
 * --zookeeper-auth-file / $ZOOKEEPER_AUTH_FILE, and no message repeats them.
 *
 * --zookeeper-acl / $ZOOKEEPER_ACL protects the locks and elections a run
 * takes: 'creator' gives the run's identity everything and everyone else
 * READ only (so others' `status` still works); 'open', the default, is
 * ZooKeeper's own default.
 */
import { readFileSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import { ClientClosedError, ConnectionLossError, InvalidArgumentError, SessionExpiredError } from '../../index.js';
import {
  ZooKeeperClient,
  observeLock,
  queuePath,
  tcpConnector,
  tlsConnector,
  zookeeperSource,
  CREATOR_ALL_ACL,
  READ_ACL_UNSAFE,
  type ACL,
  type AuthInfo,
  type ClientState,
  type Connector,
  type ZooKeeperLockObserver,
  type QueueEntry as ZooKeeperQueueEntry,
  type TlsOptions,
} from '../../sources/zookeeper/index.js';
import { UsageError, positiveInt, type ParsedArgs } from '../args.js';
import { UnreachableError, type LockService, type LockServiceAddress, type LockServiceKind, type QueueEntry, type QueueEvent } from '../lock-service.js';
import { READ_AGAIN, followQueue, serviceOf } from './source-service.js';

/** ZooKeeper's own flags, beside --zookeeper and --session-timeout (node:util parseArgs form). */
export const ZOOKEEPER_OPTIONS = {
  'zookeeper-tls': { type: 'boolean' },
  'zookeeper-tls-ca': { type: 'string' },
  'zookeeper-tls-cert': { type: 'string' },
  'zookeeper-tls-key': { type: 'string' },
  'zookeeper-tls-servername': { type: 'string' },
  'zookeeper-auth-file': { type: 'string' },
  'zookeeper-acl': { type: 'string' },
  // Only to refuse it with the way that works: the value is already in this process's arguments.
  'zookeeper-auth': { type: 'string' },
} as const;

/** A flag's value, else its environment variable's ('' counts as unset). */
function setting(values: ParsedArgs['values'], env: NodeJS.ProcessEnv, flag: string, variable: string): { value: string; origin: string } | undefined {
  const fromFlag = values[flag];
  if (typeof fromFlag === 'string') return { value: fromFlag, origin: `--${flag}` };
  const fromEnv = env[variable];
  if (fromEnv !== undefined && fromEnv !== '') return { value: fromEnv, origin: variable };
  return undefined;
}

function readSetting(found: { value: string; origin: string }): Buffer {
  try {
    return readFileSync(found.value);
  } catch (error) {
    throw new UsageError(`${found.origin} ${JSON.stringify(found.value)}: cannot read it (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
}

/**
 * TLS from the flags or the environment: undefined (plain TCP) unless
 * --zookeeper-tls / ZOOKEEPER_TLS=1, or a CA, certificate, key or server
 * name is given. Reads the files now, so a missing one is a usage error
 * before anything connects.
 */
export function zookeeperTls(values: ParsedArgs['values'], env: NodeJS.ProcessEnv): TlsOptions | undefined {
  const ca = setting(values, env, 'zookeeper-tls-ca', 'ZOOKEEPER_TLS_CA');
  const cert = setting(values, env, 'zookeeper-tls-cert', 'ZOOKEEPER_TLS_CERT');
  const key = setting(values, env, 'zookeeper-tls-key', 'ZOOKEEPER_TLS_KEY');
  const servername = setting(values, env, 'zookeeper-tls-servername', 'ZOOKEEPER_TLS_SERVERNAME');
  const switchedOn = values['zookeeper-tls'] === true || ['1', 'true', 'yes'].includes((env.ZOOKEEPER_TLS ?? '').toLowerCase());
  if (env.ZOOKEEPER_TLS !== undefined && !['', '0', '1', 'true', 'false', 'yes', 'no'].includes(env.ZOOKEEPER_TLS.toLowerCase())) {
    throw new UsageError(`ZOOKEEPER_TLS must be 1 or 0 (true/false, yes/no), got ${JSON.stringify(env.ZOOKEEPER_TLS)}`);
  }
  if (!switchedOn && ca === undefined && cert === undefined && key === undefined && servername === undefined) return undefined;
  if ((cert === undefined) !== (key === undefined)) {
    throw new UsageError(`a client certificate needs its key: give both ${cert?.origin ?? '--zookeeper-tls-cert (ZOOKEEPER_TLS_CERT)'} and ${key?.origin ?? '--zookeeper-tls-key (ZOOKEEPER_TLS_KEY)'}`);
  }
  if (servername !== undefined && servername.value.trim() === '') throw new UsageError(`${servername.origin}: empty server name`);
  return {
    ...(ca !== undefined && { ca: readSetting(ca) }),
    ...(cert !== undefined && { cert: readSetting(cert) }),
    ...(key !== undefined && { key: readSetting(key) }),
    ...(servername !== undefined && { servername: servername.value }),
  };
}

/**
 * Digest credentials from $ZOOKEEPER_AUTH, or the first line of the file of
 * --zookeeper-auth-file / $ZOOKEEPER_AUTH_FILE; none when neither is set.
 * Messages name where the credentials came from, never what they are.
 */
export function zookeeperAuth(values: ParsedArgs['values'], env: NodeJS.ProcessEnv): AuthInfo[] {
  if (values['zookeeper-auth'] !== undefined) {
    throw new UsageError(
      '--zookeeper-auth: credentials are not taken from the command line, where every user of the machine sees them (ps); ' +
        'set ZOOKEEPER_AUTH=user:password in the environment, or put user:password in a file only you can read and pass --zookeeper-auth-file FILE',
    );
  }
  const file = setting(values, env, 'zookeeper-auth-file', 'ZOOKEEPER_AUTH_FILE');
  const inline = env.ZOOKEEPER_AUTH;
  if (file !== undefined && inline !== undefined && inline !== '') {
    throw new UsageError(`credentials from both ZOOKEEPER_AUTH and ${file.origin}: give one`);
  }
  let text: string;
  let origin: string;
  if (file !== undefined) {
    // Up to the first line break: a file written by `echo` ends with one.
    text = readSetting(file).toString('utf8').split(/\r?\n/, 1)[0] ?? '';
    origin = `the file of ${file.origin}`;
  } else if (inline !== undefined && inline !== '') {
    text = inline;
    origin = 'ZOOKEEPER_AUTH';
  } else {
    return [];
  }
  const colon = text.indexOf(':');
  if (colon <= 0 || colon === text.length - 1) throw new UsageError(`${origin}: expected user:password (digest), with a non-empty user and password`);
  return [{ scheme: 'digest', credentials: text }];
}

/** The ensemble of --zookeeper / $ZOOKEEPER (what the commands use when no --lock-service is given). */
/**
 * The ACL of the nodes a run creates: undefined (open) unless
 * --zookeeper-acl / $ZOOKEEPER_ACL is 'creator', which needs credentials.
 */
export function zookeeperAcl(values: ParsedArgs['values'], env: NodeJS.ProcessEnv, auth: readonly AuthInfo[]): readonly ACL[] | undefined {
  const acl = setting(values, env, 'zookeeper-acl', 'ZOOKEEPER_ACL');
  if (acl === undefined || acl.value === 'open') return undefined;
  if (acl.value !== 'creator') throw new UsageError(`${acl.origin} must be 'creator' or 'open', got ${JSON.stringify(acl.value)}`);
  if (auth.length === 0) {
    throw new UsageError(`${acl.origin} creator: the nodes belong to the run's identity, so it needs credentials ($ZOOKEEPER_AUTH or --zookeeper-auth-file)`);
  }
  return [...CREATOR_ALL_ACL, ...READ_ACL_UNSAFE];
}

export function zookeeperAddress(values: ParsedArgs['values'], env: NodeJS.ProcessEnv): LockServiceAddress {
  const connectString = (values.zookeeper as string | undefined) ?? env.ZOOKEEPER;
  if (connectString === undefined || connectString === '') {
    throw new UsageError('no lock service to talk to: pass --lock-service URL (or set FENCEKEEPER_LOCK_SERVICE), or --zookeeper host:port[,host:port][/chroot] (or set ZOOKEEPER)');
  }
  return ensembleAddress(connectString, values, env, '--zookeeper');
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
    return ensembleAddress(connectString, context.values, context.env, context.origin);
  },
};

/** `origin`: where the connect string came from, for messages. */
function ensembleAddress(connectString: string, values: ParsedArgs['values'], env: NodeJS.ProcessEnv, origin: string): LockServiceAddress {
  const sessionTimeoutMs = positiveInt(values['session-timeout'] as string | undefined, '--session-timeout');
  const tls = zookeeperTls(values, env);
  const auth = zookeeperAuth(values, env);
  const defaultAcl = zookeeperAcl(values, env, auth);
  return {
    description: `ZooKeeper at ${connectString}${tls !== undefined ? ' (TLS)' : ''}`,
    lockDelay: true,
    checkName(kind, name) {
      try {
        queuePath(kind, name);
      } catch (error) {
        if (error instanceof InvalidArgumentError) {
          throw new UsageError(`bad ${kind} name ${JSON.stringify(name)} (${error.message}): a name is a relative path of non-empty segments, without '.' or '..', like "jobs/reindex"`);
        }
        throw error;
      }
    },
    async connect(signal) {
      signal?.throwIfAborted();
      const interruptible = signal === undefined ? undefined : interruptibleConnector(tls !== undefined ? tlsConnector(tls) : tcpConnector, signal);
      let zk: ZooKeeperClient;
      try {
        zk = await ZooKeeperClient.connect({
          connectString,
          ...(sessionTimeoutMs !== undefined && { sessionTimeoutMs }),
          ...(interruptible !== undefined ? { connector: interruptible.connector } : tls !== undefined && { tls }),
          ...(auth.length > 0 && { auth }),
          ...(defaultAcl !== undefined && { defaultAcl }),
        });
      } catch (error) {
        signal?.throwIfAborted();
        // connect() checks its options before it opens a socket.
        if (error instanceof InvalidArgumentError) throw new UsageError(`${origin} ${JSON.stringify(connectString)}: ${error.message}`);
        throw new UnreachableError(`cannot reach ZooKeeper at ${connectString}: ${(error as Error).message}`);
      } finally {
        interruptible?.settled();
      }
      return zookeeperService(zk);
    },
  };
}

/**
 * The client's connect() takes no signal, and against servers that accept
 * TCP but do not answer (a paused ZooKeeper) it tries on for the session
 * timeout. So while it connects, the connector it would use anyway (TLS or
 * plain TCP) is wrapped: once `signal` aborts, the streams it opened are
 * destroyed (the handshake in flight fails) and the next dial is refused
 * with a non-retryable error, which the client takes as final (see
 * Connector) and connect() rejects, after at most one pause between rounds
 * of servers. A stream that comes after the abort is destroyed at once. From
 * settled() on (connect() is over) the wrapper only passes through: the
 * abort no longer touches the session's connections.
 */
function interruptibleConnector(base: Connector, signal: AbortSignal): { readonly connector: Connector; settled(): void } {
  let connecting = true;
  const open = new Set<Duplex>();
  const refusal = (): ClientClosedError => new ClientClosedError('connecting given up: interrupted');
  const onAbort = (): void => {
    for (const stream of open) stream.destroy();
    open.clear();
  };
  signal.addEventListener('abort', onAbort, { once: true });
  return {
    async connector(address, options) {
      if (connecting && signal.aborted) throw refusal();
      const stream = await base(address, options);
      if (!connecting) return stream;
      if (signal.aborted) {
        stream.destroy();
        throw refusal();
      }
      open.add(stream);
      stream.once('close', () => open.delete(stream));
      return stream;
    },
    settled() {
      connecting = false;
      open.clear();
      signal.removeEventListener('abort', onAbort);
    },
  };
}

function zookeeperService(zk: ZooKeeperClient): LockService {
  const source = zookeeperSource(zk);
  return serviceOf({
    source,
    description: 'ZooKeeper',
    grantMs: () => zk.sessionTimeoutMs,
    unreachable,
    entries,
    watchQueue: (name, onChange, signal) => watchQueue(zk, name, onChange, signal),
    close: () => zk.close(),
  });
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
 * The lock's queue, read again each time the watch of fencekeeper/zookeeper's
 * observeLock says it changed: a children watch on the lock's parent (an
 * exists watch while the parent is missing: it is a container, removed once
 * its last node is gone, and created again by the next acquire). One listing
 * costs a getChildren and a getData per node; nothing is read while the
 * queue does not change. After a lost connection the client re-arms the
 * watch with setWatches, which fires it if the queue changed meanwhile, so
 * nothing is missed and nothing is re-read for nothing; a read that was in
 * flight is sent again.
 */
function watchQueue(zk: ZooKeeperClient, name: string, onChange: (event: QueueEvent) => void, signal: AbortSignal): Promise<void> {
  let observer: ZooKeeperLockObserver | undefined;
  return followQueue(
    (changed, end) => {
      const watching = observeLock(zk, name);
      observer = watching;
      watching.onChange(changed);
      const onState = (state: ClientState): void => {
        if (state === 'suspended') {
          onChange({ type: 'disconnected', detail: `lost the connection to ZooKeeper; reconnecting (the session lasts ${zk.sessionTimeoutMs} ms without one)` });
        } else if (state === 'connected') {
          onChange({ type: 'reconnected', detail: `connected to ZooKeeper again, session 0x${zk.sessionId.toString(16)} kept` });
        } else if (state === 'expired' || state === 'closed') {
          end(new UnreachableError(`ZooKeeper: session 0x${zk.sessionId.toString(16)} ${state}`));
        }
      };
      zk.on('state', onState);
      return () => {
        zk.off('state', onState);
        watching.close();
      };
    },
    async () => entries(await (observer as ZooKeeperLockObserver).queue()),
    // In flight when the connection dropped: send it again (it waits for the reconnect).
    (error) => (error instanceof ConnectionLossError ? READ_AGAIN : unreachable(error)),
    onChange,
    signal,
  );
}

/** A session lost while we waited is the service becoming unreachable, not a bug. */
function unreachable(error: unknown): unknown {
  if (error instanceof ConnectionLossError || error instanceof SessionExpiredError) {
    return new UnreachableError(`ZooKeeper: ${error.message}`);
  }
  return error;
}
