/**
 * The lock services the CLI can name by URL scheme (--lock-service URL).
 * One file per source; each turns its URL into a LockServiceAddress, checking
 * everything it can before connecting.
 */
import { UsageError, type ParsedArgs } from '../args.js';
import type { LockServiceAddress, LockServiceKind } from '../lock-service.js';
import { ETCD_SERVICE } from './etcd.js';
import { ZOOKEEPER_OPTIONS, ZOOKEEPER_SERVICE, zookeeperAddress } from './zookeeper.js';
import { REDIS_SERVICE, REDLOCK_SERVICE } from './redis.js';
import { POSTGRES_SERVICE, POSTGRESQL_SERVICE } from './postgres.js';

/** The flags every command that talks to the lock service accepts (node:util parseArgs form). */
export const LOCK_SERVICE_OPTIONS = {
  'lock-service': { type: 'string' },
  zookeeper: { type: 'string' },
  'session-timeout': { type: 'string' },
  ...ZOOKEEPER_OPTIONS,
} as const;

/** By URL scheme. */
export const LOCK_SERVICES: Readonly<Record<string, LockServiceKind>> = Object.freeze({
  zookeeper: ZOOKEEPER_SERVICE,
  redis: REDIS_SERVICE,
  redlock: REDLOCK_SERVICE,
  etcd: ETCD_SERVICE,
  postgres: POSTGRES_SERVICE,
  postgresql: POSTGRESQL_SERVICE,
});

/**
 * The lock service the flags (or the environment) name. Checks what it can
 * without connecting: the URL's scheme and form, and (through checkName) the
 * names. `--lock-service` wins over $FENCEKEEPER_LOCK_SERVICE, which wins
 * over --zookeeper / $ZOOKEEPER.
 */
export function lockServiceFrom(values: ParsedArgs['values'], env: NodeJS.ProcessEnv = process.env): LockServiceAddress {
  const flag = values['lock-service'] as string | undefined;
  const text = flag ?? env.FENCEKEEPER_LOCK_SERVICE;
  if (text === undefined || text === '') return zookeeperAddress(values, env);
  const origin = flag !== undefined ? '--lock-service' : 'FENCEKEEPER_LOCK_SERVICE';
  // Not WHATWG URL parsing: it refuses the host lists these URLs carry
  // (zookeeper://h1:2181,h2:2181, redlock://h1:6379,h2:6380,...).
  const match = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(text);
  if (match === null) {
    throw new UsageError(`${origin}: not a lock service URL (${JSON.stringify(text)}); expected e.g. ${Object.values(LOCK_SERVICES).map((s) => s.example).join(', ')}`);
  }
  const scheme = (match[1] as string).toLowerCase();
  const rest = match[2] as string;
  const service = Object.hasOwn(LOCK_SERVICES, scheme) ? LOCK_SERVICES[scheme] : undefined;
  if (service === undefined) {
    throw new UsageError(`${origin}: unknown lock service ${JSON.stringify(`${scheme}://`)}; known: ${Object.keys(LOCK_SERVICES).map((k) => `${k}://`).join(', ')}`);
  }
  return service.address(rest, { origin, fromCommandLine: flag !== undefined, values, env });
}
