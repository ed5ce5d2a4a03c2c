// Errors of writes whose outcome or commit is in doubt (PostgreSQL, S3) and of
// side effects run through withEffect.
import { FencekeeperError, type FencekeeperErrorOptions } from './base.js';

/** A write whose outcome cannot be known (a 5xx after a conditional PUT that a read-back could not settle). */
export class UnknownOutcomeError extends FencekeeperError {
  static override readonly kind: string = 'UnknownOutcomeError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('UNKNOWN_OUTCOME', message, { retryable: true, ...options }); }
}

/**
 * The fenced work returned, but its writes did not commit: a statement in its
 * transaction failed and the work caught the error (PostgreSQL then answers
 * COMMIT with ROLLBACK), or a deferred constraint failed. The fence advance
 * was committed on its own, so the mark does not go back below `token`.
 */
export class WorkNotCommittedError extends FencekeeperError {
  static override readonly kind: string = 'WorkNotCommittedError';
  readonly resource: string;
  readonly token: bigint;
  constructor(resource: string, token: bigint, options?: FencekeeperErrorOptions) {
    super('WORK_NOT_COMMITTED', `the writes fenced on ${resource} with token ${token} did not commit${causeText(options)}; the fence advance did`, options);
    this.resource = resource;
    this.token = token;
  }
}

/**
 * The transaction holding the fence advance did not reach a confirmed COMMIT:
 * COMMIT itself failed (a serialization failure), the connection was lost, or
 * the work ended the transaction itself. The advance went with it and was
 * applied again at once in a transaction of its own; `restored` says whether
 * that worked (false: the mark may stay below `token` until a holder presents
 * a token at least as large). The work's writes did not commit, except that a
 * connection lost during COMMIT leaves them unknown. Retryable when PostgreSQL
 * reported a serialization failure or a deadlock and the advance was restored.
 */
export class CommitFailedError extends FencekeeperError {
  static override readonly kind: string = 'CommitFailedError';
  readonly resource: string;
  readonly token: bigint;
  readonly restored: boolean;
  constructor(resource: string, token: bigint, restored: boolean, options?: FencekeeperErrorOptions) {
    const advance = restored ? 'the fence advance was applied again on its own' : 'the fence advance could not be applied again';
    super('COMMIT_FAILED', `the transaction fenced on ${resource} with token ${token} did not commit${causeText(options)}; ${advance}`, options);
    this.resource = resource;
    this.token = token;
    this.restored = restored;
  }
}

function causeText(options: FencekeeperErrorOptions | undefined): string {
  const message = (options?.cause as { message?: unknown } | undefined)?.message;
  return typeof message === 'string' && message.length > 0 ? ` (${message})` : '';
}

/**
 * A fenced write of one storage layout met a resource kept in another (an S3
 * key written in place, written through a pointer, or a pointer's data
 * object). Nothing was written: a key's writers and readers rely on one
 * layout, so a key changes layout only by a deliberate migration.
 */
export class LayoutMismatchError extends FencekeeperError {
  static override readonly kind: string = 'LayoutMismatchError';
  readonly resource: string;
  /** The layout the write asked for. */
  readonly expected: string;
  /** The layout the resource is kept in. */
  readonly found: string;
  constructor(resource: string, expected: string, found: string, message: string, options?: FencekeeperErrorOptions) {
    super('LAYOUT_MISMATCH', message, options);
    this.resource = resource;
    this.expected = expected;
    this.found = found;
  }
}

/**
 * An in-place conditional write whose body is byte for byte the object's
 * current body. The object's ETag would not change, so a paused holder that
 * read the object earlier could still pass its own condition and put its
 * older token back. Nothing was written.
 */
export class RepeatedBodyError extends FencekeeperError {
  static override readonly kind: string = 'RepeatedBodyError';
  readonly resource: string;
  constructor(resource: string, message: string, options?: FencekeeperErrorOptions) {
    super('REPEATED_BODY', message, options);
    this.resource = resource;
  }
}

/**
 * An outside effect (withEffect) whose outcome is not known: its intent was
 * recorded as pending, and nothing recorded since says whether it happened.
 * An earlier holder may have paused or died between recording the intent and
 * recording the outcome, and its call may even still be on its way. Retrying
 * the call cannot settle it; reconciling with the outside system can
 * (`retryable` is true only when the call that failed had a reconcile to run
 * on the next attempt). `token` is the one that recorded the pending intent;
 * `deadline` the wall-clock instant after which that call can no longer land
 * (null: none was given, so a "did not happen" can never be trusted).
 */
export class EffectPendingError extends UnknownOutcomeError {
  static override readonly kind: string = 'EffectPendingError';
  readonly resource: string;
  readonly key: string;
  readonly idempotencyKey: string;
  readonly attempt: number;
  readonly token: bigint;
  readonly deadline: Date | null;
  constructor(
    effect: { readonly resource: string; readonly key: string; readonly idempotencyKey: string; readonly attempt: number; readonly token: bigint; readonly deadline: Date | null },
    message: string,
    options?: FencekeeperErrorOptions,
  ) {
    super(message, { retryable: false, ...options });
    this.resource = effect.resource;
    this.key = effect.key;
    this.idempotencyKey = effect.idempotencyKey;
    this.attempt = effect.attempt;
    this.token = effect.token;
    this.deadline = effect.deadline;
  }
}

/**
 * An outside effect (withEffect) that definitely failed, as recorded: the
 * effect (or its reconcile) said the outside system refused it and did
 * nothing. Recorded failures are not run again unless the caller asks
 * (`retryFailed`), and then under a fresh idempotency key. `details` is the
 * JSON value recorded with the failure, if any.
 */
export class EffectFailedError extends FencekeeperError {
  static override readonly kind: string = 'EffectFailedError';
  readonly resource: string;
  readonly key: string;
  readonly idempotencyKey: string;
  readonly attempt: number;
  readonly details: unknown;
  constructor(
    effect: { readonly resource: string; readonly key: string; readonly idempotencyKey: string; readonly attempt: number },
    failure: { readonly message: string; readonly details?: unknown },
    options?: FencekeeperErrorOptions,
  ) {
    super('EFFECT_FAILED', `the effect ${effect.key} on ${effect.resource} (attempt ${effect.attempt}) failed: ${failure.message}`, options);
    this.resource = effect.resource;
    this.key = effect.key;
    this.idempotencyKey = effect.idempotencyKey;
    this.attempt = effect.attempt;
    this.details = failure.details;
  }
}
