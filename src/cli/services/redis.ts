/**
 * Redis and Redlock as the CLI's lock service:
 *   redis://[user[:password]@]host:port[/db]            the single-instance lock
 *   redlock://[user[:password]@]h1:p1,h2:p2,h3:p3[,...]  Redlock over independent nodes
 * --session-timeout is the lock key's TTL (default 10000 ms), and the bound
 * on connecting (a node paused by SIGSTOP still completes the handshake, then
 * answers nothing: exit 69 rather than a wait without end). A password is
 * accepted from $FENCEKEEPER_LOCK_SERVICE only, never from the command line
 * (where `ps` shows it to every user of the machine).
 */
import { ConnectionLossError, InvalidArgumentError, QuorumError } from '../../index.js';
import { UsageError, lockNameRule, positiveInt } from '../args.js';
import { UnreachableError, type Holding, type LockService, type LockServiceContext, type LockServiceKind, type QueueEntry, type QueueEvent } from '../lock-service.js';
import { followQueue, serviceOf } from './source-service.js';

interface Endpoint {
  readonly host: string;
  readonly port: number;
}

interface RedisUrl {
  readonly endpoints: readonly Endpoint[];
  readonly username: string | undefined;
  readonly password: string | undefined;
  readonly db: number;
}

const DEFAULT_TTL_MS = 10_000;

function parseUrl(scheme: 'redis' | 'redlock', rest: string, context: LockServiceContext): RedisUrl {
  const { origin } = context;
  if (/[?#]/.test(rest)) throw new UsageError(`${origin}: a ${scheme}:// URL takes no query or fragment`);
  let hosts = rest;
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const credentials = rest.slice(0, at);
    hosts = rest.slice(at + 1);
    const colon = credentials.indexOf(':');
    username = decodeURIComponent(colon < 0 ? credentials : credentials.slice(0, colon)) || undefined;
    password = colon < 0 ? undefined : decodeURIComponent(credentials.slice(colon + 1));
    if (password !== undefined && context.fromCommandLine) {
      throw new UsageError(`${origin}: a URL with a password is accepted from FENCEKEEPER_LOCK_SERVICE only (on the command line, ps shows it to every user)`);
    }
  }
  let db = 0;
  const slash = hosts.indexOf('/');
  if (slash >= 0) {
    const path = hosts.slice(slash + 1);
    hosts = hosts.slice(0, slash);
    if (path !== '') {
      if (scheme === 'redlock') throw new UsageError(`${origin}: a redlock:// URL takes no database number (each node uses its database 0)`);
      if (!/^(?:0|[1-9][0-9]?)$/.test(path)) throw new UsageError(`${origin}: the database of a redis:// URL is a number 0..99, got ${JSON.stringify(path)}`);
      db = Number(path);
    }
  }
  const endpoints = hosts.split(',').map((hp) => {
    const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$/.exec(hp);
    const port = m === null ? NaN : Number(m[2]);
    if (m === null || port < 1 || port > 65535) throw new UsageError(`${origin}: expected host:port in a ${scheme}:// URL, got ${JSON.stringify(hp)}`);
    return { host: (m[1] as string).replace(/^\[|\]$/g, ''), port };
  });
  if (scheme === 'redis' && endpoints.length !== 1) throw new UsageError(`${origin}: redis:// names one server; for several independent ones use redlock://`);
  if (scheme === 'redlock') {
    if (endpoints.length < 3) throw new UsageError(`${origin}: redlock:// needs at least 3 independent nodes, got ${endpoints.length}`);
    const seen = new Set(endpoints.map((e) => `${e.host}:${e.port}`));
    if (seen.size !== endpoints.length) throw new UsageError(`${origin}: redlock:// names the same node twice`);
  }
  return { endpoints, username, password, db };
}

function checkName(kind: 'lock' | 'election', name: string, description: string): void {
  if (kind === 'election') throw new UsageError(`${description} has no elections: elect needs zookeeper:// (or etcd)`);
  if (name === '' || Buffer.byteLength(name) > 512 || /[\s{}\p{Cc}]/u.test(name)) {
    throw new UsageError(`bad lock name ${JSON.stringify(name)} for Redis: 1..512 bytes, without spaces, braces or control characters, like "jobs/reindex"`);
  }
  lockNameRule(kind, name);
}

function kind(scheme: 'redis' | 'redlock', example: string): LockServiceKind {
  return {
    example,
    address(rest, context) {
      const url = parseUrl(scheme, rest, context);
      const ttlMs = positiveInt(context.values['session-timeout'] as string | undefined, '--session-timeout') ?? DEFAULT_TTL_MS;
      const list = url.endpoints.map((e) => `${e.host}:${e.port}`).join(',');
      const description = scheme === 'redis' ? `Redis at ${list}` : `Redlock over ${list}`;
      return {
        description,
        checkName: (k, name) => checkName(k, name, description),
        connect: (signal) => connect(scheme, url, ttlMs, description, signal),
      };
    },
  };
}

export const REDIS_SERVICE = kind('redis', 'redis://127.0.0.1:6379');
export const REDLOCK_SERVICE = kind('redlock', 'redlock://h1:6379,h2:6379,h3:6379');

async function connect(scheme: 'redis' | 'redlock', url: RedisUrl, ttlMs: number, description: string, signal: AbortSignal | undefined): Promise<LockService> {
  const [{ Redis }, { redisSource }] = await Promise.all([import('ioredis'), import('../../sources/redis/index.js')]);
  const clients = url.endpoints.map(
    (e) =>
      new Redis({
        host: e.host,
        port: e.port,
        db: url.db,
        lazyConnect: true,
        ...(url.username !== undefined && { username: url.username }),
        ...(url.password !== undefined && { password: url.password }),
      }),
  );
  // ioredis reports a broken connection as an event; the commands report it as a failed request.
  for (const c of clients) c.on('error', () => {});
  const close = async (): Promise<void> => {
    for (const c of clients) {
      c.disconnect();
      // disconnect() half-closes the socket and waits for the server's FIN: a
      // silent server (paused, black-holed) would keep the process alive for
      // seconds after we gave up. Nothing more is to be read from it.
      (c as unknown as { stream?: { destroy(): void } }).stream?.destroy();
    }
  };
  // ioredis's connect() waits for the server's answer to its ready check
  // (INFO) without a deadline of its own (connectTimeout ends at the TCP
  // handshake): a paused node would hold every command here forever. One TTL
  // is the bound: a node that cannot answer within it cannot hold a lock key.
  // An operator's signal ends the wait sooner: disconnecting rejects every
  // client's connect() at once, and nothing was sent but the handshake.
  signal?.throwIfAborted();
  const giveUp = (): void => void close();
  signal?.addEventListener('abort', giveUp, { once: true });
  let reached: (string | null)[];
  try {
    reached = await Promise.all(clients.map((c) => connectWithin(c, ttlMs).then(() => null, (error: Error) => `${c.options.host}:${c.options.port}: ${error.message}`)));
  } finally {
    signal?.removeEventListener('abort', giveUp);
  }
  if (signal?.aborted) {
    await close();
    signal.throwIfAborted();
  }
  const failed = reached.filter((r): r is string => r !== null);
  if (failed.length > (scheme === 'redis' ? 0 : clients.length - (Math.floor(clients.length / 2) + 1))) {
    await close();
    throw new UnreachableError(`cannot reach ${description}: ${failed.join('; ')}`);
  }
  // One server: a fifth of the TTL for each answer, not the library's twentieth. That short bound is
  // Redlock's (a slow node must not eat the validity of a grant the others can give); with one server
  // there is no other node to ask, and on a loaded machine an fsync-per-write server can take longer
  // than a twentieth of a short TTL (200 ms of the demo's 4 s), which would end the command. Renewals
  // (every third of the TTL) and the step-down clock are unchanged by it.
  const settings = scheme === 'redis' ? { ttlMs, nodeTimeoutMs: Math.round(ttlMs / 5) } : { ttlMs };
  let source;
  try {
    source = redisSource(scheme === 'redis' ? (clients[0] as InstanceType<typeof Redis>) : clients, settings);
  } catch (error) {
    await close();
    if (error instanceof InvalidArgumentError) throw new UsageError(`${description}: ${error.message}`);
    throw error;
  }
  return serviceOf({
    source,
    description,
    grantMs: () => ttlMs,
    unreachable: (error) => unreachable(error, description),
    // Redis keeps no queue of waiters with tokens: the holder alone.
    entries: (queue) => entries(queue, ttlMs),
    watchQueue: (name, onChange, signal) => {
      // CONFIG GET within the lock commands' own node timeout. No answer in
      // time (a paused node) rejects, with a ConnectionLossError
      // (CONNECTION_LOSS, exit 69) rather than an UnreachableError, which
      // would make `status --watch` reconnect to it again and again; CONFIG
      // refused or renamed (an error reply, a dropped connection) is
      // undefined: subscribe anyway.
      const { nodeTimeoutMs } = source.settings;
      const configGet = (client: (typeof clients)[number]): Promise<unknown> =>
        new Promise((resolve, reject) => {
          const timer = setTimeout(() => {
            reject(new ConnectionLossError(`Redis at ${client.options.host}:${client.options.port} did not answer CONFIG within ${nodeTimeoutMs} ms`));
          }, nodeTimeoutMs);
          timer.unref();
          client.call('CONFIG', ['GET', 'notify-keyspace-events']).then(
            (reply) => {
              clearTimeout(timer);
              resolve(reply);
            },
            () => {
              clearTimeout(timer);
              resolve(undefined);
            },
          );
        });
      return watchQueue(clients, configGet, url.db, async () => entries(holderOf(await source.lockStatus(name)), ttlMs), name, onChange, signal, description, ttlMs);
    },
    close,
  });
}

/** `client.connect()`, or a rejection once `ms` passed without the server being ready (the client is then disconnected). */
function connectWithin(client: { connect(): Promise<void>; disconnect(): void }, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`connected, but the server did not answer within ${ms} ms (paused or overloaded?)`));
      client.disconnect();
    }, ms);
    timer.unref();
    client.connect().then(
      () => {
        clearTimeout(timer);
        resolve();
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

function unreachable(error: unknown, description: string): unknown {
  if (error instanceof ConnectionLossError || error instanceof QuorumError) return new UnreachableError(`${description}: ${error.message}`);
  return error;
}

interface HolderEntry {
  readonly token: bigint;
  readonly owner: string;
  readonly key: string;
}

function holderOf(status: { readonly holder: HolderEntry | null }): HolderEntry[] {
  return status.holder === null ? [] : [status.holder];
}

function entries(queue: readonly HolderEntry[], ttlMs: number): QueueEntry[] {
  return queue.map((e) => ({ role: 'holder', token: e.token, owner: e.owner, session: `key with a ${ttlMs} ms TTL`, node: e.key }));
}

/** The keyspace events `status --watch` follows: K (keyspace channels), $ (SET), g (DEL, EXPIRE), x (expired). */
const NEEDED_EVENTS = ['K', '$', 'g', 'x'];

/**
 * `status --watch` over Redis: Redis keeps no change feed of its own, so this
 * follows the lock's keys through keyspace notifications (the lock key's
 * SET, DEL and expiry; the counter's INCR and SET), subscribed on every node
 * before the first read, and reads the lock again on each event (and after a
 * subscriber reconnects). A server whose notify-keyspace-events lacks them
 * is refused with the setting to use, rather than watched in silence.
 */
async function watchQueue<C extends { duplicate(override: { autoResubscribe: false }): unknown }>(
  clients: readonly C[],
  /** CONFIG GET notify-keyspace-events: the reply, undefined if refused; rejects on no answer. */
  configGet: (client: C) => Promise<unknown>,
  db: number | undefined,
  read: () => Promise<QueueEntry[]>,
  name: string,
  onChange: (event: QueueEvent) => void,
  signal: AbortSignal,
  description: string,
  /** How long a majority of the subscribers may take to connect and subscribe (one TTL, as connect's bound). */
  connectMs: number,
): Promise<void> {
  // Asked of every node at once. More nodes without an answer than the lock
  // tolerates (none for redis://, a minority for redlock://): the watch
  // cannot start, and says so with the first node's timeout.
  const answers = await Promise.allSettled(clients.map((c) => configGet(c)));
  const silent = answers.filter((a): a is PromiseRejectedResult => a.status === 'rejected');
  if (silent.length > (clients.length === 1 ? 0 : clients.length - (Math.floor(clients.length / 2) + 1))) throw silent[0]!.reason;
  for (const answer of answers) {
    const reply = answer.status === 'fulfilled' ? answer.value : undefined;
    // undefined: CONFIG refused or renamed (or that node silent, within the tolerance): subscribe anyway.
    const flags = Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : undefined;
    if (flags !== undefined && !NEEDED_EVENTS.every((f) => flags.includes(f) || (f !== 'K' && flags.includes('A')))) {
      throw new UsageError(
        `${description}: status --watch needs keyspace notifications for the lock's keys; the server has notify-keyspace-events "${flags}": set it to "K$gx" (or add those flags)`,
      );
    }
  }
  const [lockKey, counterKey] = [`fencekeeper:lock:{${name}}`, `fencekeeper:token:{${name}}`];
  const channels = [lockKey, counterKey].map((k) => `__keyspace@${db ?? 0}__:${k}`);
  type Subscriber = {
    on(event: string, listener: (...args: unknown[]) => void): void;
    subscribe(...channels: string[]): Promise<unknown>;
    disconnect(): void;
  };
  return followQueue(
    async (changed) => {
      // Without ioredis's own resubscribe after a reconnect: its promise has no handler, and
      // stop() during it would reject it ("Connection is closed.", an unhandled rejection).
      const subscribers = clients.map((c) => c.duplicate({ autoResubscribe: false }) as Subscriber);
      const lost = new Set<Subscriber>();
      let stopped = false;
      for (const sub of subscribers) {
        sub.on('error', () => {});
        sub.on('message', changed);
        sub.on('close', () => {
          if (stopped || signal.aborted || lost.has(sub)) return;
          lost.add(sub);
          onChange({ type: 'disconnected', detail: 'the subscription to the lock\'s keyspace events dropped; reconnecting' });
        });
        sub.on('ready', () => {
          if (stopped || !lost.has(sub)) return;
          // Subscribed again, then read: what changed meanwhile was not seen. A failure
          // (closed again before the server confirmed) waits for the next 'ready'.
          sub.subscribe(...channels).then(
            () => {
              if (stopped || !lost.delete(sub)) return;
              onChange({ type: 'reconnected', detail: 'subscribed to the lock\'s keyspace events again' });
              changed();
            },
            () => {},
          );
        });
      }
      const stop = (): void => {
        stopped = true;
        for (const s of subscribers) s.disconnect();
      };
      // Confirmed by as many nodes as a read needs (all of one, a majority of
      // several) is enough to start: a paused node's subscriber waits in
      // ioredis's ready check without end, and its events come later or
      // never, as a Redlock node's answers do. The rest subscribe on in the
      // background. Stopped meanwhile: return, and followQueue unhooks.
      try {
        await majoritySubscribed(subscribers.map((s) => s.subscribe(...channels)), connectMs, signal, description);
      } catch (error) {
        stop();
        throw error instanceof MajoritySilentError ? error.cause : unreachable(error, description);
      }
      return stop;
    },
    read,
    (error) => unreachable(error, description),
    onChange,
    signal,
  );
}

/** Wraps the error that majoritySubscribed's deadline gives, so that it is thrown as it is (not as an UnreachableError, which reconnects). */
class MajoritySilentError extends Error {
  override readonly cause: ConnectionLossError;
  constructor(cause: ConnectionLossError) {
    super(cause.message);
    this.cause = cause;
  }
}

/**
 * Resolves once `needed` of `subscribed` resolved (all of one, a majority of
 * several), or once `signal` aborts; rejects with the first failure once too
 * many failed for a majority, or with a MajoritySilentError (a
 * ConnectionLossError: exit 69) if no majority confirmed within `ms`. The
 * promises left over get handlers: none of them rejects unhandled.
 */
function majoritySubscribed(subscribed: readonly Promise<unknown>[], ms: number, signal: AbortSignal, description: string): Promise<void> {
  const needed = subscribed.length === 1 ? 1 : Math.floor(subscribed.length / 2) + 1;
  return new Promise((resolve, reject) => {
    let confirmed = 0;
    let failed = 0;
    let firstError: unknown;
    const finish = (error?: unknown): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onAbort = (): void => finish();
    const timer = setTimeout(() => {
      finish(new MajoritySilentError(new ConnectionLossError(`${description}: ${subscribed.length - confirmed} of ${subscribed.length} nodes did not confirm the subscription to the lock's keyspace events within ${ms} ms (paused or overloaded?)`)));
    }, ms);
    timer.unref();
    signal.addEventListener('abort', onAbort, { once: true });
    if (signal.aborted) onAbort();
    for (const s of subscribed) {
      s.then(
        () => {
          if (++confirmed === needed) finish();
        },
        (error: unknown) => {
          firstError ??= error;
          if (++failed === subscribed.length - needed + 1) finish(firstError);
        },
      );
    }
  });
}
