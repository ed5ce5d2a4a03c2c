/**
 * etcd as the CLI's lock service: etcd://h1:2379,h2:2379. --session-timeout
 * (ms) asks for the lease's TTL, rounded up to whole seconds (default 10 s);
 * the TTL etcd granted is the "session timeout" the commands see.
 *
 * fencekeeper/etcd and its peer library etcd3 are loaded only when an
 * etcd:// URL is used, so the CLI works without etcd3 installed.
 */
import { InvalidArgumentError, SessionExpiredError, ClientClosedError } from '../../index.js';
import { UsageError, lockNameRule, positiveInt } from '../args.js';
import { UnreachableError, type LockService, type LockServiceAddress, type LockServiceKind, type QueueEntry, type QueueEvent } from '../lock-service.js';
import { followQueue, serviceOf } from './source-service.js';

type EtcdEntry = typeof import('../../sources/etcd/index.js');
type Etcd3Module = { Etcd3: new (options: { hosts: string[] }) => import('../../sources/etcd/index.js').EtcdClient & { close(): void } };

const HOST = /^(?:\[[0-9a-f:.]+\]|[a-z0-9.-]+):[0-9]{1,5}$/i;

export const ETCD_SERVICE: LockServiceKind = {
  example: 'etcd://127.0.0.1:2379[,host:port...]',
  address(rest, context) {
    if (/[@?#/]/.test(rest.endsWith('/') ? rest.slice(0, -1) : rest)) {
      throw new UsageError(`${context.origin}: an etcd:// URL carries hosts only (host:port[,host:port...]: no credentials, path, query or fragment)`);
    }
    const hosts = (rest.endsWith('/') ? rest.slice(0, -1) : rest).split(',');
    for (const host of hosts) {
      const port = Number(host.slice(host.lastIndexOf(':') + 1));
      if (!HOST.test(host) || port < 1 || port > 65535) throw new UsageError(`${context.origin}: ${JSON.stringify(host)} is not host:port`);
    }
    const sessionMs = positiveInt(context.values['session-timeout'] as string | undefined, '--session-timeout');
    const ttlSeconds = sessionMs === undefined ? undefined : Math.ceil(sessionMs / 1000);
    return {
      description: `etcd at ${hosts.join(',')}`,
      checkName(kind, name) {
        checkEtcdName(kind, name);
      },
      async connect(signal) {
        const [entry, etcd3] = await Promise.all([import('../../sources/etcd/index.js'), loadEtcd3()]);
        signal?.throwIfAborted();
        const etcd = new etcd3.Etcd3({ hosts });
        let source: ReturnType<EtcdEntry['etcdSource']>;
        try {
          source = entry.etcdSource(etcd, ttlSeconds === undefined ? undefined : { ttlSeconds });
        } catch (error) {
          etcd.close();
          if (error instanceof InvalidArgumentError) throw new UsageError(`--session-timeout ${String(sessionMs)}: ${error.message}`);
          throw error;
        }
        const session = entry.etcdSession(etcd);
        // An operator's signal: closing the client cancels the lease grant in flight.
        const giveUp = (): void => etcd.close();
        signal?.addEventListener('abort', giveUp, { once: true });
        try {
          // Granted now: the commands need the TTL etcd grants, and an unreachable etcd should say so at once.
          await session.lease();
          signal?.throwIfAborted();
        } catch (error) {
          await session.close().catch(() => undefined);
          etcd.close();
          signal?.throwIfAborted();
          throw new UnreachableError(`cannot reach etcd at ${hosts.join(',')}: ${(error as Error).message}`);
        } finally {
          signal?.removeEventListener('abort', giveUp);
        }
        return etcdService(entry, etcd, source, session);
      },
    };
  },
};

async function loadEtcd3(): Promise<Etcd3Module> {
  try {
    return (await import('etcd3')) as unknown as Etcd3Module;
  } catch {
    throw new UsageError('etcd:// needs the etcd3 package: npm install etcd3');
  }
}

// fencekeeper/etcd's name rule (src/sources/etcd/input.ts checkName), checked here before
// anything is loaded: the CLI loads adapters only on demand (test/integration/cli/layers.test.ts).
function checkEtcdName(kind: string, name: string): void {
  // eslint-disable-next-line no-control-regex
  const bad = name === '' || name.length > 1024 || /[\u0000-\u001f\u007f#]/.test(name) || name.split('/').some((s) => s === '' || s === '.' || s === '..');
  if (bad) {
    throw new UsageError(`bad ${kind} name ${JSON.stringify(name)}: a name is a relative path of non-empty segments, without '.', '..' or '#', like "jobs/reindex"`);
  }
  lockNameRule(kind, name);
}

function etcdService(
  entry: EtcdEntry,
  etcd: Etcd3Module['Etcd3']['prototype'],
  source: ReturnType<EtcdEntry['etcdSource']>,
  session: ReturnType<EtcdEntry['etcdSession']>,
): LockService {
  const ttlMs = (): number => session.ttlMs ?? session.requestedTtlSeconds * 1000;
  return serviceOf({
    source,
    description: 'etcd',
    grantMs: ttlMs,
    unreachable,
    entries,
    watchQueue: (name, onChange, signal) => watchQueue(entry, etcd, name, onChange, signal),
    async close() {
      await session.close();
      etcd.close();
    },
  });
}

type Entry = Awaited<ReturnType<EtcdEntry['lockStatus']>>['waiters'][number];

function entries(queue: readonly Entry[]): QueueEntry[] {
  return queue.map((e, i) => ({ role: i === 0 ? 'holder' : 'waiter', token: e.token, owner: e.owner, session: `lease 0x${e.lease.toString(16)}`, node: e.key }));
}

/**
 * The queue, read again each time the watch on the lock's key prefix
 * (fencekeeper/etcd's observeLock) reports a change; nothing is read while
 * the queue does not change.
 */
function watchQueue(entry: EtcdEntry, etcd: Etcd3Module['Etcd3']['prototype'], name: string, onChange: (event: QueueEvent) => void, signal: AbortSignal): Promise<void> {
  let observer: ReturnType<EtcdEntry['observeLock']> | undefined;
  return followQueue(
    (changed) => {
      const watching = entry.observeLock(etcd, name);
      observer = watching;
      watching.onChange(changed);
      watching.onConnection((state, detail) => onChange({ type: state, detail }));
      return () => watching.close();
    },
    async () => entries(await (observer as ReturnType<EtcdEntry['observeLock']>).queue()),
    unreachable,
    onChange,
    signal,
  );
}

/** A lease lost (or etcd out of reach) while we waited is the service becoming unreachable, not a bug. */
function unreachable(error: unknown): unknown {
  if (error instanceof SessionExpiredError || error instanceof ClientClosedError) return new UnreachableError(`etcd: ${error.message}`);
  const name = (error as { name?: unknown } | null)?.name;
  if (typeof name === 'string' && /^GRPC(Unavailable|ConnectFailed|DeadlineExceeded)Error$/.test(name)) return new UnreachableError(`etcd: ${(error as Error).message}`);
  return error;
}
