/**
 * What fencekeeper tells operators, through node:diagnostics_channel: the
 * names below are stable (a rename is a breaking change), and every message
 * is a plain object whose fields are listed with its channel.
 *
 * Tracing channels (diagnostics_channel.tracingChannel: start, end,
 * asyncStart, asyncEnd, error) wrap one asynchronous operation each. Their
 * context object carries the fields listed, and on settling `result` or
 * `error` as Node's tracePromise sets them:
 *
 *   fencekeeper:lock:acquire      { source, lock, mode: 'wait' | 'try' }   result: the Lock (null: a try that found it taken)
 *   fencekeeper:lock:release      { source, lock, token }
 *   fencekeeper:election:campaign { source, election }                     result: the Leadership
 *   fencekeeper:fence:admit       { adapter, resource, token }             a FenceStore admission, as fencing() waits for it
 *   fencekeeper:fence:with-fence  { adapter, resource, token }             withFence: the advance, the work, the commit
 *   fencekeeper:fence:write       { adapter, operation, resource, token }  one fenced row write (update, insert, upsert, delete)
 *   fencekeeper:s3:put            { adapter, resource, token, layout }     fencedPutObject
 *   fencekeeper:s3:delete         { adapter, resource, token, layout }     fencedDeleteObject
 *   fencekeeper:effect:run        { resource, key, token }                 withEffect
 *
 * Plain channels:
 *
 *   fencekeeper:lock:held         LockHeldMessage: a grant began (a lock or a leadership)
 *   fencekeeper:lock:lost         LockEndedMessage: a grant ended other than by release (reason: a LossReason)
 *   fencekeeper:lock:released     LockEndedMessage: a grant ended by release or resignation
 *   fencekeeper:session:state     SessionStateMessage: a source's session, lease or client changed state
 *   fencekeeper:source:activity   SourceActivityMessage: what a source's session did for its queues: a lease renewal
 *                                 the server acknowledged, a waiter woken by the grant it waited for, a head waiter's
 *                                 look at its holder's lease end, entries of expired sessions reaped (postgres)
 *   fencekeeper:fence:refused     FenceRefusedMessage: a write was refused where the resource lives (a stale token,
 *                                 or another lock's sequencer or a bare token on a bound fence)
 *   fencekeeper:s3:unknown-outcome UnknownOutcomeMessage: a PUT whose outcome was lost, and how the read-back settled it
 *   fencekeeper:postgres:commit-failed  fencekeeper/postgres's CommitFailure: fenced work that did not commit, and what
 *                                 became of its fence advance (published by the adapter)
 *   fencekeeper:express:store-failed  fencekeeper/express's StoreFailedMessage: a guard's store failed and the client
 *                                 was answered in its place (500 for a setup failure such as SCHEMA_MISSING, else 503);
 *                                 carries the store's error (published by the adapter)
 *   fencekeeper:zookeeper:state   { sessionId, previous, state }: a ZooKeeper client's every state change (ClientState)
 *   fencekeeper:zookeeper:watch   { sessionId, type, path, watchers }: a watch notification delivered, with how many
 *                                 watchers it woke (a herd shows here)
 *
 * Tokens are bigint in messages (never a lossy number). `source` is a
 * LockSource kind ('zookeeper', 'redis', 'redlock', 'etcd'); `adapter` is
 * where the fence is enforced ('postgres', 's3', 'express').
 *
 * Nothing is built or published while a channel has no subscriber: each
 * helper below reads `hasSubscribers` first and otherwise calls straight
 * through, so an application that never subscribes pays a few property
 * reads per operation.
 *
 * A subscriber to a tracing channel's start event may set
 * `context[RUN_WITHIN]` to a function `(fn) => result`; the traced operation
 * then runs inside it. That is how a tracer makes its span the active one
 * for the code the operation runs (withFence's work, the effect), so spans
 * made there nest under it.
 */
import diagnostics from 'node:diagnostics_channel';
import type { TracingChannel } from 'node:diagnostics_channel';
import type { BoundLock, LossReason, SequencerMismatchError, StaleTokenError } from './errors.js';
import type { FencingToken } from './token.js';

/** The channel names, stable. */
export const CHANNELS = Object.freeze({
  lockAcquire: 'fencekeeper:lock:acquire',
  lockRelease: 'fencekeeper:lock:release',
  electionCampaign: 'fencekeeper:election:campaign',
  fenceAdmit: 'fencekeeper:fence:admit',
  fenceWithFence: 'fencekeeper:fence:with-fence',
  fenceWrite: 'fencekeeper:fence:write',
  s3Put: 'fencekeeper:s3:put',
  s3Delete: 'fencekeeper:s3:delete',
  effectRun: 'fencekeeper:effect:run',
  lockHeld: 'fencekeeper:lock:held',
  lockLost: 'fencekeeper:lock:lost',
  lockReleased: 'fencekeeper:lock:released',
  sessionState: 'fencekeeper:session:state',
  sourceActivity: 'fencekeeper:source:activity',
  fenceRefused: 'fencekeeper:fence:refused',
  s3UnknownOutcome: 'fencekeeper:s3:unknown-outcome',
  postgresCommitFailed: 'fencekeeper:postgres:commit-failed',
  expressStoreFailed: 'fencekeeper:express:store-failed',
  zookeeperState: 'fencekeeper:zookeeper:state',
  zookeeperWatch: 'fencekeeper:zookeeper:watch',
} as const);

/** The names of the tracing channels, as a subscriber iterates over them. */
export const TRACING_CHANNELS = Object.freeze([
  CHANNELS.lockAcquire,
  CHANNELS.lockRelease,
  CHANNELS.electionCampaign,
  CHANNELS.fenceAdmit,
  CHANNELS.fenceWithFence,
  CHANNELS.fenceWrite,
  CHANNELS.s3Put,
  CHANNELS.s3Delete,
  CHANNELS.effectRun,
] as const);

/**
 * The key under which a tracing subscriber puts a runner into the context of a
 * fencekeeper:* tracing channel: setting `context[RUN_WITHIN]` to a function
 * `(fn) => result` makes the traced operation run inside it, so an
 * instrumentation (OpenTelemetry's) can make its span the active one for the
 * operation's own I/O. A Symbol.for, so two copies of the package in one
 * process still understand each other.
 */
export const RUN_WITHIN: unique symbol = Symbol.for('fencekeeper.diagnostics.runWithin') as never;

/** Every tracing channel's context may carry this, and Node adds `result` / `error` as the operation settles. */
export interface TraceContext {
  /**
   * Set by a start-event subscriber (an instrumentation) to run the traced
   * operation inside its own context, e.g. an OpenTelemetry span made active.
   */
  [RUN_WITHIN]?: <T>(fn: () => T) => T;
  result?: unknown;
  error?: unknown;
}

export interface AcquireTraceContext extends TraceContext {
  readonly source: string;
  readonly lock: string;
  readonly mode: 'wait' | 'try';
}
export interface ReleaseTraceContext extends TraceContext {
  readonly source: string;
  readonly lock: string;
  readonly token: FencingToken;
}
export interface CampaignTraceContext extends TraceContext {
  readonly source: string;
  readonly election: string;
}
export interface FenceTraceContext extends TraceContext {
  readonly adapter: string;
  readonly resource: string;
  readonly token: FencingToken;
}
export interface FenceWriteTraceContext extends FenceTraceContext {
  readonly operation: 'update' | 'insert' | 'upsert' | 'delete';
}
export interface S3WriteTraceContext extends FenceTraceContext {
  readonly layout: 'in-place' | 'pointer';
}
export interface EffectTraceContext extends TraceContext {
  readonly resource: string;
  readonly key: string;
  readonly token: FencingToken;
}

/**
 * The message of `fencekeeper:lock:held`: a grant began (`source` is the
 * lock source's kind, `lock` the lock's name).
 */
export interface LockHeldMessage {
  readonly source: string;
  readonly lock: string;
  /** Absent where the source did not give the holding its token. */
  readonly token?: FencingToken;
}
/**
 * The message of `fencekeeper:lock:lost` (the grant ended other than by
 * release) and of `fencekeeper:lock:released`: why it ended and how long it was held.
 */
export interface LockEndedMessage extends LockHeldMessage {
  readonly reason: LossReason;
  /** From the grant to its end, in ms on the monotonic clock. */
  readonly heldMs: number;
  /** The LockLostError the holding's signal aborted with. */
  readonly error: Error;
}
/**
 * The message of `fencekeeper:session:state`: a lock source's session (a
 * ZooKeeper session, an etcd lease) changed state.
 */
export interface SessionStateMessage {
  readonly source: string;
  /** The session, lease or client, as its source names it (ZooKeeper: the session id in hex). */
  readonly session: string;
  /** null: the first state this session reports. */
  readonly previous: string | null;
  readonly state: string;
}
/**
 * The message of `fencekeeper:source:activity`: work a lock source's
 * session did for its queues, counted (a herd shows as many wake-ups per
 * release; a crashed holder's reaping as a reap; a stalled lease as
 * renewals that stop).
 */
export interface SourceActivityMessage {
  readonly source: string;
  /** The session, as fencekeeper:session:state names it. */
  readonly session: string;
  /**
   * renewal: the server acknowledged a lease renewal; wakeup: a waiter was
   * told of its grant (one NOTIFY); claim: a head waiter looked at its
   * holder's lease end; reap: entries of expired sessions were deleted.
   */
  readonly activity: 'renewal' | 'wakeup' | 'claim' | 'reap';
  /** How many (a reap may delete several entries at once; otherwise 1). */
  readonly count: number;
}
/**
 * The message of `fencekeeper:fence:refused`: a fenced write was refused where
 * the refusal was decided, with the token presented and the resource's mark.
 */
export interface FenceRefusedMessage {
  readonly adapter: string;
  readonly resource: string;
  /** The presented token (a sequencer's token, for a sequencer). */
  readonly presented: FencingToken;
  /** The resource's mark that refused it; null where the adapter could not read it, and for SEQUENCER_MISMATCH (the mark did not decide). */
  readonly current: FencingToken | null;
  /** Why: STALE_TOKEN (smaller than the mark) or SEQUENCER_MISMATCH (a bound fence, and another lock's sequencer or a bare token). */
  readonly code: 'STALE_TOKEN' | 'SEQUENCER_MISMATCH';
  /** SEQUENCER_MISMATCH only: the lock the fence is bound to. */
  readonly bound?: BoundLock;
  /** SEQUENCER_MISMATCH only: the lock the presented sequencer belongs to; null for a bare token. */
  readonly presentedLock?: BoundLock | null;
}
/**
 * The message of `fencekeeper:s3:unknown-outcome`: an S3 PUT whose reply was
 * lost, and how reading back settled it.
 */
export interface UnknownOutcomeMessage {
  readonly resource: string;
  readonly token: FencingToken;
  /** landed: the read-back showed our write; superseded: it showed another, so ours did not stick; unresolved: the read-back failed. */
  readonly resolution: 'landed' | 'superseded' | 'unresolved';
  /** Conditional PUTs sent by then. */
  readonly attempts: number;
}

type Traced<C extends object> = TracingChannel<unknown, C>;

const acquire = diagnostics.tracingChannel<unknown, AcquireTraceContext>(CHANNELS.lockAcquire);
const release = diagnostics.tracingChannel<unknown, ReleaseTraceContext>(CHANNELS.lockRelease);
const campaign = diagnostics.tracingChannel<unknown, CampaignTraceContext>(CHANNELS.electionCampaign);
const admit = diagnostics.tracingChannel<unknown, FenceTraceContext>(CHANNELS.fenceAdmit);
const withFenceChannel = diagnostics.tracingChannel<unknown, FenceTraceContext>(CHANNELS.fenceWithFence);
const fenceWrite = diagnostics.tracingChannel<unknown, FenceWriteTraceContext>(CHANNELS.fenceWrite);
const s3Put = diagnostics.tracingChannel<unknown, S3WriteTraceContext>(CHANNELS.s3Put);
const s3Delete = diagnostics.tracingChannel<unknown, S3WriteTraceContext>(CHANNELS.s3Delete);
const effect = diagnostics.tracingChannel<unknown, EffectTraceContext>(CHANNELS.effectRun);

const lockHeld = diagnostics.channel(CHANNELS.lockHeld);
const lockLost = diagnostics.channel(CHANNELS.lockLost);
const lockReleased = diagnostics.channel(CHANNELS.lockReleased);
const sessionState = diagnostics.channel(CHANNELS.sessionState);
const sourceActivity = diagnostics.channel(CHANNELS.sourceActivity);
const fenceRefused = diagnostics.channel(CHANNELS.fenceRefused);
const unknownOutcome = diagnostics.channel(CHANNELS.s3UnknownOutcome);

// TracingChannel#hasSubscribers is missing before Node 20.13; the five
// channels it summarizes are there on every version.
function subscribed(channel: Traced<object>): boolean {
  return (
    channel.start.hasSubscribers ||
    channel.end.hasSubscribers ||
    channel.asyncStart.hasSubscribers ||
    channel.asyncEnd.hasSubscribers ||
    channel.error.hasSubscribers
  );
}

function trace<C extends TraceContext, T>(channel: Traced<C>, context: C, fn: () => Promise<T>): Promise<T> {
  return channel.tracePromise(() => {
    const within = context[RUN_WITHIN];
    return within === undefined ? fn() : within(fn);
  }, context);
}

/** A lock acquire (mode 'try': tryAcquireLock). `source` is the LockSource kind. */
export function traceAcquire<T>(source: string, lock: string, mode: 'wait' | 'try', fn: () => Promise<T>): Promise<T> {
  if (!subscribed(acquire)) return fn();
  return trace(acquire, { source, lock, mode }, fn);
}

/**
 * Runs `fn`, a lock release, inside the `fencekeeper:lock:release` tracing
 * channel. For a lock source of your own; costs nothing without subscribers.
 */
export function traceRelease<T>(source: string, lock: string, token: FencingToken, fn: () => Promise<T>): Promise<T> {
  if (!subscribed(release)) return fn();
  return trace(release, { source, lock, token }, fn);
}

/**
 * Runs `fn`, a campaign for leadership, inside the
 * `fencekeeper:election:campaign` tracing channel. For a lock source of your own.
 */
export function traceCampaign<T>(source: string, election: string, fn: () => Promise<T>): Promise<T> {
  if (!subscribed(campaign)) return fn();
  return trace(campaign, { source, election }, fn);
}

/**
 * Whether the `fencekeeper:fence:admit` tracing channel has subscribers: a
 * guard that can admit without waiting skips its promise only when nobody
 * traces the admission (the trace is of a promise).
 */
export function admitTraced(): boolean {
  return subscribed(admit);
}

/** A FenceStore admission as a consumer of stores (fencing()) waits for it. */
export function traceAdmit<T>(adapter: string, resource: string, token: FencingToken, fn: () => Promise<T>): Promise<T> {
  if (!subscribed(admit)) return fn();
  return trace(admit, { adapter, resource, token }, fn);
}

/**
 * Runs `fn`, a whole fenced transaction, inside the
 * `fencekeeper:fence:with-fence` tracing channel. For a fence of your own.
 */
export function traceWithFence<T>(adapter: string, resource: string, token: FencingToken, fn: () => Promise<T>): Promise<T> {
  if (!subscribed(withFenceChannel)) return fn();
  return trace(withFenceChannel, { adapter, resource, token }, fn);
}

/**
 * Runs `fn`, one fenced row write, inside the `fencekeeper:fence:write`
 * tracing channel. For a fence of your own.
 */
export function traceFencedWrite<T>(adapter: string, operation: FenceWriteTraceContext['operation'], resource: string, token: FencingToken, fn: () => Promise<T>): Promise<T> {
  if (!subscribed(fenceWrite)) return fn();
  return trace(fenceWrite, { adapter, operation, resource, token }, fn);
}

/** Runs `fn`, a fenced S3 put, inside the `fencekeeper:s3:put` tracing channel. */
export function traceS3Put<T>(resource: string, token: FencingToken, layout: S3WriteTraceContext['layout'], fn: () => Promise<T>): Promise<T> {
  if (!subscribed(s3Put)) return fn();
  return trace(s3Put, { adapter: 's3', resource, token, layout }, fn);
}

/** Runs `fn`, a fenced S3 delete, inside the `fencekeeper:s3:delete` tracing channel. */
export function traceS3Delete<T>(resource: string, token: FencingToken, layout: S3WriteTraceContext['layout'], fn: () => Promise<T>): Promise<T> {
  if (!subscribed(s3Delete)) return fn();
  return trace(s3Delete, { adapter: 's3', resource, token, layout }, fn);
}

/** Runs `fn`, one withEffect call, inside the `fencekeeper:effect:run` tracing channel. */
export function traceEffect<T>(resource: string, key: string, token: FencingToken, fn: () => Promise<T>): Promise<T> {
  if (!subscribed(effect)) return fn();
  return trace(effect, { resource, key, token }, fn);
}

/**
 * Whether anyone listens to the holdings' channels (held, lost, released). A
 * source that makes its holdings lazily (when the holder first reads `held`
 * or `signal`) makes them at the grant instead while this is true, so that
 * every grant is seen, not only those whose holder looked.
 */
export function holdingsObserved(): boolean {
  return lockHeld.hasSubscribers || lockLost.hasSubscribers || lockReleased.hasSubscribers;
}

export function publishLockHeld(source: string, lock: string, token: FencingToken | undefined): void {
  if (lockHeld.hasSubscribers) lockHeld.publish(token === undefined ? { source, lock } : ({ source, lock, token } satisfies LockHeldMessage));
}

/** Whether publishLockEnded would publish for `reason` (its message carries an error, made only then). */
export function lockEndedObserved(reason: LossReason): boolean {
  return (reason === 'released' ? lockReleased : lockLost).hasSubscribers;
}

/** A grant ended: on fencekeeper:lock:released for a release, on fencekeeper:lock:lost for any other reason. */
export function publishLockEnded(source: string, lock: string, token: FencingToken | undefined, reason: LossReason, heldMs: number, error: Error): void {
  const channel = reason === 'released' ? lockReleased : lockLost;
  if (!channel.hasSubscribers) return;
  channel.publish((token === undefined ? { source, lock, reason, heldMs, error } : { source, lock, token, reason, heldMs, error }) satisfies LockEndedMessage);
}

/**
 * Publishes a session's state change on `fencekeeper:session:state` (only
 * when someone subscribes). For a lock source of your own.
 */
export function publishSessionState(source: string, session: string, previous: string | null, state: string): void {
  if (sessionState.hasSubscribers) sessionState.publish({ source, session, previous, state } satisfies SessionStateMessage);
}

/**
 * Publishes a source's activity on `fencekeeper:source:activity` (only when
 * someone subscribes; a count of 0 is not published). For a lock source of your own.
 */
export function publishSourceActivity(source: string, session: string, activity: SourceActivityMessage['activity'], count = 1): void {
  if (count > 0 && sourceActivity.hasSubscribers) sourceActivity.publish({ source, session, activity, count } satisfies SourceActivityMessage);
}

/**
 * A write refused by `adapter`: call it where the refusal is decided, once
 * per refused write. A SequencerMismatchError needs the presented token too
 * (a bare token's error does not carry it).
 */
export function publishRefused(adapter: string, error: StaleTokenError): void;
export function publishRefused(adapter: string, error: SequencerMismatchError, presented: FencingToken): void;
export function publishRefused(adapter: string, error: StaleTokenError | SequencerMismatchError, presented?: FencingToken): void {
  if (!fenceRefused.hasSubscribers) return;
  if (error.code === 'SEQUENCER_MISMATCH') {
    const mismatch = error as SequencerMismatchError;
    const lock = mismatch.presented === null ? null : { kind: mismatch.presented.kind, lock: mismatch.presented.lock, source: mismatch.presented.source };
    fenceRefused.publish({
      adapter,
      resource: mismatch.resource,
      presented: mismatch.presented?.token ?? (presented as FencingToken),
      current: null,
      code: 'SEQUENCER_MISMATCH',
      bound: mismatch.bound,
      presentedLock: lock,
    } satisfies FenceRefusedMessage);
    return;
  }
  const stale = error as StaleTokenError;
  fenceRefused.publish({ adapter, resource: stale.resource, presented: stale.presented, current: stale.current, code: 'STALE_TOKEN' } satisfies FenceRefusedMessage);
}

/**
 * Publishes on `fencekeeper:s3:unknown-outcome` how a write whose reply was
 * lost was settled. For a fence of your own.
 */
export function publishUnknownOutcome(resource: string, token: FencingToken, resolution: UnknownOutcomeMessage['resolution'], attempts: number): void {
  if (unknownOutcome.hasSubscribers) unknownOutcome.publish({ resource, token, resolution, attempts } satisfies UnknownOutcomeMessage);
}
