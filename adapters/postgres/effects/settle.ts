// Settling a pending effect from outside withEffect: an operator who asked
// the outside system (by the idempotency key) records what it answered.
//
// Sound only where the record cannot be contradicted later:
// - 'happened' (recorded succeeded, no result): a call that landed cannot
//   un-land, so it may be recorded at any time;
// - 'not-happened' (recorded failed, "abandoned by an operator"): only once
//   the recorded call can no longer land, i.e. after its deadline plus
//   graceMs on the database's clock. Before that, or with no deadline
//   recorded, a paused holder's call may still arrive after the operator
//   looked, so it is refused (EffectPendingError) and nothing changes.
// Only a pending effect is settled; a settled one is refused as it is.
// The write takes the fence row's lock first, as withEffect's transactions
// do, and applies only if the row is still the pending attempt that was read.
import { EffectPendingError, InvalidArgumentError } from '../../../src/index.js';
import { run, type Database } from '../database.js';
import { inTransaction } from '../migrate.js';
import { checkEffectKey, checkEffectResource } from './input.js';
import { readEffect, settleEffect, type RecordedEffect } from './ledger.js';

/** What the outside system answered about the pending call. */
export type ExternalOutcome = 'happened' | 'not-happened';

const LOCK_FENCE = 'SELECT 1 FROM fencekeeper_fences WHERE resource = $1 FOR UPDATE';
const LANDING_OVER = `SELECT now() > to_timestamp($1::float8 / 1000) + $2::float8 * interval '1 millisecond' AS over`;

/**
 * Record the outcome of the pending effect `key` on `resource`, as an
 * operator learnt it from the outside system: 'happened' records it
 * succeeded (with no result), 'not-happened' records it failed (abandoned:
 * withEffect then rejects EffectFailedError, and runs it again, under a new
 * idempotency key, only with retryFailed). 'not-happened' is refused with
 * EffectPendingError until the recorded deadline plus graceMs has passed
 * (and always when no deadline was recorded): until then the call may
 * still land. An effect that is not pending, or that changed while this
 * ran, is refused with InvalidArgumentError. Answers the settled record.
 */
export async function settlePendingEffect(db: Database, resource: string, key: string, outcome: ExternalOutcome): Promise<RecordedEffect> {
  checkEffectResource(resource);
  checkEffectKey(key);
  if (outcome !== 'happened' && outcome !== 'not-happened') throw new InvalidArgumentError(`outcome must be 'happened' or 'not-happened', not ${JSON.stringify(outcome)}`);
  return inTransaction(db, async (tx) => {
    await run(tx, { text: LOCK_FENCE, values: [resource], prepared: false });
    const effect = await readEffect(tx, resource, key);
    if (effect === null) throw new InvalidArgumentError(`no effect ${JSON.stringify(key)} on ${resource} in the ledger`);
    if (effect.state !== 'pending') throw new InvalidArgumentError(`the effect ${JSON.stringify(key)} on ${resource} is not pending: it is recorded ${effect.state}`);
    if (outcome === 'not-happened') {
      const over = effect.deadline !== null
        && (await run(tx, { text: LANDING_OVER, values: [String(effect.deadline.getTime()), effect.graceMs], prepared: false })).rows[0]?.['over'] === true;
      if (!over) {
        const why = effect.deadline === null
          ? 'no deadline was recorded with it, so its call may land at any time'
          : `its call may still land until ${new Date(effect.deadline.getTime() + effect.graceMs).toISOString()} (deadline plus graceMs)`;
        throw new EffectPendingError(effect, `refused to record the effect ${JSON.stringify(key)} on ${resource} as not having happened: ${why}`);
      }
    }
    const settled = await settleEffect(tx, effect, effect.token, outcome === 'happened'
      ? { state: 'succeeded', resultStored: false, result: null }
      : { state: 'failed', failure: JSON.stringify({ message: 'abandoned by an operator: the outside system did not carry it out' }) });
    if (!settled) throw new InvalidArgumentError(`the effect ${JSON.stringify(key)} on ${resource} changed while it was being settled`);
    const after = await readEffect(tx, resource, key);
    return after as RecordedEffect;
  });
}
