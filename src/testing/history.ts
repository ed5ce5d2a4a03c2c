/**
 * Did fencing hold for a resource of yours? Record what every holder did to
 * it (each write's token, when it was sent and answered, and how it ended),
 * read back what the resource applied and in which order, and check the two
 * against each other:
 *
 *   order       tokens never decrease along the apply order
 *   real time   a write acknowledged with token n was not sent after a write
 *               with a larger token had been acknowledged (a stale holder
 *               that was let through late)
 *   durability  every acknowledged write is in the apply order, once; the
 *               final state is the last write applied, with the largest token
 *   no effect   a refused (stale) or failed write appears nowhere
 *   fence       the resource's high-water mark, if it has one, covers every
 *               applied token (else a smaller token could still get in)
 *
 *   const history = new WriteHistory();
 *   await history.record(lock.token, (id) => saveReport(id, lock.token));   // in every holder
 *   const applied = await readAppliedOrder();      // from the resource: [{ id, token }] in apply order
 *   expect(checkHistory({ writes: history.writes, applied }).violations).toEqual([]);
 *
 * The apply order must come from the resource itself, in the order it
 * applied the writes (a history table's serial column written in the same
 * transaction, an append-only log), carrying the id each write was sent
 * with. A pure function of what it is given: it knows nothing of processes
 * or servers, so a test can hand it a broken history and see it reported.
 */
import { performance } from 'node:perf_hooks';
import { isCode } from '../errors.js';
import type { FencingToken } from '../token.js';

/** ok: acknowledged · refused: refused as stale · failed: known not applied · unknown: may or may not have applied. */
export type WriteOutcome = 'ok' | 'refused' | 'failed' | 'unknown';

/** One write as its holder saw it. */
export interface RecordedWrite {
  /** Unique per write, stored in the resource with the data. */
  readonly id: string;
  readonly token: FencingToken;
  /** ms since the epoch (performance.timeOrigin + performance.now(): comparable across processes, monotonic within one). */
  readonly invokedAt: number;
  /** null: the holder never saw the end (it was killed, or is still paused). */
  readonly completedAt: number | null;
  readonly outcome: WriteOutcome;
}

/** One entry of the resource's apply order. */
export interface AppliedWrite {
  readonly id: string;
  readonly token: FencingToken;
}

/**
 * The input of checkHistory: every write recorded (WriteHistory.writes) and
 * what the resource applied, in its own order (write ids and tokens).
 */
export interface ResourceHistory {
  /** Every write any holder sent to the resource. */
  readonly writes: readonly RecordedWrite[];
  /** What the resource applied, in the order it applied it. */
  readonly applied: readonly AppliedWrite[];
  /** The resource's state at the end: the write it holds now (null: none). Default: the last applied. */
  readonly final?: AppliedWrite | null;
  /** The resource's high-water mark at the end, where it keeps one (a fence row, an object's token). */
  readonly fence?: FencingToken | null;
  /**
   * A write may appear more than once in the apply order (a conditional PUT
   * retried after a lost reply may land twice). Default false: twice is a
   * replayed write.
   */
  readonly allowRepeats?: boolean;
  /** The resource's name, for messages. */
  readonly resource?: string;
}

/**
 * The kinds of HistoryViolation, each a way a history breaks fencing's
 * promise (tokens going back in the applied order or in real time, an
 * acknowledged write lost, a write applied twice or never sent, a refused
 * write applied, a final state no write explains).
 */
export type HistoryViolationKind =
  | 'order'
  | 'real-time'
  | 'lost-ack'
  | 'duplicate'
  | 'final-state'
  | 'refused-applied'
  | 'phantom'
  | 'token-mismatch'
  | 'fence';

/** One way the recorded writes and what the resource applied disagree, with the writes involved. */
export interface HistoryViolation {
  readonly kind: HistoryViolationKind;
  readonly message: string;
}

/**
 * checkHistory's verdict: `valid` when no violation was found, the violations
 * found, and the writes counted by outcome.
 */
export interface HistoryCheck {
  /** No violation. (Whether the run proved anything, a refused stale write say, is the test's to assert.) */
  readonly valid: boolean;
  readonly violations: readonly HistoryViolation[];
  readonly counts: { readonly [outcome in WriteOutcome]: number } & { readonly applied: number };
}

/**
 * Checks recorded writes against what the resource applied: tokens never go
 * back, no stale write is acknowledged after a newer one, nothing acknowledged
 * is lost, nothing refused is applied. Returns the verdict; throws nothing.
 */
export function checkHistory(history: ResourceHistory): HistoryCheck {
  const { writes, applied } = history;
  const final = history.final === undefined ? (applied[applied.length - 1] ?? null) : history.final;
  const where = history.resource === undefined ? 'the apply order' : `the ${history.resource} apply order`;
  const violations: HistoryViolation[] = [];
  const add = (kind: HistoryViolationKind, message: string): void => {
    violations.push({ kind, message });
  };
  const byId = new Map(writes.map((w) => [w.id, w]));

  // The resource holds what was sent.
  for (const entry of applied) {
    const write = byId.get(entry.id);
    if (write === undefined) add('phantom', `${entry.id} (token ${entry.token}) was applied but no holder sent it`);
    else if (write.token !== entry.token) add('token-mismatch', `${entry.id} was sent with token ${write.token} but applied with ${entry.token}`);
  }

  // Order: tokens never decrease.
  for (let i = 1; i < applied.length; i++) {
    const before = applied[i - 1] as AppliedWrite;
    const after = applied[i] as AppliedWrite;
    if (after.token < before.token) {
      add('order', `${after.id} (token ${after.token}) was applied after ${before.id} (token ${before.token}), at position ${i} of ${applied.length}`);
    }
  }

  // Real time: once a larger token was acknowledged, a smaller one sent later must not be.
  const acknowledged = writes.filter((w) => w.outcome === 'ok');
  const byCompletion = acknowledged.filter((w) => w.completedAt !== null).sort((a, b) => (a.completedAt as number) - (b.completedAt as number));
  for (const x of acknowledged) {
    const newer = byCompletion.find((y) => (y.completedAt as number) < x.invokedAt && y.token > x.token);
    if (newer !== undefined) {
      add('real-time', `${x.id} (token ${x.token}) was invoked at ${x.invokedAt} after ${newer.id} (token ${newer.token}) had been acknowledged at ${String(newer.completedAt)}, and was acknowledged too`);
    }
  }

  // Durability: every acknowledged write is there (once); the final state is the last one applied.
  const appliedCount = new Map<string, number>();
  for (const entry of applied) appliedCount.set(entry.id, (appliedCount.get(entry.id) ?? 0) + 1);
  for (const w of acknowledged) {
    if (!appliedCount.has(w.id)) add('lost-ack', `${w.id} (token ${w.token}) was acknowledged but is missing from ${where}`);
  }
  if (history.allowRepeats !== true) {
    for (const [id, count] of appliedCount) if (count > 1) add('duplicate', `${id} was applied ${count} times`);
  }
  const last = applied[applied.length - 1] ?? null;
  if ((last === null) !== (final === null) || (last !== null && final !== null && (last.id !== final.id || last.token !== final.token))) {
    add('final-state', `the final state is ${describe(final)} but the last applied write is ${describe(last)}`);
  }
  const maxApplied = applied.reduce<bigint | null>((m, e) => (m === null || e.token > m ? e.token : m), null);
  if (final !== null && maxApplied !== null && final.token < maxApplied) {
    add('final-state', `the final state carries token ${final.token}, below the largest applied token ${maxApplied}`);
  }
  if (history.fence !== undefined && maxApplied !== null && (history.fence === null || history.fence < maxApplied)) {
    add('fence', `the high-water mark is ${history.fence ?? 'unset'}, below the largest applied token ${maxApplied}`);
  }

  // No effect: a refused or failed write changed nothing.
  for (const w of writes) {
    if (w.outcome !== 'refused' && w.outcome !== 'failed') continue;
    if (appliedCount.has(w.id)) add('refused-applied', `${w.id} (token ${w.token}) was ${w.outcome} but is in ${where}`);
    if (final !== null && final.id === w.id) add('refused-applied', `${w.id} (token ${w.token}) was ${w.outcome} but is the final state`);
  }

  const count = (outcome: WriteOutcome): number => writes.filter((w) => w.outcome === outcome).length;
  return {
    valid: violations.length === 0,
    violations,
    counts: { ok: count('ok'), refused: count('refused'), failed: count('failed'), unknown: count('unknown'), applied: applied.length },
  };
}

function describe(entry: AppliedWrite | null): string {
  return entry === null ? 'nothing' : `${entry.id} (token ${entry.token})`;
}

/**
 * How WriteHistory.record classifies a write's error: `refused(error)` true
 * for the resource's refusal of a stale token (other errors count as unknown outcomes).
 */
export interface RecordOptions {
  /** The write's id (default: a new one, `w<n>`). */
  readonly id?: string;
  /**
   * Which errors mean "refused as stale" (nothing applied). Default: the
   * core's StaleTokenError (code STALE_TOKEN); pass your own for an HTTP 409
   * or your resource's refusal.
   */
  readonly refused?: (error: unknown) => boolean;
  /** Which errors mean "known not applied" (a validation error before any I/O). Default: none; every other error is 'unknown'. */
  readonly failed?: (error: unknown) => boolean;
}

/**
 * What WriteHistory.record resolves to: the recorded write (token, when sent
 * and answered, outcome) and the write's own result or error.
 */
export interface RecordedOutcome<T> {
  readonly write: RecordedWrite;
  /** What the write returned, when it was acknowledged. */
  readonly value?: T;
  /** Why it was not, otherwise. */
  readonly error?: unknown;
}

/** Collects one process's writes for checkHistory(). Merge the writes of several processes by concatenating them. */
export class WriteHistory {
  readonly #writes: RecordedWrite[] = [];
  #next = 0;

  get writes(): readonly RecordedWrite[] {
    return this.#writes;
  }

  /**
   * Run one write with `token` and record it: its id (handed to `write`, to
   * be stored with the data), when it was sent and answered, and its outcome.
   * Resolves with the outcome; never rejects: a refusal is the expected
   * answer to a stale holder.
   */
  async record<T>(token: FencingToken, write: (id: string) => Promise<T>, options: RecordOptions = {}): Promise<RecordedOutcome<T>> {
    const id = options.id ?? `w${++this.#next}`;
    const invokedAt = now();
    const done = (outcome: WriteOutcome): RecordedWrite => {
      const recorded = { id, token, invokedAt, completedAt: now(), outcome };
      this.#writes.push(recorded);
      return recorded;
    };
    try {
      const value = await write(id);
      return { write: done('ok'), value };
    } catch (error) {
      const refused = options.refused ?? ((e: unknown) => isCode(e, 'STALE_TOKEN'));
      const outcome: WriteOutcome = refused(error) ? 'refused' : options.failed?.(error) === true ? 'failed' : 'unknown';
      return { write: done(outcome), error };
    }
  }
}

function now(): number {
  return performance.timeOrigin + performance.now();
}
