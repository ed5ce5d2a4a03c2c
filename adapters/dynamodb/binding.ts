// Binding an item's fence to one lock, as fencekeeper/s3 binds a key: the
// bound lock is kept in the item itself, a string attribute (`fencing_lock`
// by default) beside the token, so the write's one condition checks the lock
// and the token together:
//
//   a bare token           AND attribute_not_exists(#fk_l)
//   a sequencer            AND (attribute_not_exists(#fk_l) OR #fk_l = :fk_l)
//
// A bound item takes only its lock's sequencers: another lock's (another
// kind, name or source) and bare tokens are refused with
// SequencerMismatchError, nothing written; tokens of different locks are not
// comparable. Unbound items take bare tokens and sequencers alike. A write
// binds with `{ bind }`, presenting a sequencer of that very lock; binding
// again to the same lock is a no-op, and a binding is never replaced.
//
// UpdateItem leaves the attribute alone, so an update stays one request. A
// PutItem (a put, or the tombstone of a delete) replaces the whole item, so
// it must carry the binding on a bound item and must not add one to an
// unbound item, and it cannot know which without reading: it is sent for the
// unbound case (`attribute_not_exists(#fk_l)`, nothing added), and when the
// refusal shows the item bound to the presented lock, sent once more carrying
// the binding (`#fk_l = :fk_l`). A put or delete of a bound item costs that
// one request more; unbound items, and updates, pay nothing.
//
// Text form: fk1:<kind>:<source kind>:<source id>:<lock name, percent-encoded>,
// a sequencer's text form without its token (../../src/sequencer.ts), as S3's.
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import {
  CorruptFenceError, InvalidArgumentError, SequencerMismatchError, fenceBinding, matchesBinding,
  type FenceBinding, type ResolvedFencing, type Sequencer,
} from '../../src/index.js';

export function formatBinding(binding: FenceBinding): string {
  return ['fk1', binding.kind, binding.source.kind, binding.source.id, encodeURIComponent(binding.lock)].join(':');
}

export function bindingOf(presented: Sequencer): FenceBinding {
  return fenceBinding({ kind: presented.kind, lock: presented.name, source: presented.source });
}

/** The binding an item carries (null: never bound); anything unreadable fails closed. */
export function storedBinding(resource: string, item: Record<string, AttributeValue> | undefined, attribute: string): FenceBinding | null {
  const value = item?.[attribute];
  if (value === undefined) return null;
  const corrupt = (): CorruptFenceError =>
    new CorruptFenceError(resource, `${resource} carries ${attribute} that is not a lock binding; refusing to overwrite or trust it (fail closed)`);
  if (typeof value.S !== 'string') throw corrupt();
  const parts = value.S.split(':');
  if (parts.length !== 5 || parts[0] !== 'fk1') throw corrupt();
  const [, kind, sourceKind, sourceId, encoded] = parts as [string, string, string, string, string];
  try {
    const lock = decodeURIComponent(encoded);
    if (encodeURIComponent(lock) !== encoded) throw corrupt();
    return fenceBinding({ kind: kind as FenceBinding['kind'], lock, source: { kind: sourceKind, id: sourceId } });
  } catch (error) {
    if (error instanceof CorruptFenceError) throw error;
    throw corrupt();
  }
}

/** The `bind` option, checked before any request: a binding, made by a write of that very lock. */
export function checkBindOption(bind: unknown, fencing: ResolvedFencing): FenceBinding | null {
  if (bind === undefined) return null;
  const wanted = fenceBinding(bind as FenceBinding);
  if (fencing.sequencer === null || !matchesBinding(fencing.sequencer, wanted)) {
    throw new InvalidArgumentError(`bind: an item is bound by a write of the lock it binds to; pass that lock's sequencer as the token (${wanted.kind} ${wanted.lock})`);
  }
  return wanted;
}

/** The refusal of a presented lock by a bound item, or null when the item takes it. */
export function mismatch(resource: string, stored: FenceBinding | null, fencing: ResolvedFencing): SequencerMismatchError | null {
  if (stored === null) return null;
  const presented = fencing.sequencer;
  if (presented !== null && matchesBinding(presented, stored)) return null;
  return new SequencerMismatchError(resource, stored, presented === null ? null : { kind: presented.kind, lock: presented.name, source: presented.source, token: presented.token });
}
