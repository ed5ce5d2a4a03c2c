// bindFence(): record, once, which lock guards a fence in fencekeeper_fences.
// From then on every admission to that fence (withFence, PostgresFenceStore)
// must present a sequencer of exactly that lock; see ./row.ts for the
// check, made in the advance statement itself.
import { FenceAlreadyBoundError, fenceBinding, type FenceBinding } from '../../../src/index.js';
import { run, type Database } from '../database.js';
import { bindingFrom } from './row.js';
import { checkResource } from '../identifiers.js';
import { inTransaction } from '../migrate.js';

const INSERT = `INSERT INTO fencekeeper_fence_bindings (resource, kind, lock, source_kind, source_id)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (resource) DO NOTHING`;
const READ = 'SELECT kind, lock, source_kind, source_id FROM fencekeeper_fence_bindings WHERE resource = $1';
// Waits for the admission that holds the fence row (if any) to end, so that
// bindFence returns only once no admission that began unbound is still open.
// A plain SELECT ... FOR UPDATE would not see the row a resource's very first
// admission has inserted and not yet committed, and would not wait for it; an
// insert that conflicts does wait. So: a no-op upsert (it waits for the row's
// holder, committed or not), and when it placed a row where none was, the
// placeholder is deleted again in this same transaction (no mark appears).
const WAIT_FOR_HOLDER = `INSERT INTO fencekeeper_fences AS f (resource, token) VALUES ($1, 1)
ON CONFLICT (resource) DO UPDATE SET token = f.token
RETURNING (xmax = 0) AS placed`;
const REMOVE_PLACEHOLDER = 'DELETE FROM fencekeeper_fences WHERE resource = $1';

/**
 * Bind the fence of `resource` to one lock: `{ kind: 'lock' | 'election',
 * lock: name, source: { kind, id } }` (a Sequencer's fields without its
 * token). Binding is explicit and happens once: binding again to the same
 * lock is a no-op; to another lock rejects with FenceAlreadyBoundError and
 * changes nothing. Nothing ever binds a fence implicitly.
 *
 * After bindFence resolves, every admission that starts is checked in its
 * advance statement against the recorded binding (never against what the
 * caller presents or the current lock): a sequencer of another kind, lock or
 * source, and a bare token, reject with SequencerMismatchError and change
 * nothing. The fence's mark is kept: the guarding lock's tokens continue
 * from it. bindFence waits for an admission holding the fence to end.
 *
 * The row helpers (fencedUpdate, fencedUpsert, ...) keep their own token
 * column and do not read this binding: bind their table with bindTable.
 */
export async function bindFence(db: Database, resource: string, binding: FenceBinding): Promise<FenceBinding> {
  checkResource(resource);
  const wanted = fenceBinding(binding);
  const recorded = await inTransaction(db, async (tx) => {
    await run(tx, { text: INSERT, values: [resource, wanted.kind, wanted.lock, wanted.source.kind, wanted.source.id], prepared: false });
    const { rows } = await run(tx, { text: READ, values: [resource], prepared: false });
    const waited = await run(tx, { text: WAIT_FOR_HOLDER, values: [resource], prepared: false });
    if (waited.rows[0]?.['placed'] === true) await run(tx, { text: REMOVE_PLACEHOLDER, values: [resource], prepared: false });
    return bindingFrom(rows[0]);
  });
  if (recorded === null) throw new Error('unreachable: the binding row is gone within its own transaction');
  if (recorded.kind !== wanted.kind || recorded.lock !== wanted.lock || recorded.source.kind !== wanted.source.kind || recorded.source.id !== wanted.source.id) {
    throw new FenceAlreadyBoundError(resource, recorded);
  }
  return wanted;
}

/** The lock the fence of `resource` is bound to, or null if it was never bound. */
export async function fenceBindingOf(db: Database, resource: string): Promise<FenceBinding | null> {
  checkResource(resource);
  const { rows } = await run(db, { text: READ, values: [resource], prepared: false });
  return bindingFrom(rows[0]);
}
