// Binding an S3 key's fence to one lock: the bound lock is kept in the fence
// itself, as one more metadata entry (x-amz-meta-fencing-lock) of the object
// that carries the token: the object at the key in place, the pointer in the
// pointer layout. Every fenced write reads it with the token and carries it
// forward to the object it writes; the collector's pointer rewrites carry it
// too.
//
// Why in the fence and not in a separate binding object: a fenced write is
// one conditional PUT of one key, conditioned on the ETag the fence was read
// with. With the binding in that same object, the If-Match that keeps a
// stale token out keeps a wrong lock out too, in the same step: a binding
// made after our read changed the ETag, so our PUT fails with 412 and the
// write judges again, now against the binding (as PostgreSQL checks the
// binding in the advance statement itself). A separate binding object would
// cost a GET per write, and S3 conditions cover one key only: a binding
// object created between a writer's read of it and its PUT of the key could
// not stop that PUT. The price: a key is bound by a fenced write (or delete)
// of the guarding lock, `{ bind }`, never by a metadata-only change (which
// would keep the bytes, and so the ETag, in place, letting a paused holder's
// If-Match through), and a prefix cannot be bound as a whole (it has no
// object of its own): bind each key, with its first write if need be.
//
// Text form: the core's formatBinding (a sequencer's text form without its
// token).
import { CorruptFenceError, InvalidArgumentError, SequencerMismatchError, fenceBinding, matchesBinding, type FenceBinding, type ResolvedFencing } from '../../src/index.js';
import { formatBinding, parseBinding as parseBindingText, publishRefused } from '../../src/extend.js';

/** The lock the key's fence is bound to (absent: never bound). */
export const BINDING_METADATA = 'fencing-lock';

/** Parse the stored binding; anything else fails closed (CorruptFenceError: never overwritten). */
export function parseBinding(resource: string, text: string): FenceBinding {
  try {
    return parseBindingText(text);
  } catch {
    throw new CorruptFenceError(resource, `${resource} carries ${BINDING_METADATA} metadata that is not a lock binding (${JSON.stringify(text.slice(0, 60))}); refusing to overwrite or trust it (fail closed)`);
  }
}

/** The `bind` option, checked before any request: a binding, made by a write of that very lock. */
export function checkBindOption(bind: unknown, fencing: ResolvedFencing): FenceBinding | null {
  if (bind === undefined) return null;
  const wanted = fenceBinding(bind as FenceBinding);
  if (fencing.sequencer === null || !matchesBinding(fencing.sequencer, wanted)) {
    throw new InvalidArgumentError(`bind: a key is bound by a write of the lock it binds to; pass that lock's sequencer as the token (${wanted.kind} ${wanted.lock})`);
  }
  return wanted;
}

/**
 * Judge the presented lock against the key's stored binding; the binding the
 * write must carry (null: the key stays unbound). Unbound keys take bare
 * tokens and sequencers of any lock. A bound key takes only its lock's
 * sequencers: another lock's, kind's or source's, and a bare token, are
 * refused with SequencerMismatchError (published on fence:refused), nothing
 * written. Binding again to the same lock is a no-op; asking to bind it to
 * another lock needs that lock's sequencer, which the stored binding refuses:
 * a binding is never replaced by a write.
 */
export function judgeBinding(resource: string, stored: FenceBinding | null, fencing: ResolvedFencing, bind: FenceBinding | null): FenceBinding | null {
  if (stored === null) return bind;
  const presented = fencing.sequencer;
  if (presented === null || !matchesBinding(presented, stored)) {
    const error = new SequencerMismatchError(resource, stored, presented === null ? null : { kind: presented.kind, lock: presented.name, source: presented.source, token: presented.token });
    publishRefused('s3', error, fencing.token);
    throw error;
  }
  // A `bind` matches the presented sequencer (checkBindOption), so here it names the stored lock: a no-op.
  return stored;
}

/** The metadata entry for `binding` (none for an unbound key). */
export function bindingMetadata(binding: FenceBinding | null): Record<string, string> {
  return binding === null ? {} : { [BINDING_METADATA]: formatBinding(binding) };
}
