/**
 * A LockService (../lock-service.ts) from any LockSource: the holding a
 * command runs under, the queue `status` lists, the safety margin, one way
 * for every source. A source's file supplies only what is its own: how long
 * its grants last, which of its errors mean "unreachable", how its queue
 * entries read, and (where it can push changes) watchQueue.
 */
import { InvalidArgumentError, type FencingToken, type Lock, type LockSource, type LockStatus, type LockStatusEntry } from '../../index.js';
import { safetyMargin } from '../../extend.js';
import { UsageError } from '../args.js';
import type { Holding, HoldOptions, Kind, LockService, QueueEntry, QueueEvent } from '../lock-service.js';

export interface ServiceParts<Entry extends LockStatusEntry> {
  readonly source: LockSource & { lockStatus(name: string): Promise<LockStatus<Entry>> };
  /** For messages: 'ZooKeeper', 'Redis at h:p'. */
  readonly description: string;
  /** The grant's lifetime without renewals (the negotiated session timeout, a key's or lease's TTL). */
  grantMs(): number;
  /** The source's errors that mean the service cannot be reached, as UnreachableError; anything else unchanged. */
  unreachable(error: unknown): unknown;
  /** The queue in grant order (holder first) as the commands show it. */
  entries(queue: readonly Entry[]): QueueEntry[];
  readonly watchQueue?: LockService['watchQueue'];
  /** The durability settings a source's lockStatus reports beside the queue (LockService.durability), by name. */
  durability?(status: LockStatus<Entry>): Readonly<Record<string, string>>;
  close(): Promise<void>;
}

export function serviceOf<Entry extends LockStatusEntry>(parts: ServiceParts<Entry>): LockService {
  const { source, description } = parts;
  return {
    get sessionTimeoutMs() {
      return parts.grantMs();
    },
    safetyMargin(requested) {
      try {
        return safetyMargin(parts.grantMs(), requested);
      } catch (error) {
        if (error instanceof InvalidArgumentError) throw new UsageError(`--safety-margin ${String(requested)}: ${error.message}`);
        throw error;
      }
    },
    async hold(kind, name, options) {
      if (kind === 'election' && source.campaign === undefined) throw new UsageError(`${description} has no elections`);
      try {
        return await holdFrom(source, kind, name, options);
      } catch (error) {
        throw parts.unreachable(error);
      }
    },
    async queue(name) {
      try {
        const { holder, waiters } = (await source.lockStatus(name)) as LockStatus<Entry>;
        return parts.entries(holder === null ? waiters : [holder, ...waiters]);
      } catch (error) {
        throw parts.unreachable(error);
      }
    },
    ...(parts.watchQueue !== undefined && { watchQueue: parts.watchQueue }),
    ...(parts.durability !== undefined && {
      durability: async (name: string) => {
        try {
          return (parts.durability as NonNullable<ServiceParts<Entry>['durability']>)((await source.lockStatus(name)) as LockStatus<Entry>);
        } catch (error) {
          throw parts.unreachable(error);
        }
      },
    }),
    close: () => parts.close(),
  };
}

/** Acquire `name` from `source` (campaign for it, for an election); errors pass through for the caller to classify. */
async function holdFrom(source: LockSource, kind: Kind, name: string, options: HoldOptions): Promise<Holding> {
  const common = { safetyMarginMs: options.safetyMarginMs, ...(options.signal !== undefined && { signal: options.signal }) };
  if (kind === 'election') {
    const leadership = await (source.campaign as NonNullable<LockSource['campaign']>)(name, { ...common, ...(options.id !== undefined && { id: options.id }) });
    return holding(leadership, leadership.epoch, () => leadership.resign());
  }
  const lock = await source.acquireLock(name, {
    ...common,
    ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
    ...(options.owner !== undefined && { owner: options.owner }),
    // Only for a source whose address has lockDelay (run checks): ZooKeeper's acquireLock takes it.
    ...(options.lockDelayMs !== undefined && { lockDelayMs: options.lockDelayMs }),
  });
  return holding(lock, lock.token, () => lock.release());
}

/** A lock or a leadership as the CLI's Holding: `held` and `deadline` read live from `grant`, `end` gives it up. */
function holding(grant: Pick<Lock, 'held' | 'signal' | 'deadline' | 'sequencer'>, token: FencingToken, end: () => Promise<void>): Holding {
  return {
    token,
    sequencer: grant.sequencer,
    get held() {
      return grant.held;
    },
    signal: grant.signal,
    deadline: () => grant.deadline,
    end,
  };
}

/** What followQueue's `failed` answers for an error that only needs the read sent again. */
export const READ_AGAIN = Symbol('read again');

/**
 * The loop behind every source's `status --watch`. `start` hooks the
 * source's change feed before the first read: it calls `changed()` on every
 * change it is told of and `end(error)` once it can watch no more, and
 * returns how to unhook. The loop reads the queue again after each change
 * (`read` gets `changed` too, for a source that arms a watch with each read)
 * and shows it only when it differs from the last one shown: a change that
 * came and went between two reads shows nothing. `failed` maps a read's
 * error to the one to throw, or READ_AGAIN.
 */
export async function followQueue(
  start: (changed: () => void, end: (error: unknown) => void) => (() => void) | Promise<() => void>,
  read: (changed: () => void) => Promise<QueueEntry[]>,
  failed: (error: unknown) => unknown,
  onChange: (event: QueueEvent) => void,
  signal: AbortSignal,
): Promise<void> {
  let changed = true;
  let ended: { readonly error: unknown } | null = null;
  let wake: (() => void) | null = null;
  const poke = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  const onChanged = (): void => {
    changed = true;
    poke();
  };
  const started = Promise.resolve(
    start(onChanged, (error) => {
      ended ??= { error };
      poke();
    }),
  );
  // Stopped while the feed is still being hooked (a node that takes the
  // connection and answers nothing): end now, and unhook once it is hooked.
  const first = await new Promise<{ readonly stop: () => void } | 'aborted'>((resolve, reject) => {
    const onAbort = (): void => resolve('aborted');
    signal.addEventListener('abort', onAbort, { once: true });
    if (signal.aborted) onAbort();
    started.then(
      (stop) => resolve({ stop }),
      (error: unknown) => reject(error),
    ).finally(() => signal.removeEventListener('abort', onAbort));
  }).catch((error: unknown) => {
    if (signal.aborted) return 'aborted' as const;
    throw error;
  });
  if (first === 'aborted') {
    started.then((stop) => stop(), () => undefined);
    return;
  }
  const { stop } = first;
  signal.addEventListener('abort', poke);
  try {
    let shown: string | undefined;
    for (;;) {
      if (signal.aborted) return;
      if (ended !== null) throw (ended as { readonly error: unknown }).error;
      if (!changed) {
        await new Promise<void>((resolve) => (wake = resolve));
        continue;
      }
      changed = false;
      let queue: QueueEntry[];
      try {
        queue = await read(onChanged);
      } catch (error) {
        if (signal.aborted) return;
        const verdict = failed(error);
        if (verdict === READ_AGAIN) {
          changed = true;
          continue;
        }
        throw verdict;
      }
      const key = JSON.stringify(queue, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
      if (key === shown) continue;
      shown = key;
      onChange({ type: 'queue', entries: queue });
    }
  } finally {
    signal.removeEventListener('abort', poke);
    stop();
  }
}
