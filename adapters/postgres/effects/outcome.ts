// How an effect says what happened, and how that is written to the ledger.
//
// An effect that returns has succeeded. One that throws DefiniteFailure has
// definitely not happened (the outside system refused it: a 4xx the effect
// classifies, a rejected address). Anything else it throws (a timeout, a
// reset connection, a 5xx) leaves the outcome unknown: the call may have
// been carried out, so the effect stays pending for reconciliation.

// instanceof must hold across two copies of this package in one process (an
// app and a library each depending on fencekeeper), as for the core's errors.
const DEFINITE = Symbol.for('fencekeeper.effect.definite-failure');

/**
 * Thrown by an effect (or returned by a reconcile as `{ outcome: 'failed' }`)
 * to say the outside system definitely did not carry the call out. Recorded
 * as failed: later calls rethrow it as EffectFailedError instead of running
 * the effect again, unless they pass `retryFailed`. `details` (JSON) is
 * recorded with it: the status code, the provider's error code.
 */
export class DefiniteFailure extends Error {
  override readonly name: string = 'DefiniteFailure';
  readonly details: unknown;

  constructor(message: string, options: { readonly details?: unknown; readonly cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.details = options.details;
    Object.defineProperty(this, DEFINITE, { value: true, enumerable: false });
  }

  /** `instanceof DefiniteFailure` holds for one thrown by another copy of this package in the same process too. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as { [DEFINITE]?: unknown })[DEFINITE] === true;
  }
}

/** A result as the ledger keeps it. */
export type StoredResult =
  | { readonly stored: true; readonly text: string | null; readonly replay: unknown }
  | { readonly stored: false };

/**
 * The result as JSON text, and what a later call will read back from it. A
 * value JSON cannot carry (a bigint, a cycle, a function, a throwing toJSON)
 * is not stored; undefined is stored as SQL NULL.
 */
export function storeResult(value: unknown): StoredResult {
  if (value === undefined) return { stored: true, text: null, replay: undefined };
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    return { stored: false };
  }
  if (text === undefined) return { stored: false };
  return { stored: true, text, replay: JSON.parse(text) as unknown };
}

/** A definite failure as JSON text: its message, and its details when JSON can carry them. */
export function storeFailure(message: string, details: unknown): string {
  const withDetails = details === undefined ? undefined : storeResult({ message, details });
  if (withDetails?.stored === true && withDetails.text !== null) return withDetails.text;
  return JSON.stringify(details === undefined ? { message } : { message: `${message} (its details could not be stored as JSON)` });
}
