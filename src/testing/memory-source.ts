/**
 * memorySource(): a LockSource that lives in one process, for unit tests of
 * code written against LockSource when no lock server runs. NEVER for
 * production: its locks exclude only callers of the same instance in the
 * same process; another process (or another instance) shares nothing.
 *
 * It implements the whole contract, with the same rules as the queueing
 * sources: plain locks (FIFO), try-forms, elections, lockStatus and
 * observeLock, read-write locks (FIFO, a waiting writer holds back readers
 * that arrive after it), and N-permit semaphores (a slot per permit, the
 * token taken when the slot is claimed). Tokens come from one counter per
 * instance, so every grant's token is larger than every grant before it
 * that it conflicts with; per permit slot, tokens strictly increase.
 *
 * Each instance is its own world, and has two controls a test needs:
 *   expire(name)  ends every current grant of that name as a session expiry
 *                 would: held false, signal aborted with LockLostError
 *                 ('session_expired'), the next waiters granted (larger tokens);
 *   advance(ms)   moves its clock forward with no renewal: grants step down
 *                 (reason 'deadline') once it has moved past their TTL less
 *                 their safety margin, and end at their TTL (the next waiters
 *                 are granted); waiters' timeouts pass too.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { InvalidArgumentError, LockLostError, LockTimeoutError, PermitsMismatchError, type LossReason } from '../errors.js';
import { DEFAULT_OWNER, type AcquireOptions, type CampaignOptions, type Leadership, type Lock, type Permit, type PermitOptions, type TryAcquireOptions, type TryPermitOptions } from '../lock.js';
import type { LockObserver, LockSource, LockStatus, LockStatusEntry } from '../lock-source.js';
import { assertLockName, sequencer, type Sequencer, type SequencerKind, type SourceIdentity } from '../sequencer.js';
import type { FencingToken } from '../token.js';

/** memorySource's settings. */
export interface MemorySourceOptions {
  /** How long a grant lives without renewal, on the source's clock (advance() moves it). Default 10000 ms. */
  readonly ttlMs?: number;
}

/** A LockSource in one process, for tests: every optional method, and the controls expire() and advance(). */
export interface MemorySource extends LockSource {
  readonly kind: 'memory';
  acquireReadLock(name: string, options?: AcquireOptions): Promise<Lock>;
  tryAcquireReadLock(name: string, options?: TryAcquireOptions): Promise<Lock | null>;
  acquireWriteLock(name: string, options?: AcquireOptions): Promise<Lock>;
  tryAcquireWriteLock(name: string, options?: TryAcquireOptions): Promise<Lock | null>;
  acquirePermit(name: string, options: PermitOptions): Promise<Permit>;
  tryAcquirePermit(name: string, options: TryPermitOptions): Promise<Permit | null>;
  campaign(name: string, options?: CampaignOptions): Promise<Leadership>;
  lockStatus(name: string): Promise<LockStatus>;
  observeLock(name: string): LockObserver;
  identity(): Promise<SourceIdentity>;
  /** End every current grant of `name` (plain, read, write, permit, election) as a session expiry would; the next waiters are granted. */
  expire(name: string): void;
  /** Move the source's clock `ms` forward with no renewal: grants past their TTL (less margin) step down, past their TTL end; waiters' timeouts pass. */
  advance(ms: number): void;
}

type EntryKind = 'lock' | 'read' | 'write' | 'permit' | 'election';
type Space = 'lock' | 'rw' | 'permit' | 'election';

const SPACE: Record<EntryKind, Space> = { lock: 'lock', read: 'rw', write: 'rw', permit: 'permit', election: 'election' };

/** One waiter or holder in a queue. */
interface Entry {
  readonly kind: EntryKind;
  readonly owner: string;
  /** Its place in the queue (and, but for a permit, its token). */
  readonly joined: FencingToken;
  readonly marginMs: number;
  grant: Grant | null;
  /** Called once when granted (resolves the acquire). */
  granted: ((grant: Grant) => void) | null;
}

class Queue {
  readonly entries: Entry[] = [];
  readonly listeners = new Set<() => void>();
  /** A semaphore's size while anyone holds or waits. */
  permits: number | null = null;
  /** A semaphore's slots: who holds each. */
  slots: (Entry | null)[] = [];

  constructor(readonly space: Space, readonly name: string) {}

  changed(): void {
    for (const listener of [...this.listeners]) listener();
  }
}

let instances = 0;

/** A grant of the memory source: a lock, a read or write lock, a permit, or a leadership. */
abstract class Grant {
  readonly name: string;
  readonly token: FencingToken;
  readonly #source: MemoryWorld;
  readonly #entry: Entry;
  readonly #queue: Queue;
  readonly #controller = new AbortController();
  readonly #grantedAt: number;
  readonly #seqKind: SequencerKind;
  readonly #seqName: string;
  #ended: LossReason | null = null;
  #endedAt = 0;
  #sequencer: Sequencer | null = null;

  constructor(world: MemoryWorld, queue: Queue, entry: Entry, token: FencingToken, seqKind: SequencerKind, seqName: string) {
    this.#source = world;
    this.#queue = queue;
    this.#entry = entry;
    this.name = queue.name;
    this.token = token;
    this.#grantedAt = world.clock;
    this.#seqKind = seqKind;
    this.#seqName = seqName;
  }

  /** The source's clock moved this far since the grant, with no renewal. */
  get #elapsed(): number {
    return this.#source.clock - this.#grantedAt;
  }

  get held(): boolean {
    return this.#ended === null && this.#elapsed < this.#source.ttlMs - this.#entry.marginMs;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Renewed continuously in real time: the step-down instant is the TTL less the margin less what advance() skipped, from now. */
  get deadline(): number {
    if (this.#ended !== null) return this.#endedAt;
    return performance.now() + this.#source.ttlMs - this.#entry.marginMs - this.#elapsed;
  }

  get sequencer(): Sequencer {
    return (this.#sequencer ??= sequencer({ kind: this.#seqKind, name: this.#seqName, source: this.#source.identity, token: this.token }));
  }

  /** Step down: held false, signal aborted (once). */
  stepDown(reason: LossReason): void {
    if (this.#ended !== null) return;
    this.#ended = reason;
    this.#endedAt = performance.now();
    this.#controller.abort(new LockLostError(this.#seqKind === 'election' ? `election ${this.name}` : this.name, reason));
  }

  /** Step down and leave the queue (the next waiters are granted). */
  end(reason: LossReason): void {
    this.stepDown(reason);
    this.#source.leave(this.#queue, this.#entry);
  }

  /** advance(): step down past the TTL less margin, end past the TTL. */
  aged(): void {
    if (this.#elapsed >= this.#source.ttlMs) this.end('session_expired');
    else if (this.#elapsed >= this.#source.ttlMs - this.#entry.marginMs) this.stepDown('deadline');
  }

  protected leave(): Promise<void> {
    this.end('released');
    return Promise.resolve();
  }
}

class MemoryLock extends Grant implements Permit {
  readonly slot: number;
  readonly permits: number;

  constructor(world: MemoryWorld, queue: Queue, entry: Entry, token: FencingToken, slot = 0, permits = 1) {
    const kind = entry.kind as 'lock' | 'read' | 'write' | 'permit';
    super(world, queue, entry, token, kind, kind === 'permit' ? `${queue.name}#${slot}` : queue.name);
    this.slot = slot;
    this.permits = permits;
  }

  release(): Promise<void> {
    return this.leave();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.leave();
  }
}

class MemoryLeadership extends Grant implements Leadership {
  get epoch(): FencingToken {
    return this.token;
  }

  resign(): Promise<void> {
    return this.leave();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.leave();
  }
}

/** What an acquire's options come to, checked: `marginMs` -1 when none was given (a quarter of the TTL then). */
interface Checked {
  readonly signal: AbortSignal | undefined;
  readonly timeoutMs: number | undefined;
  readonly marginMs: number;
  readonly owner: string;
}

/** Check what every acquire takes (`wait`: its timeoutMs too; otherwise a timeoutMs is not taken). */
function checkOptions(options: unknown, wait: boolean): Checked {
  if (options !== undefined && (typeof options !== 'object' || options === null)) throw new InvalidArgumentError('options must be an object');
  const o = (options ?? {}) as Record<string, unknown>;
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new InvalidArgumentError('signal must be an AbortSignal');
  if (wait && o.timeoutMs !== undefined && (typeof o.timeoutMs !== 'number' || !Number.isFinite(o.timeoutMs) || o.timeoutMs < 0)) {
    throw new InvalidArgumentError(`timeoutMs must be a non-negative number, got ${String(o.timeoutMs)}`);
  }
  if (o.safetyMarginMs !== undefined && (typeof o.safetyMarginMs !== 'number' || !Number.isFinite(o.safetyMarginMs) || o.safetyMarginMs < 0)) {
    throw new InvalidArgumentError(`safetyMarginMs must be a non-negative number, got ${String(o.safetyMarginMs)}`);
  }
  const owner = o.owner ?? o.id ?? DEFAULT_OWNER;
  if (typeof owner !== 'string' || owner.length === 0) throw new InvalidArgumentError('owner must be a non-empty string');
  return {
    signal: o.signal as AbortSignal | undefined,
    timeoutMs: wait ? (o.timeoutMs as number | undefined) : undefined,
    marginMs: (o.safetyMarginMs as number | undefined) ?? -1,
    owner,
  };
}

function checkPermits(options: unknown): number {
  const permits = (options as { permits?: unknown } | undefined)?.permits;
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1 || permits > 1024) {
    throw new InvalidArgumentError(`permits must be an integer from 1 to 1024, got ${String(permits)}`);
  }
  return permits;
}

/** One memory source's state: its queues, its token counter and its clock. */
class MemoryWorld {
  readonly identity: SourceIdentity = Object.freeze({ kind: 'memory', id: randomUUID() });
  readonly ttlMs: number;
  /** The source's clock: how far advance() has moved it (real time is always renewed). */
  clock = 0;
  #counter = 0n;
  readonly #queues = new Map<string, Queue>();
  /** Waiters' timeouts on the source's clock, checked by advance(). */
  readonly timeouts = new Set<{ at: number; fire: () => void }>();

  constructor(ttlMs: number) {
    this.ttlMs = ttlMs;
  }

  next(): FencingToken {
    return ++this.#counter;
  }

  queue(space: Space, name: string): Queue {
    const key = `${space}\0${name}`;
    let queue = this.#queues.get(key);
    if (queue === undefined) this.#queues.set(key, (queue = new Queue(space, name)));
    return queue;
  }

  peek(space: Space, name: string): Queue | undefined {
    return this.#queues.get(`${space}\0${name}`);
  }

  queues(): IterableIterator<Queue> {
    return this.#queues.values();
  }

  leave(queue: Queue, entry: Entry): void {
    const at = queue.entries.indexOf(entry);
    if (at === -1) return;
    queue.entries.splice(at, 1);
    const slot = queue.slots.indexOf(entry);
    if (slot !== -1) queue.slots[slot] = null;
    if (queue.entries.length === 0) {
      queue.permits = null;
      queue.slots = [];
    }
    this.pump(queue);
    queue.changed();
  }

  /** Grant every waiter the queue's rule lets in, in arrival order. */
  pump(queue: Queue): void {
    for (let i = 0; i < queue.entries.length; i++) {
      const entry = queue.entries[i] as Entry;
      if (queue.space === 'permit') {
        if (entry.grant !== null) continue;
        const slot = queue.slots.indexOf(null);
        if (slot === -1) break;
        queue.slots[slot] = entry;
        this.#grant(queue, entry, new MemoryLock(this, queue, entry, this.next(), slot, queue.permits as number));
        continue;
      }
      if (queue.space === 'rw') {
        // A writer is granted at the head only, and everyone behind it waits (no writer starvation).
        if (entry.kind === 'write') {
          if (i === 0 && entry.grant === null) this.#grant(queue, entry, new MemoryLock(this, queue, entry, entry.joined));
          break;
        }
        if (entry.grant === null) this.#grant(queue, entry, new MemoryLock(this, queue, entry, entry.joined));
        continue;
      }
      // A plain lock or an election: the head holds.
      if (entry.grant === null) {
        this.#grant(queue, entry, entry.kind === 'election' ? new MemoryLeadership(this, queue, entry, entry.joined, 'election', queue.name) : new MemoryLock(this, queue, entry, entry.joined));
      }
      break;
    }
  }

  #grant(queue: Queue, entry: Entry, grant: Grant): void {
    entry.grant = grant;
    const granted = entry.granted;
    entry.granted = null;
    granted?.(grant);
    queue.changed();
  }
}

/**
 * A LockSource in this process, for your unit tests: locks, try-forms,
 * elections, lockStatus / observeLock, read-write locks and permits, with
 * expire(name) and advance(ms) to make a test's grants end. Never for
 * production: it excludes nothing outside this instance in this process.
 */
export function memorySource(options: MemorySourceOptions = {}): MemorySource {
  const ttlMs = options.ttlMs ?? 10_000;
  if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs) || ttlMs <= 0) throw new InvalidArgumentError(`memorySource(): ttlMs must be a positive number, got ${String(ttlMs)}`);
  const world = new MemoryWorld(ttlMs);
  const n = ++instances;

  /** Join `queue` (`kind`), wait (or not) and resolve with the grant; leave nothing behind on any other way out. */
  function join(queue: Queue, kind: EntryKind, checked: Checked, wait: boolean): Promise<Grant | null> {
    const marginMs = checked.marginMs >= 0 ? Math.min(checked.marginMs, ttlMs) : ttlMs / 4;
    if (checked.signal?.aborted) return Promise.reject(checked.signal.reason);
    const entry: Entry = { kind, owner: checked.owner, joined: world.next(), marginMs, grant: null, granted: null };
    queue.entries.push(entry);
    world.pump(queue);
    if (entry.grant !== null) return Promise.resolve(entry.grant);
    if (!wait) {
      world.leave(queue, entry);
      return Promise.resolve(null);
    }
    queue.changed();
    return new Promise<Grant>((resolve, reject) => {
      const signal = checked.signal;
      let timer: NodeJS.Timeout | undefined;
      let timeout: { at: number; fire: () => void } | undefined;
      const done = (): void => {
        signal?.removeEventListener('abort', onAbort);
        clearTimeout(timer);
        if (timeout !== undefined) world.timeouts.delete(timeout);
      };
      const giveUp = (error: unknown): void => {
        done();
        entry.granted = null;
        world.leave(queue, entry);
        reject(error);
      };
      const onAbort = (): void => giveUp(signal?.reason);
      entry.granted = (grant) => {
        done();
        resolve(grant);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (checked.timeoutMs !== undefined) {
        const limit = checked.timeoutMs;
        const fire = (): void => giveUp(new LockTimeoutError(queue.name, limit));
        timeout = { at: world.clock + limit, fire };
        world.timeouts.add(timeout);
        timer = setTimeout(fire, limit);
        timer.unref();
      }
    });
  }

  function lockFn(kind: 'lock' | 'read' | 'write', wait: boolean) {
    return async (name: string, options?: AcquireOptions): Promise<Lock | null> => {
      assertLockName(name);
      const checked = checkOptions(options, wait);
      return (await join(world.queue(SPACE[kind], name), kind, checked, wait)) as MemoryLock | null;
    };
  }

  function permitFn(wait: boolean) {
    return async (name: string, options: PermitOptions | TryPermitOptions): Promise<Permit | null> => {
      assertLockName(name);
      const permits = checkPermits(options);
      const checked = checkOptions(options, wait);
      const queue = world.queue('permit', name);
      if (queue.permits !== null && queue.permits !== permits) throw new PermitsMismatchError(name, permits, queue.permits);
      if (queue.permits === null) {
        queue.permits = permits;
        queue.slots = Array.from({ length: permits }, () => null);
      }
      return (await join(queue, 'permit', checked, wait)) as MemoryLock | null;
    };
  }

  const entryOf = (entry: Entry): LockStatusEntry => ({ token: entry.joined, owner: entry.owner });

  const source: MemorySource = {
    kind: 'memory',
    description: `memory #${n} (one process, for tests)`,
    acquireLock: lockFn('lock', true) as MemorySource['acquireLock'],
    tryAcquireLock: lockFn('lock', false),
    acquireReadLock: lockFn('read', true) as MemorySource['acquireReadLock'],
    tryAcquireReadLock: lockFn('read', false),
    acquireWriteLock: lockFn('write', true) as MemorySource['acquireWriteLock'],
    tryAcquireWriteLock: lockFn('write', false),
    acquirePermit: permitFn(true) as MemorySource['acquirePermit'],
    tryAcquirePermit: permitFn(false),
    async campaign(name, options) {
      assertLockName(name);
      // A campaign waits without a timeout (its signal stops it).
      return (await join(world.queue('election', name), 'election', checkOptions(options, false), true)) as MemoryLeadership;
    },
    async lockStatus(name) {
      assertLockName(name);
      const entries = world.peek('lock', name)?.entries ?? [];
      const head = entries[0];
      const holder = head !== undefined && head.grant !== null ? entryOf(head) : null;
      return { name, holder, waiters: entries.slice(holder === null ? 0 : 1).map(entryOf) };
    },
    observeLock(name) {
      assertLockName(name);
      const queue = world.queue('lock', name);
      const listeners = new Set<() => void>();
      const notify = (): void => {
        for (const listener of [...listeners]) listener();
      };
      queue.listeners.add(notify);
      const observer: LockObserver = {
        holder: async () => (await source.lockStatus(name)).holder,
        queue: async () => queue.entries.map(entryOf),
        onChange(listener) {
          listeners.add(listener);
          return () => void listeners.delete(listener);
        },
        close() {
          listeners.clear();
          queue.listeners.delete(notify);
        },
      };
      return observer;
    },
    async identity() {
      return world.identity;
    },
    expire(name) {
      assertLockName(name);
      for (const queue of [...world.queues()]) {
        if (queue.name !== name) continue;
        // The grants of now only: those it lets in next are new grants, with larger tokens.
        const current = queue.entries.flatMap((entry) => (entry.grant === null ? [] : [entry.grant]));
        for (const grant of current) grant.end('session_expired');
      }
    },
    advance(ms) {
      if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) throw new InvalidArgumentError(`advance(): ms must be a non-negative number, got ${String(ms)}`);
      world.clock += ms;
      for (const queue of [...world.queues()]) {
        for (const entry of [...queue.entries]) entry.grant?.aged();
      }
      for (const timeout of [...world.timeouts]) if (timeout.at <= world.clock) timeout.fire();
    },
  };
  return Object.freeze(source);
}
