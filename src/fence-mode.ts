/**
 * A fenced write's mode: advance the fence (the default) or only check it.
 *
 * A fence keeps a mark, the largest token it has admitted, and refuses a
 * smaller one. An exclusive holder advances the mark as it writes, so every
 * earlier holder is refused from then on. Readers of a read-write lock hold
 * it together and their tokens come in any order: if each advanced the mark,
 * the reader with the larger token would lock the other out of a fence both
 * may pass. A check-only write (`{ advance: false }`) is admitted on the same
 * condition (its token at least the mark, and its sequencer that of a bound
 * fence's lock) but leaves the mark where it is. A writer's token is larger
 * than every grant before it, so once the writer advances the fence, every
 * earlier reader is refused as before.
 *
 * One detail every fence shares: a fence that has no mark yet records 1, the
 * smallest token, when a check-only write passes it. Mark 1 admits exactly
 * what no mark admits (every token), so the admission rule is unchanged; the
 * stores need a mark beside the value they guard (the SQL fence row, the
 * Redis hash's token field) to hold the row's lock or keep the value readable.
 *
 * The rule is written here once; each store carries it into its own language
 * (SQL, Lua, DynamoDB conditions) and its tests check it against this one.
 */
import { InvalidArgumentError } from './errors.js';
import type { FencingToken } from './token.js';

/** `advance: false` is the check-only mode: admitted at or above the mark, the mark left where it is. Default: advance. */
export interface FenceMode {
  /** False: check the fence without moving its mark (a reader of a read-write lock). Default true. */
  readonly advance?: boolean;
}

/** The mark a check-only write leaves on a fence that had none: the smallest token, admitting every token as no mark does. */
export const CHECK_ONLY_FIRST_MARK: FencingToken = 1n;

/**
 * Read the `advance` option of `options` (undefined or an object): true
 * unless it is exactly false; anything but a boolean is an
 * InvalidArgumentError naming `what`, thrown before any I/O.
 */
export function fenceAdvances(options: unknown, what: string): boolean {
  if (options === undefined || options === null || typeof options !== 'object') return true;
  const advance = (options as { advance?: unknown }).advance;
  if (advance === undefined || advance === true) return true;
  if (advance === false) return false;
  throw new InvalidArgumentError(`${what}: advance must be a boolean (false: check the fence without moving its mark), got ${typeof advance}`);
}

/** Does a fence whose mark is `mark` (null: none yet) admit `token`? In both modes: at or above the mark. */
export function fenceAdmits(mark: FencingToken | null, token: FencingToken): boolean {
  return mark === null || token >= mark;
}

/** The mark after an admitted write of `token`: the larger of the two when advancing; unchanged (1 where there was none) when only checking. */
export function markAfter(mark: FencingToken | null, token: FencingToken, advance: boolean): FencingToken {
  if (advance) return mark === null || token > mark ? token : mark;
  return mark ?? CHECK_ONLY_FIRST_MARK;
}

/**
 * Refuse the check-only mode where a fence cannot give it soundly: an
 * InvalidArgumentError, before any I/O, saying why (`reason`). A no-op when
 * the write advances.
 */
export function refuseCheckOnly(advance: boolean, what: string, reason: string): void {
  if (!advance) throw new InvalidArgumentError(`${what} has no check-only mode (advance: false): ${reason}`);
}
