/**
 * For authors of a token source, a fence or idempotency store, or an
 * instrumentation: the step-down clock, the fair-queue grant and observer,
 * source identities, the lock name rule and the diagnostics publishers.
 * Applications import none of it.
 *
 * @module fencekeeper/extend
 */
// The public surface of 'fencekeeper/extend': for authors of a token source,
// a fence or idempotency store, or an instrumentation, not for applications
// (they import 'fencekeeper'). The step-down clock that every grant's `held`
// and `signal` run on, the identity a source's sequencers carry, and the
// diagnostics publishers every built-in source and adapter reports through,
// so that a source or store of your own shows up in the same channels.

// The step-down clock: held / signal / deadline by our own monotonic clock
export { StepDownClock, safetyMargin } from './step-down.js';
export type { StepDownSource, Holding, HoldingOptions } from './step-down.js';

// A fair queue's grant (held, signal, deadline, sequencer, leave) with a source's hooks,
// and the held lock and leadership written once over it
export { QueueGrant, lockGrant, leadershipGrant } from './queue-grant.js';
export type { QueueGrantClass, LockGrantMethods, LeadershipGrantMethods } from './queue-grant.js';
// A fair queue's join (join, then wait on the predecessor) with a source's steps, and its stop
export { joinQueue } from './queue-join.js';
export type { QueueJoinSteps, QueueTurn } from './queue-join.js';
export { QueueStopper, WaitGroup } from './queue-stopper.js';
export type { StopReceiver } from './queue-stopper.js';
// The self-wait warning: a client about to wait for a lock it holds itself
export { SELF_WAIT_WARNING, noteGrant, forgetGrant, warnIfSelfWait } from './self-wait.js';
export type { SelfWaitGrant, SelfWaitNames } from './self-wait.js';
// A fair queue's cached view (holder, entries, onChange) kept fresh by a source's watch
export { QueueObserver } from './queue-observer.js';

// The options of the SQL row helpers, one shape for every SQL fence
export type { FencedUpdateOptions, FencedInsertOptions, FencedUpsertOptions, FencedDeleteOptions } from './row-options.js';

// The check-only mode's rule ({ advance: false }), for a fence or store of your own
export { fenceAdvances, fenceAdmits, markAfter, refuseCheckOnly, CHECK_ONLY_FIRST_MARK } from './fence-mode.js';

// The owner every source names when the caller names none: hostname:pid
export { DEFAULT_OWNER } from './lock.js';

// A source's identity, asked once per client, and the sequencer of a grant
export { SourceIdentityCache, grantSequencer } from './source-identity.js';
// The one well-formedness rule of lock and election names every source checks first
export { assertLockName } from './sequencer.js';
// The options of an acquire or a campaign, checked before a source's first request
export { checkWaitOptions } from './wait-options.js';
export type { CheckedWait } from './wait-options.js';
// A fence binding's text form, for a store that keeps it as text (S3 metadata)
export { formatBinding, parseBinding } from './sequencer.js';

// The publishers of the diagnostics channels (their names: CHANNELS in 'fencekeeper')
export {
  traceAcquire,
  traceRelease,
  traceCampaign,
  traceAdmit,
  traceWithFence,
  traceFencedWrite,
  traceS3Put,
  traceS3Delete,
  traceEffect,
  publishSessionState,
  publishSourceActivity,
  publishRefused,
  publishUnknownOutcome,
} from './diagnostics.js';
