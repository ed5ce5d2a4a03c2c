// bindTable(): record, once, which lock guards a table that carries its own
// token column, in fencekeeper_table_bindings (migration 007). From then on
// every row helper's statement on that table (fencedUpdate, fencedInsert,
// fencedUpsert, fencedDelete in ./fenced-rows.ts) carries the check built here: a
// NOT EXISTS against the binding row, inside the write itself, so there is no
// extra round trip and no moment between the check and the write.
import { FenceAlreadyBoundError, SequencerMismatchError, fenceBinding, matchesBinding, type FenceBinding, type ResolvedFencing } from '../../../src/index.js';
import { run, type Database } from '../database.js';
import { bindingFrom, bindingRefuses, bindingValues } from '../fence/row.js';
import { quoteLiteral, quoteTable } from '../identifiers.js';
import { inTransaction } from '../migrate.js';

const INSERT = `INSERT INTO fencekeeper_table_bindings (relation, kind, lock, source_kind, source_id)
VALUES ($1::regclass, $2, $3, $4, $5) ON CONFLICT (relation) DO NOTHING`;
const READ = 'SELECT kind, lock, source_kind, source_id FROM fencekeeper_table_bindings WHERE relation = $1::regclass';

/**
 * Bind `table` (`table` or `schema.table`, resolved on the server as the row
 * helpers resolve it) to one lock: `{ kind: 'lock' | 'election', lock: name,
 * source: { kind, id } }` (a Sequencer's fields without its token). Binding
 * is explicit and happens once: binding again to the same lock is a no-op; to
 * another lock rejects with FenceAlreadyBoundError and changes nothing. The
 * row helpers never bind a table themselves. To re-bind (the source's
 * identity changed, e.g. a Redlock majority lost its data), an operator deletes the row by hand:
 * `DELETE FROM fencekeeper_table_bindings WHERE relation = 'docs'::regclass`.
 *
 * After bindTable resolves, every row helper's write to the table is checked
 * in its own statement against the recorded binding: a sequencer of another
 * kind, lock or source, and a bare token, reject with SequencerMismatchError
 * and change nothing. The tokens already in the token column are kept: the
 * guarding lock's tokens continue from them.
 *
 * bindTable takes the table's SHARE lock before it records the binding: it
 * waits for every transaction that is writing to the table to end (so no
 * write that was checked as unbound commits after bindTable returns), and
 * writes that start meanwhile wait for bindTable to commit, then see the
 * binding. A REPEATABLE READ or SERIALIZABLE transaction whose snapshot was
 * taken before the binding committed does not see it; its write to the table
 * fails with a serialization failure (SQLSTATE 40001), and the retry, with a
 * fresh snapshot, is checked against the binding.
 */
export async function bindTable(db: Database, table: string, binding: FenceBinding): Promise<FenceBinding> {
  const quoted = quoteTable(table);
  const wanted = fenceBinding(binding);
  // Bound already (the common case of a deploy that binds at every start): answered without locking the table.
  const existing = await tableBindingOf(db, table);
  if (existing === null) {
    const recorded = await inTransaction(db, async (tx) => {
      await run(tx, { text: `LOCK TABLE ${quoted} IN SHARE MODE`, values: [], prepared: false });
      await run(tx, { text: INSERT, values: [quoted, wanted.kind, wanted.lock, wanted.source.kind, wanted.source.id], prepared: false });
      // A concurrent bindTable that won the insert is committed by now (ours waited for its key): read whichever is recorded.
      const { rows } = await run(tx, { text: READ, values: [quoted], prepared: false });
      return bindingFrom(rows[0]);
    });
    if (recorded === null) throw new Error('unreachable: the binding row is gone within its own transaction');
    return sameOrRefused(table, wanted, recorded);
  }
  return sameOrRefused(table, wanted, existing);
}

function sameOrRefused(table: string, wanted: FenceBinding, recorded: FenceBinding): FenceBinding {
  if (recorded.kind !== wanted.kind || recorded.lock !== wanted.lock || recorded.source.kind !== wanted.source.kind || recorded.source.id !== wanted.source.id) {
    throw new FenceAlreadyBoundError(table, recorded);
  }
  return wanted;
}

/** The lock `table` is bound to, or null if it was never bound. */
export async function tableBindingOf(db: Database, table: string): Promise<FenceBinding | null> {
  const quoted = quoteTable(table);
  const { rows } = await run(db, { text: READ, values: [quoted], prepared: false });
  return bindingFrom(rows[0]);
}

/**
 * The condition a row helper's statement adds: true when the table is
 * unbound, or bound to exactly the presented lock. `quotedTable` is the
 * table as the statement names it (validated and quoted), written into the
 * text as a regclass literal: PostgreSQL resolves it when it analyzes the
 * statement, as it resolves the statement's own target, so a prepared
 * statement does not parse the name on every execution (and a plan is
 * re-analyzed, the literal with it, when the table or the search_path
 * changes). `presented` is the first of four parameters holding the
 * presented lock's kind, name, source kind and source id, all NULL for a bare
 * token (refused by any binding). One probe of the bindings' primary key per
 * statement (an uncorrelated subquery: an InitPlan, not once per row).
 */
export function bindingAdmits(quotedTable: string, presented: number): string {
  const [kind, lock, sourceKind, sourceId] = [0, 1, 2, 3].map((i) => `$${presented + i}::text`) as [string, string, string, string];
  const relation = `${quoteLiteral(quotedTable)}::regclass`;
  return `NOT EXISTS (SELECT 1 FROM fencekeeper_table_bindings b WHERE b.relation = ${relation}
    AND ${bindingRefuses(kind, lock, sourceKind, sourceId)})
  AND ${bindingVisible(relation)}`;
}

/**
 * Under REPEATABLE READ and SERIALIZABLE the check above reads the
 * transaction's snapshot: a binding committed after it is probed for by
 * fencekeeper_check_table_binding (migration 008), which fails the statement
 * with 40001 then. READ COMMITTED (a fresh snapshot per statement) skips it:
 * the OR's first arm is a setting read, no function call.
 */
export function bindingVisible(relation: string): string {
  return `(current_setting('transaction_isolation') = 'read committed' OR fencekeeper_check_table_binding(${relation}))`;
}

/** The four parameters bindingAdmits reads, in its order. */
export const presentedLock = (fencing: ResolvedFencing): unknown[] => bindingValues(fencing.sequencer);

/**
 * The refusal path's columns: the table's binding, if any, read beside the
 * token the refusal reports (`FROM (SELECT ...) AS state` + this). `relation`
 * is the parameter holding the quoted table name.
 */
export function bindingJoin(relation: number): string {
  return `LEFT JOIN fencekeeper_table_bindings b ON b.relation = $${relation}::regclass`;
}

export const BINDING_COLUMNS = 'b.kind, b.lock, b.source_kind, b.source_id';

/**
 * A write that touched nothing, on a table whose binding (read by the refusal
 * query) does not admit the presented lock: the SequencerMismatchError to
 * throw, or null when the binding admits it (then it was a stale token or no
 * such row). `table` is the name as the caller wrote it.
 */
export function tableMismatch(table: string, fencing: ResolvedFencing, row: Record<string, unknown> | undefined): SequencerMismatchError | null {
  const bound = bindingFrom(row);
  if (bound === null) return null;
  const presented = fencing.sequencer;
  if (presented !== null && matchesBinding(presented, bound)) return null;
  return new SequencerMismatchError(table, bound, presented === null ? null : { kind: presented.kind, lock: presented.name, source: presented.source, token: presented.token });
}
