/**
 * The options every acquire and campaign of a queueing source takes
 * (AcquireOptions, TryAcquireOptions, CampaignOptions), checked for type and
 * range before the first request: a bad one is an InvalidArgumentError and
 * nothing is sent. Written once for the sources that queue (etcd, PostgreSQL).
 */
import { InvalidArgumentError } from './errors.js';

/** The options of one acquire or campaign, checked. */
export interface CheckedWait {
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  /** AcquireOptions.owner or CampaignOptions.id, whichever the call takes. */
  readonly owner: string | undefined;
  readonly safetyMarginMs: number | undefined;
}

/**
 * Check `options` (undefined, or an object) of an acquire (`ownerField`
 * 'owner') or a campaign ('id'). `allowTimeout` false: a try-acquire, which
 * never waits, so a `timeoutMs` is refused rather than ignored. The owner is
 * a string without NUL, the rule of lock names (a database text column
 * cannot hold NUL, and one rule for every source keeps owners portable).
 */
export function checkWaitOptions(options: unknown, allowTimeout: boolean, ownerField: 'owner' | 'id'): CheckedWait {
  if (options === undefined) return { signal: undefined, timeoutMs: undefined, owner: undefined, safetyMarginMs: undefined };
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options must be an object');
  const o = options as Record<string, unknown>;
  const { signal, timeoutMs, safetyMarginMs } = o;
  const owner = o[ownerField];
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new InvalidArgumentError('signal must be an AbortSignal');
  if (timeoutMs !== undefined) {
    if (!allowTimeout) throw new InvalidArgumentError('tryAcquireLock never waits: it takes no timeoutMs');
    if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs < 0) {
      throw new InvalidArgumentError(`timeoutMs must be a non-negative number, got ${String(timeoutMs)}`);
    }
  }
  if (owner !== undefined && (typeof owner !== 'string' || owner.includes('\0'))) throw new InvalidArgumentError(`${ownerField} must be a string without NUL`);
  if (safetyMarginMs !== undefined && (typeof safetyMarginMs !== 'number' || !Number.isFinite(safetyMarginMs) || safetyMarginMs < 0)) {
    throw new InvalidArgumentError(`safetyMarginMs must be a non-negative number, got ${String(safetyMarginMs)}`);
  }
  return {
    signal: signal as AbortSignal | undefined,
    timeoutMs: timeoutMs as number | undefined,
    owner: owner as string | undefined,
    safetyMarginMs: safetyMarginMs as number | undefined,
  };
}
