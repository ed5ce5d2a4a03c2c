/**
 * Every argument of the PostgreSQL source checked before the first
 * statement: a bad one is an InvalidArgumentError and nothing is sent.
 */
import { InvalidArgumentError } from '../../index.js';
import { assertLockName } from '../../extend.js';
export { checkWaitOptions, type CheckedWait } from '../../extend.js';
import type { PgSourcePool } from './client.js';

/** postgresSource's settings. */
export interface PostgresSourceOptions {
  /**
   * The session's lease in ms, measured on the database's clock: renewed
   * every third of it; when it runs out, every grant of the source ends at
   * once and waiters may take its locks. Default 10,000; 500 to 86,400,000.
   */
  readonly leaseMs?: number;
}

export const DEFAULT_LEASE_MS = 10_000;
const MIN_LEASE_MS = 500;
const MAX_LEASE_MS = 86_400_000;

export function checkPool(pool: unknown): asserts pool is PgSourcePool {
  const p = pool as Partial<PgSourcePool> | null;
  if (p === null || typeof p !== 'object' || typeof p.connect !== 'function' || typeof p.query !== 'function') {
    throw new InvalidArgumentError('postgresSource takes a pg.Pool (new pg.Pool({ connectionString })): it keeps one of its connections for LISTEN and the heartbeat');
  }
  // The source keeps one connection checked out for as long as it is open:
  // a pool of one would have none left for the grants themselves.
  const max = p.options?.max;
  if (typeof max === 'number' && max < 2) {
    throw new InvalidArgumentError(`postgresSource keeps one connection of the pool for itself: the pool needs max >= 2, got ${max}`);
  }
}

export function checkSourceOptions(options: unknown): { readonly leaseMs: number } {
  if (options === undefined) return { leaseMs: DEFAULT_LEASE_MS };
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('postgresSource options must be an object');
  const { leaseMs } = options as { leaseMs?: unknown };
  if (leaseMs === undefined) return { leaseMs: DEFAULT_LEASE_MS };
  if (typeof leaseMs !== 'number' || !Number.isInteger(leaseMs) || leaseMs < MIN_LEASE_MS || leaseMs > MAX_LEASE_MS) {
    throw new InvalidArgumentError(`leaseMs must be a whole number of ms in [${MIN_LEASE_MS}, ${MAX_LEASE_MS}], got ${String(leaseMs)}`);
  }
  return { leaseMs };
}

/** A lock or election name: the one rule every source checks (well-formed Unicode, no NUL, at most 1024 characters). */
export function checkName(name: unknown): asserts name is string {
  assertLockName(name);
}


/** The most permits a semaphore may have (PermitOptions.permits), as on the other sources. */
export const MAX_PERMITS = 1024;

/** acquirePermit's `permits`: an integer from 1 to MAX_PERMITS (else InvalidArgumentError, nothing sent). */
export function checkPermits(options: unknown): number {
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('acquirePermit needs options with permits: { permits: N }');
  const permits = (options as { permits?: unknown }).permits;
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
    throw new InvalidArgumentError(`permits must be an integer from 1 to ${MAX_PERMITS}, got ${String(permits)}`);
  }
  return permits;
}
