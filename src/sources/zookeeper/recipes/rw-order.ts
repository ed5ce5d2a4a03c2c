/**
 * Names and order in a read-write lock's queue: pure functions of the
 * listing, no request. A child is `<guid>-read-<seq>` or `<guid>-write-<seq>`
 * (the guid names one join, ./queue.ts; the sequence is the one ZooKeeper
 * appended, so readers and writers of one name share one order: arrival).
 *
 * Who holds, and what each waiter waits for:
 *   - a reader holds when no write node is ahead of it (every reader ahead of
 *     the first writer holds at once, together); otherwise it waits for the
 *     nearest write node ahead of it, and for nothing else: readers coming and
 *     going around it do not concern it;
 *   - a writer holds when it is first; otherwise it waits for its immediate
 *     predecessor, as a plain lock's waiter does.
 * A reader arriving after a waiting writer queues behind it, so a stream of
 * readers cannot starve a writer. Each release wakes only the waiters that
 * waited for that node: a writer's release wakes the readers right behind it
 * (all of them are granted) or the one writer behind it.
 */
import { compareSequence, parseSequence, TURN, type TurnOutcome } from './queue-order.js';

/** The markers of a read-write lock's nodes: what separates the join's guid from the sequence. */
export const READ_MARKER = '-read-';
export const WRITE_MARKER = '-write-';

interface RwChild {
  readonly child: string;
  readonly write: boolean;
  readonly seq: number;
}

/** A read-write queue child's kind and sequence, or null for anything that is not one. */
function parseChild(child: string): RwChild | null {
  let at = child.lastIndexOf(WRITE_MARKER);
  let write = true;
  let digits: string;
  if (at !== -1) digits = child.slice(at + WRITE_MARKER.length);
  else {
    at = child.lastIndexOf(READ_MARKER);
    if (at === -1) return null;
    write = false;
    digits = child.slice(at + READ_MARKER.length);
  }
  const seq = parseSequence(digits);
  return seq === null ? null : { child, write, seq };
}

/** The queue in arrival order (lowest sequence first, across the 32-bit wrap); foreign children are ignored. */
function sortRw(children: readonly string[]): RwChild[] {
  return children
    .map(parseChild)
    .filter((e): e is RwChild => e !== null)
    .sort((a, b) => compareSequence(a.seq, b.seq));
}

/** Whether a read-write queue child is a writer's (false: a reader's or not ours). */
export function isWriteNode(child: string): boolean {
  return parseChild(child)?.write === true;
}

/** The read-write queue's children in arrival order (for status and observers). */
export function sortRwQueue(children: readonly string[]): string[] {
  return sortRw(children).map((e) => e.child);
}

/**
 * A reader's place: held if no write node is ahead of it; else waiting for
 * the nearest write node ahead, `ahead` counting the nodes up to and
 * including that writer (1: the writer is the head, so once it goes nothing
 * but readers is ahead of us and the reader holds without listing again).
 * Null: our node is not in the listing.
 */
export function readerPosition(children: readonly string[], child: string): TurnOutcome | null {
  if (children.length === 1) return children[0] === child ? TURN : null;
  const sorted = sortRw(children);
  const index = sorted.findIndex((e) => e.child === child);
  if (index === -1) return null;
  for (let i = index - 1; i >= 0; i--) {
    const entry = sorted[i] as RwChild;
    if (entry.write) return { turn: false, predecessor: entry.child, ahead: i + 1 };
  }
  return TURN;
}

/** A writer's place: held when first; else waiting for its immediate predecessor (reader or writer). Null: our node is gone. */
export function writerPosition(children: readonly string[], child: string): TurnOutcome | null {
  if (children.length === 1) return children[0] === child ? TURN : null;
  const sorted = sortRw(children);
  const index = sorted.findIndex((e) => e.child === child);
  if (index === -1) return null;
  if (index === 0) return TURN;
  return { turn: false, predecessor: (sorted[index - 1] as RwChild).child, ahead: index };
}
