// Reading the effect ledger: what an operator (or `fencekeeper effects`)
// looks at to reconcile the effects whose outcome was never recorded.
import { InvalidArgumentError } from '../../../src/index.js';
import type { Queryable } from '../database.js';
import { MAX_INT32, checkEffectResource, checkObject, checkQueryable, optionalInteger } from './input.js';
import { queryEffects, type EffectState, type RecordedEffect } from './ledger.js';
import { describe } from '../identifiers.js';

/** pendingEffects' filters: a resource, and a minimum time unchanged (`olderThanMs`). */
export interface PendingEffectsOptions {
  /** Only this resource's effects. */
  readonly resource?: string;
  /** Only effects pending for at least this long (since the intent was recorded), by the database's clock. */
  readonly olderThanMs?: number;
}

/** listEffects' filters: those of pendingEffects, a state, and a limit. */
export interface ListEffectsOptions extends PendingEffectsOptions {
  /** Only effects in this state. */
  readonly state?: EffectState;
  /** At most this many (1..2147483647); default: all. */
  readonly limit?: number;
}

const STATES: readonly EffectState[] = ['pending', 'succeeded', 'failed'];

/**
 * The effects whose outcome is not recorded, longest pending first: each was
 * recorded as intended by a holder that then paused, died, lost its lock or
 * met an error that left the outcome unknown. Reconcile each with the
 * outside system (its `idempotencyKey` is what that system saw), then settle
 * it: a withEffect call with a reconcile, or by hand.
 */
export function pendingEffects(db: Queryable, options?: PendingEffectsOptions): Promise<RecordedEffect[]> {
  const o = checkObject(options, 'pendingEffects: options');
  return listEffects(db, { ...o, state: 'pending' } as ListEffectsOptions);
}

/** Ledger rows, least recently changed first. */
export async function listEffects(db: Queryable, options?: ListEffectsOptions): Promise<RecordedEffect[]> {
  checkQueryable(db, 'listEffects');
  const o = checkObject(options, 'listEffects: options');
  const state = o['state'];
  if (state !== undefined && !STATES.includes(state as EffectState)) {
    throw new InvalidArgumentError(`state must be one of ${STATES.join(', ')}, got ${describe(state)}`);
  }
  const olderThanMs = o['olderThanMs'];
  if (olderThanMs !== undefined && (typeof olderThanMs !== 'number' || !Number.isFinite(olderThanMs) || olderThanMs < 0)) {
    throw new InvalidArgumentError(`olderThanMs must be a non-negative number of milliseconds, got ${describe(olderThanMs)}`);
  }
  return queryEffects(db, {
    resource: o['resource'] === undefined ? null : checkEffectResource(o['resource']),
    state: (state as EffectState | undefined) ?? null,
    olderThanMs: (olderThanMs as number | undefined) ?? null,
    limit: optionalInteger(o['limit'], 'limit', 1, MAX_INT32) ?? null,
  });
}
