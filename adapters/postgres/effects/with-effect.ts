// withEffect(): side effects on systems that cannot check a fencing token (a
// payment API, an SMTP server), made exactly-once-or-reconciled by a ledger
// kept under the resource's fence.
//
// The story of one call, each numbered step a fenced transaction on the
// resource (the same fence row as withFence(): a holder whose token is stale
// is refused there, and nothing it asked for is recorded):
//
// 1. Claim. Look the effect up in fencekeeper_effects:
//    - absent: record it pending, with our token and our deadline, and commit;
//    - succeeded: answer the recorded result (the effect does not run again);
//    - failed: throw the recorded failure (EffectFailedError), or with
//      retryFailed record a new attempt pending, under a new idempotency key;
//    - pending: an earlier holder (or an earlier call of ours) recorded the
//      intent and never its outcome: it paused or died in between, and its
//      call may even still be on its way. Only the outside system can say
//      what happened: options.reconcile asks it, and its answer is recorded
//      (3). Without reconcile: EffectPendingError, not retryable.
// 2. Run the effect outside any transaction, with the idempotency key of its
//    attempt (the same for every holder and retry, so an API that
//    deduplicates by Idempotency-Key carries it out once), its deadline as a
//    wall-clock Date (to hand to the outside system, which refuses a call
//    arriving after it) and a signal that aborts at that deadline.
// 3. Record the outcome: succeeded (with the result as JSON), failed (only a
//    DefiniteFailure: the effect says the outside system refused it), or,
//    for anything else the effect throws (a timeout, a reset, a 5xx: the
//    call may have been carried out), nothing: it stays pending. If a newer
//    holder has taken the resource meanwhile, the record is refused with
//    StaleTokenError: the effect happened, and the newer holder finds it
//    pending and reconciles.
//
// Why a deadline, and why on the wall clock. Against a service that
// deduplicates by key, reconcile may simply send the call again with the same
// key. Against one that does not, only a "did key K happen?" query can tell,
// and its "no" is worth something only once the earlier call can no longer
// land: the earlier holder's request may be sitting in a socket buffer while
// its process is frozen. So every pending record carries the instant after
// which the service refuses the call, and a "not happened" answer is trusted
// only after it, plus graceMs. That instant crosses processes (the holder,
// the service, a successor), so it is a wall-clock time; inside the holder
// it is derived from the lock's step-down deadline (performance.now(),
// monotonic, immune to clock steps). graceMs must cover the clock difference
// between the service and the reconciling machine (NTP keeps well-run hosts
// within milliseconds to tens of milliseconds of each other; the default,
// 1000 ms, leaves a wide margin) plus the time the service may still spend
// carrying out a call it accepted just before the deadline.
import { setTimeout as sleep } from 'node:timers/promises';
import { debuglog } from 'node:util';
import { EffectFailedError, EffectPendingError, InvalidArgumentError, LockLostError, StaleTokenError, resolveFencing, type Fencing, type FencingToken, type Sequencer } from '../../../src/index.js';
import { traceEffect } from '../../../src/extend.js';
import type { Database } from '../database.js';
import {
  MAX_INT32,
  checkDatabase,
  checkEffectKey,
  checkEffectResource,
  checkObject,
  effectIdempotencyKey,
  optionalBoolean,
  optionalFunction,
  optionalInstant,
  optionalInteger,
  optionalSignal,
} from './input.js';
import { claimEffect, readEffect, recordPendingAgain, settleEffect, type RecordedEffect, type Settlement } from './ledger.js';
import { DefiniteFailure, storeFailure, storeResult } from './outcome.js';
import { describe } from '../identifiers.js';
import { withFence } from '../fence/with-fence.js';
import { fenceAdvances, refuseCheckOnly } from '../../../src/extend.js';

const debug = debuglog('fencekeeper');

/** Which effect: one action of the caller's (`key`), fenced on `resource` with the holder's `token`. */
export interface EffectTarget {
  readonly resource: string;
  /**
   * Where the token goes: a bare token, a Sequencer, the Lock or Leadership
   * itself, or CURRENT_LOCK. A grant whose `held` is false is refused with
   * LockLostError before anything is sent; the check is made once, when the
   * call starts, so an effect that ran is still recorded under the fence if
   * the lock is lost while it runs (the fence refuses that record once a
   * later holder has advanced it).
   */
  readonly token: Fencing;
  /** The caller's name for this action (an order id, a message id): at most 1024 characters. */
  readonly key: string;
}

/** What the effect gets. */
export interface EffectContext {
  /** Send it as the Idempotency-Key (or the API's own field): the same for every holder and retry of this attempt. */
  readonly idempotencyKey: string;
  readonly attempt: number;
  /**
   * The instant after which the outside system must refuse this call (a
   * request-deadline header it checks), on the wall clock; null when
   * withEffect was given no deadline.
   */
  readonly deadline: Date | null;
  /** Aborts at the deadline (LockLostError, reason 'deadline') and when options.signal aborts. */
  readonly signal: AbortSignal;
}

/** What a reconcile found out about a pending effect. */
export type Reconciled<R> =
  /** It happened (an API that deduplicates answered the re-sent call; a lookup found it). */
  | { readonly outcome: 'succeeded'; readonly result?: R }
  /** It definitely did not happen and was refused; recorded as failed. */
  | { readonly outcome: 'failed'; readonly message: string; readonly details?: unknown }
  /**
   * It did not happen and cannot happen any more: asked after the recorded
   * deadline (waitOutDeadline()). withEffect then runs the effect again,
   * under the same idempotency key. Trusted only after the recorded deadline
   * plus graceMs; earlier, it is treated as 'unknown'.
   */
  | { readonly outcome: 'not-happened' }
  /** Still cannot tell: the effect stays pending. */
  | { readonly outcome: 'unknown' };

/** What a reconcile gets. */
export interface ReconcileContext {
  readonly idempotencyKey: string;
  /** The pending record: who recorded it (token), when, and its deadline. */
  readonly recorded: RecordedEffect;
  /** Our own deadline on the wall clock, for a call the reconcile sends (null: none given). */
  readonly deadline: Date | null;
  /** Aborts at our deadline and when options.signal aborts. */
  readonly signal: AbortSignal;
  /**
   * Resolves once the recorded call can no longer land: after the recorded
   * deadline plus graceMs (the larger of the recorded one and ours), by
   * this machine's wall clock. Rejects with EffectPendingError when the
   * record has no deadline, and with the signal's reason when it aborts.
   */
  waitOutDeadline(): Promise<void>;
}

/**
 * withEffect's options: the holder's `deadline` (lock.deadline), the `reconcile`
 * that settles a pending effect, `graceMs`, `retryFailed`, and an abort signal.
 */
export interface EffectOptions<R> {
  /**
   * The holder's step-down instant on the performance.now() clock: pass
   * `lock.deadline`. Recorded (on the wall clock) with the pending intent and
   * handed to the effect, which must have the outside system refuse the call
   * after it. Without it, a "did not happen" can never be trusted.
   */
  readonly deadline?: number;
  /**
   * How long after the recorded deadline a "did not happen" answer from
   * `reconcile` is trusted: it must cover the clock difference between the
   * outside service and the reconciling machine plus the time the service may
   * still spend on a call it accepted just before the deadline. Default 1000.
   */
  readonly graceMs?: number;
  /** Settles a pending effect; without it, a pending effect rejects with EffectPendingError. */
  readonly reconcile?: (context: ReconcileContext) => Reconciled<R> | Promise<Reconciled<R>>;
  /** Run a recorded failure again, as a new attempt with a new idempotency key. Default false. */
  readonly retryFailed?: boolean;
  /** Stop waiting (a reconcile's wait) and abort the effect's signal. */
  readonly signal?: AbortSignal;
}

/**
 * What withEffect answers. `source`: 'ran' (this call ran the effect),
 * 'recorded' (an earlier run's recorded result), 'reconciled' (reconcile
 * found it had happened). With `stored` true, `result` is the result as
 * recorded, after a JSON round trip, on the call that ran it too, so the
 * first run and every replay see the same value. With `stored` false the
 * result could not be stored as JSON: the effect is recorded as succeeded
 * without it, and `result` is the value the effect returned if it ran in
 * this call, else undefined.
 */
export type EffectResult<R> = {
  readonly source: 'ran' | 'recorded' | 'reconciled';
  readonly idempotencyKey: string;
  readonly attempt: number;
} & ({ readonly stored: true; readonly result: R } | { readonly stored: false; readonly result: R | undefined });

/**
 * The outside call withEffect makes: it gets the stable idempotency key, the
 * deadline and an abort signal; returning means it succeeded, throwing
 * DefiniteFailure that it did not happen, anything else an unknown outcome.
 */
export type Effect<R> = (context: EffectContext) => R | Promise<R>;

const DEFAULT_GRACE_MS = 1000;

interface Input<R> {
  readonly resource: string;
  readonly key: string;
  readonly token: FencingToken;
  /** What each fenced step presents: the sequencer when one was given (a bound fence checks it), else the bare token. */
  readonly presented: FencingToken | Sequencer;
  readonly effect: Effect<R>;
  readonly deadline: number | undefined;
  readonly graceMs: number;
  readonly reconcile: EffectOptions<R>['reconcile'];
  readonly retryFailed: boolean;
  readonly signal: AbortSignal | undefined;
}

/** What the fenced claim decided. */
type Step<R> =
  | { readonly kind: 'done'; readonly result: EffectResult<R> }
  | { readonly kind: 'failed'; readonly error: EffectFailedError }
  | { readonly kind: 'run'; readonly attempt: number; readonly idempotencyKey: string; readonly deadline: number | null }
  | { readonly kind: 'pending'; readonly recorded: RecordedEffect };

/**
 * Perform `effect` at most once per (resource, key), or reconcile it. Three
 * steps, the first and last each a transaction under the resource's fence (a
 * stale token is refused and records nothing): claim (record the effect
 * pending with our token and a wall-clock deadline, or answer a recorded
 * result, or throw a recorded failure); run the effect outside any
 * transaction with the attempt's idempotency key, its deadline (to hand to the
 * outside system, which must refuse the call after it) and a signal that
 * aborts at that deadline; record the outcome (a DefiniteFailure is recorded
 * as failed; anything else leaves it pending). A pending effect found by a
 * later holder is settled by `options.reconcile`, whose "did not happen" is
 * trusted only after the deadline plus `graceMs`. Every argument is checked
 * before any SQL is sent.
 * Rejects with StaleTokenError when a newer holder has the resource (nothing
 * recorded at the claim; the effect's outcome not recorded after it ran),
 * EffectFailedError for a recorded definite failure, EffectPendingError
 * (UNKNOWN_OUTCOME) when the outcome is not known (also when the deadline
 * passed between the claim and the call: nothing was sent, and the ledger
 * keeps it pending until a reconcile finds so), LockLostError when the
 * deadline had passed before anything was recorded.
 */
export async function withEffect<R>(db: Database, target: EffectTarget, effect: Effect<R>, options?: EffectOptions<R>): Promise<EffectResult<R>> {
  const input = checkInput<R>(db, target, effect, options);
  return traceEffect(input.resource, input.key, input.token, () => claimAndRun(db, input));
}

async function claimAndRun<R>(db: Database, input: Input<R>): Promise<EffectResult<R>> {
  input.signal?.throwIfAborted();
  if (input.deadline !== undefined && performance.now() >= input.deadline) throw deadlinePassed(input);
  let step = await claim(db, input);
  for (let reconciled = false; ; reconciled = true) {
    switch (step.kind) {
      case 'done':
        return step.result;
      case 'failed':
        throw step.error;
      case 'run':
        return runAndRecord(db, input, step);
      case 'pending':
        if (input.reconcile === undefined) {
          throw pendingError(step.recorded, `is pending since ${step.recorded.updatedAt.toISOString()} (recorded by token ${step.recorded.token}): its outcome is unknown; pass reconcile to settle it with the outside system, or settle it by hand (fencekeeper effects --pending)`, false);
        }
        // Our own settle found someone else's pending attempt in its place.
        if (reconciled) throw pendingError(step.recorded, 'changed while it was being reconciled; try again', true);
        step = await reconcileAndSettle(db, input, step.recorded);
    }
  }
}

function checkInput<R>(db: unknown, target: unknown, effect: unknown, options: unknown): Input<R> {
  checkDatabase(db, 'withEffect');
  const t = checkObject(target, 'withEffect: the effect ({ resource, token, key })');
  const resource = checkEffectResource(t['resource']);
  const fencing = resolveFencing(t['token']);
  const key = checkEffectKey(t['key']);
  if (typeof effect !== 'function') throw new InvalidArgumentError(`withEffect: effect must be a function, got ${describe(effect)}`);
  const o = checkObject(options, 'withEffect: options');
  refuseCheckOnly(fenceAdvances(o, 'withEffect'), 'withEffect', 'the ledger records, under the fence, which holder claimed an effect and how it ended, and an effect runs once per key: that is a writer\'s act, so the fence advances');
  return Object.freeze({
    resource,
    key,
    token: fencing.token,
    presented: fencing.sequencer ?? fencing.token,
    effect: effect as Effect<R>,
    deadline: optionalInstant(o['deadline'], 'deadline'),
    graceMs: optionalInteger(o['graceMs'], 'graceMs', 0, MAX_INT32) ?? DEFAULT_GRACE_MS,
    reconcile: optionalFunction<EffectOptions<R>['reconcile']>(o['reconcile'], 'reconcile'),
    retryFailed: optionalBoolean(o['retryFailed'], 'retryFailed') ?? false,
    signal: optionalSignal(o['signal'], 'signal'),
  });
}

/** Step 1, in a fenced transaction. */
function claim<R>(db: Database, input: Input<R>): Promise<Step<R>> {
  return withFence(db, input.resource, input.presented, async (trx): Promise<Step<R>> => {
    const deadline = wallDeadline(input);
    const idempotencyKey = effectIdempotencyKey(input.resource, input.key, 1);
    if (await claimEffect(trx, input.resource, input.key, idempotencyKey, input.token, deadline, input.graceMs)) {
      return { kind: 'run', attempt: 1, idempotencyKey, deadline };
    }
    const recorded = await readEffect(trx, input.resource, input.key);
    // Only a hand-made DELETE between the two statements gets here (every writer holds the fence).
    if (recorded === null) {
      throw pendingError({ resource: input.resource, key: input.key, idempotencyKey, attempt: 1, token: input.token, deadline: null }, 'was deleted from the ledger while being claimed; try again', true);
    }
    switch (recorded.state) {
      case 'succeeded':
        return { kind: 'done', result: fromRecord<R>(recorded, 'recorded') };
      case 'failed': {
        if (!input.retryFailed) return { kind: 'failed', error: failedError(recorded) };
        const attempt = recorded.attempt + 1;
        const nextKey = effectIdempotencyKey(input.resource, input.key, attempt);
        await recordPendingAgain(trx, recorded, { attempt, idempotencyKey: nextKey, token: input.token, deadline, graceMs: input.graceMs });
        return { kind: 'run', attempt, idempotencyKey: nextKey, deadline };
      }
      case 'pending':
        return { kind: 'pending', recorded };
    }
  });
}

/** Steps 2 and 3. */
async function runAndRecord<R>(db: Database, input: Input<R>, step: Extract<Step<R>, { kind: 'run' }>): Promise<EffectResult<R>> {
  const ref: EffectRef = { resource: input.resource, key: input.key, idempotencyKey: step.idempotencyKey, attempt: step.attempt, token: input.token, deadline: step.deadline === null ? null : new Date(step.deadline) };
  const { signal, dispose } = holderSignal(input);
  let ran: Ran<R>;
  try {
    ran = await runEffect(input, ref, signal);
  } finally {
    dispose();
  }
  let settlement: Settlement;
  let outcome: { readonly ok: true; readonly result: EffectResult<R> } | { readonly ok: false; readonly error: EffectFailedError };
  if (ran.ok) {
    const stored = storeResult(ran.value);
    settlement = { state: 'succeeded', resultStored: stored.stored, result: stored.stored ? stored.text : null };
    outcome = { ok: true, result: resultOf<R>(ref, 'ran', stored.stored ? { stored: true, result: stored.replay as R } : { stored: false, result: ran.value }) };
  } else {
    settlement = { state: 'failed', failure: storeFailure(ran.failure.message, ran.failure.details) };
    outcome = { ok: false, error: new EffectFailedError(ref, ran.failure, { cause: ran.failure }) };
  }
  let settled: boolean;
  try {
    settled = await withFence(db, input.resource, input.presented, (trx) => settleEffect(trx, { ...ref, state: 'pending' }, input.token, settlement));
  } catch (error) {
    // A newer holder has the resource: it will find the effect pending and reconcile.
    if (error instanceof StaleTokenError) throw error;
    throw pendingError(ref, `ran, but its outcome could not be recorded (${describeError(error)}): the ledger still says pending`, input.reconcile !== undefined, error);
  }
  // Only a call with this same token (ours, concurrently) changes the row under our fence.
  if (!settled) debug('withEffect: %s on %s: the pending attempt %d changed before its outcome was recorded; not recorded', input.key, input.resource, step.attempt);
  if (!outcome.ok) throw outcome.error;
  return outcome.result;
}

type Ran<R> = { readonly ok: true; readonly value: R } | { readonly ok: false; readonly failure: DefiniteFailure };

async function runEffect<R>(input: Input<R>, ref: EffectRef, signal: AbortSignal): Promise<Ran<R>> {
  // Paused between the claim and here past the deadline (or told to stop):
  // the call is not started. The record stays pending; a reconcile finds
  // that it did not happen once the deadline has passed.
  if (signal.aborted) {
    throw pendingError(ref, `was not sent: ${describeError(signal.reason)}; the ledger keeps it pending until a reconcile finds it did not happen`, input.reconcile !== undefined, signal.reason);
  }
  try {
    return { ok: true, value: await input.effect(Object.freeze({ idempotencyKey: ref.idempotencyKey, attempt: ref.attempt, deadline: ref.deadline, signal })) };
  } catch (error) {
    if (error instanceof DefiniteFailure) return { ok: false, failure: error };
    throw pendingError(ref, `has an unknown outcome: the effect threw ${describeError(error)}; it stays pending${input.reconcile === undefined ? '' : ' until a reconcile settles it'}`, input.reconcile !== undefined, error);
  }
}

/** A pending record: ask the outside system, then record the answer under the fence. */
async function reconcileAndSettle<R>(db: Database, input: Input<R>, recorded: RecordedEffect): Promise<Step<R>> {
  const reconcile = input.reconcile!;
  const { signal, dispose } = holderSignal(input);
  let answer: Reconciled<R>;
  try {
    const deadline = wallDeadline(input);
    answer = checkReconciled(await reconcile(Object.freeze({
      idempotencyKey: recorded.idempotencyKey,
      recorded,
      deadline: deadline === null ? null : new Date(deadline),
      signal,
      waitOutDeadline: () => waitOutDeadline(recorded, input.graceMs, signal),
    })));
  } catch (error) {
    if (error instanceof InvalidArgumentError || error instanceof EffectPendingError) throw error;
    throw pendingError(recorded, `could not be reconciled: reconcile threw ${describeError(error)}`, true, error);
  } finally {
    dispose();
  }
  if (answer.outcome === 'unknown') throw pendingError(recorded, 'is still unknown: reconcile could not tell whether it happened', true);
  if (answer.outcome === 'not-happened' && !landingOver(recorded, input.graceMs)) {
    // The earlier call may still arrive: a "no" now says nothing about later.
    throw pendingError(recorded, recorded.deadline === null
      ? 'cannot be settled as not happened: it was recorded without a deadline, so its call may still arrive at any time'
      : `cannot be settled as not happened before its deadline ${recorded.deadline.toISOString()} plus ${Math.max(recorded.graceMs, input.graceMs)} ms has passed: its call may still arrive (wait with waitOutDeadline())`, true);
  }
  return withFence(db, input.resource, input.presented, async (trx): Promise<Step<R>> => {
    const now = await readEffect(trx, input.resource, input.key);
    if (now === null || now.state !== 'pending' || now.attempt !== recorded.attempt || now.token !== recorded.token) {
      // Settled meanwhile by a call with our own token: take what it recorded.
      if (now?.state === 'succeeded') return { kind: 'done', result: fromRecord<R>(now, 'recorded') };
      if (now?.state === 'failed') return { kind: 'failed', error: failedError(now) };
      if (now === null) throw pendingError(recorded, 'was deleted from the ledger while being reconciled', true);
      return { kind: 'pending', recorded: now };
    }
    const ref = { ...recorded, token: input.token };
    switch (answer.outcome) {
      case 'succeeded': {
        const stored = storeResult(answer.result);
        await settleEffect(trx, recorded, input.token, stored.stored ? { state: 'succeeded', resultStored: true, result: stored.text } : { state: 'succeeded', resultStored: false, result: null });
        return { kind: 'done', result: resultOf<R>(ref, 'reconciled', stored.stored ? { stored: true, result: stored.replay as R } : { stored: false, result: answer.result }) };
      }
      case 'failed': {
        await settleEffect(trx, recorded, input.token, { state: 'failed', failure: storeFailure(answer.message, answer.details) });
        return { kind: 'failed', error: new EffectFailedError(ref, answer) };
      }
      case 'not-happened': {
        const deadline = wallDeadline(input);
        if (deadline !== null && deadline <= Date.now()) throw deadlinePassed(input);
        await recordPendingAgain(trx, recorded, { attempt: recorded.attempt, idempotencyKey: recorded.idempotencyKey, token: input.token, deadline, graceMs: input.graceMs });
        return { kind: 'run', attempt: recorded.attempt, idempotencyKey: recorded.idempotencyKey, deadline };
      }
    }
  });
}

function checkReconciled<R>(value: unknown): Exclude<Reconciled<R>, { outcome: 'unknown' }> | { readonly outcome: 'unknown' } {
  const outcome = (value as { outcome?: unknown } | null)?.outcome;
  switch (outcome) {
    case 'succeeded':
    case 'not-happened':
    case 'unknown':
      return value as Reconciled<R>;
    case 'failed': {
      const message = (value as { message?: unknown }).message;
      if (typeof message === 'string' && message.length > 0) return value as Reconciled<R>;
      throw new InvalidArgumentError(`reconcile: a failed outcome needs a message, got ${describe(message)}`);
    }
    default:
      throw new InvalidArgumentError(`reconcile must return { outcome: 'succeeded' | 'failed' | 'not-happened' | 'unknown' }, got ${describe(value)}`);
  }
}

/** The wall-clock deadline (epoch ms) of a call made now, from the monotonic one; null without one. */
function wallDeadline(input: Input<unknown>): number | null {
  return input.deadline === undefined ? null : Date.now() + (input.deadline - performance.now());
}

/** Has the recorded call's deadline, plus the grace, passed on this machine's wall clock? */
function landingOver(recorded: RecordedEffect, graceMs: number): boolean {
  return recorded.deadline !== null && Date.now() > recorded.deadline.getTime() + Math.max(recorded.graceMs, graceMs);
}

async function waitOutDeadline(recorded: RecordedEffect, graceMs: number, signal: AbortSignal): Promise<void> {
  if (recorded.deadline === null) {
    throw pendingError(recorded, 'was recorded without a deadline: its call may still arrive at any time, so there is nothing to wait out', false);
  }
  while (!landingOver(recorded, graceMs)) {
    signal.throwIfAborted();
    const remaining = recorded.deadline.getTime() + Math.max(recorded.graceMs, graceMs) - Date.now();
    // The caller awaits this wait, so the timer keeps the process alive (not
    // unref'd); it ends on abort. The wall clock may be stepped meanwhile:
    // look at it again at least every second.
    try {
      await sleep(Math.min(Math.max(remaining, 0) + 1, 1000), undefined, { signal });
    } catch {
      signal.throwIfAborted();
    }
  }
}

/**
 * The holder's signal for the effect or the reconcile: aborts at the
 * deadline (a timer on the monotonic clock, unref'd: it only ever aborts)
 * and when options.signal aborts. dispose() clears both.
 */
function holderSignal(input: Input<unknown>): { readonly signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const outer = input.signal;
  const onAbort = (): void => controller.abort(outer?.reason);
  if (outer?.aborted) controller.abort(outer.reason);
  else outer?.addEventListener('abort', onAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  if (input.deadline !== undefined && !controller.signal.aborted) {
    const remaining = input.deadline - performance.now();
    if (remaining <= 0) controller.abort(deadlinePassed(input));
    else if (remaining <= MAX_INT32) {
      timer = setTimeout(() => controller.abort(deadlinePassed(input)), Math.ceil(remaining));
      timer.unref();
    }
  }
  return {
    signal: controller.signal,
    dispose: () => {
      clearTimeout(timer);
      outer?.removeEventListener('abort', onAbort);
    },
  };
}

function deadlinePassed(input: Input<unknown>): LockLostError {
  return new LockLostError(input.resource, 'deadline', `the effect ${JSON.stringify(input.key)} on ${input.resource}: the holder's deadline has passed, so it may no longer act (nothing was sent)`);
}

interface EffectRef {
  readonly resource: string;
  readonly key: string;
  readonly idempotencyKey: string;
  readonly attempt: number;
  readonly token: FencingToken;
  readonly deadline: Date | null;
}

function pendingError(effect: EffectRef, what: string, retryable: boolean, cause?: unknown): EffectPendingError {
  const message = `the effect ${JSON.stringify(effect.key)} on ${effect.resource} (idempotency key ${effect.idempotencyKey}, attempt ${effect.attempt}) ${what}`;
  return new EffectPendingError(effect, message, cause === undefined ? { retryable } : { retryable, cause });
}

function failedError(recorded: RecordedEffect): EffectFailedError {
  return new EffectFailedError(recorded, recorded.failure ?? { message: 'recorded as failed' });
}

function fromRecord<R>(recorded: RecordedEffect, source: EffectResult<R>['source']): EffectResult<R> {
  return resultOf<R>(recorded, source, recorded.resultStored ? { stored: true, result: recorded.result as R } : { stored: false, result: undefined });
}

function resultOf<R>(effect: { readonly idempotencyKey: string; readonly attempt: number }, source: EffectResult<R>['source'], value: { readonly stored: true; readonly result: R } | { readonly stored: false; readonly result: R | undefined }): EffectResult<R> {
  return Object.freeze({ source, idempotencyKey: effect.idempotencyKey, attempt: effect.attempt, ...value });
}

function describeError(error: unknown): string {
  const message = (error as { message?: unknown } | null)?.message;
  const name = (error as { name?: unknown } | null)?.name;
  return typeof message === 'string' ? `${typeof name === 'string' ? name : 'Error'}: ${message}` : describe(error);
}
