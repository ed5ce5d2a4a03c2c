/**
 * A command's holding from any LockSource: the lock (or the leadership) as
 * the commands use it (../lock-service.ts Holding). One place for every
 * source, so `run` and `elect` behave the same whichever service granted.
 */
import type { LockSource } from '../../index.js';
import { UsageError } from '../args.js';
import type { Holding, HoldOptions, Kind } from '../lock-service.js';

/** Acquire `name` from `source` (campaign for it, for an election); errors pass through for the caller to classify. */
export async function holdFrom(source: LockSource, kind: Kind, name: string, options: HoldOptions, description: string): Promise<Holding> {
  const common = { safetyMarginMs: options.safetyMarginMs, ...(options.signal !== undefined && { signal: options.signal }) };
  if (kind === 'election') {
    if (source.campaign === undefined) throw new UsageError(`${description} has no elections`);
    const leadership = await source.campaign(name, { ...common, ...(options.id !== undefined && { id: options.id }) });
    return {
      token: leadership.epoch,
      get held() {
        return leadership.held;
      },
      signal: leadership.signal,
      deadline: () => leadership.deadline,
      end: () => leadership.resign(),
    };
  }
  const lock = await source.acquireLock(name, {
    ...common,
    ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
    ...(options.owner !== undefined && { owner: options.owner }),
  });
  return {
    token: lock.token,
    get held() {
      return lock.held;
    },
    signal: lock.signal,
    deadline: () => lock.deadline,
    end: () => lock.release(),
  };
}
