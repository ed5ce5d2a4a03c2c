// bindFence() / bindTable(): record, once, which lock guards a fence or a
// table's token column (fencekeeper_fence_bindings, fencekeeper_table_bindings).
// From then on every admission to that fence (withFence, MySqlFenceStore)
// and every row helper's write to that table must present a sequencer of
// exactly that lock; another lock's sequencer and a bare token are refused
// with SequencerMismatchError and change nothing.
import { FenceAlreadyBoundError, InvalidArgumentError, fenceBinding, type FenceBinding } from '../../src/index.js';
import { ER_DUP_ENTRY, errnoOf, isPool, query, rowsOf, type MySqlPool, type MySqlQueryable } from './database.js';
import { bindingFrom, rollback } from './fence.js';
import { checkResource, tableName } from './identifiers.js';

/**
 * Bind the fence of `resource` to one lock (`{ kind, lock, source }`: a
 * Sequencer's fields without its token). Binding again to the same lock is
 * a no-op; to another lock rejects with FenceAlreadyBoundError and changes
 * nothing. bindFence waits for an admission holding the fence to end (it
 * locks the fence row, as an admission does), so no admission that began
 * unbound is still open when it returns.
 */
export async function bindFence(pool: MySqlPool, resource: string, binding: FenceBinding): Promise<FenceBinding> {
  checkResource(resource);
  const wanted = fenceBinding(binding);
  const recorded = await inTransaction(pool, async (tx) => {
    await query(tx, 'SELECT resource FROM fencekeeper_fences WHERE resource = ? FOR UPDATE', [resource]);
    await insertBinding(tx, 'INSERT INTO fencekeeper_fence_bindings (resource, kind, lock_name, source_kind, source_id, bound_at) VALUES (?, ?, ?, ?, ?, NOW(6))', [resource], wanted);
    const [row] = await rowsOf(tx, 'SELECT kind, lock_name, source_kind, source_id FROM fencekeeper_fence_bindings WHERE resource = ? LOCK IN SHARE MODE', [resource]);
    return bindingFrom(row);
  });
  return sameOrRefused(resource, wanted, recorded);
}

/** The lock the fence of `resource` is bound to, or null. */
export async function fenceBindingOf(pool: MySqlQueryable, resource: string): Promise<FenceBinding | null> {
  checkResource(resource);
  const [row] = await rowsOf(pool, 'SELECT kind, lock_name, source_kind, source_id FROM fencekeeper_fence_bindings WHERE resource = ?', [resource]);
  return bindingFrom(row);
}

/**
 * Bind `table` (`table` or `database.table`; its binding is kept under
 * `database.table`, so spell it the same way everywhere, as the row helpers
 * see it) to one lock. Same rules as bindFence. A row helper reads the
 * binding inside its own statement; under REPEATABLE READ that read locks
 * (shared), so bindTable waits for transactions that wrote the table
 * unbound; under READ COMMITTED it does not wait for them.
 */
export async function bindTable(pool: MySqlPool, table: string, binding: FenceBinding): Promise<FenceBinding> {
  const name = tableName(table);
  const wanted = fenceBinding(binding);
  const recorded = await inTransaction(pool, async (tx) => {
    await insertBinding(tx, `INSERT INTO fencekeeper_table_bindings (relation, kind, lock_name, source_kind, source_id, bound_at) VALUES (${name.relation}, ?, ?, ?, ?, NOW(6))`, [], wanted);
    const [row] = await rowsOf(tx, `SELECT kind, lock_name, source_kind, source_id FROM fencekeeper_table_bindings WHERE relation = ${name.relation} LOCK IN SHARE MODE`);
    return bindingFrom(row);
  });
  return sameOrRefused(table, wanted, recorded);
}

/** The lock `table` is bound to, or null. */
export async function tableBindingOf(pool: MySqlQueryable, table: string): Promise<FenceBinding | null> {
  const name = tableName(table);
  const [row] = await rowsOf(pool, `SELECT kind, lock_name, source_kind, source_id FROM fencekeeper_table_bindings WHERE relation = ${name.relation}`);
  return bindingFrom(row);
}

async function insertBinding(tx: MySqlQueryable, sql: string, head: unknown[], wanted: FenceBinding): Promise<void> {
  try {
    await query(tx, sql, [...head, wanted.kind, wanted.lock, wanted.source.kind, wanted.source.id]);
  } catch (error) {
    // Bound already: the recorded binding is read and compared.
    if (errnoOf(error) !== ER_DUP_ENTRY) throw error;
  }
}

function sameOrRefused(name: string, wanted: FenceBinding, recorded: FenceBinding | null): FenceBinding {
  if (recorded === null) throw new Error('unreachable: the binding row is gone within its own transaction');
  if (recorded.kind !== wanted.kind || recorded.lock !== wanted.lock || recorded.source.kind !== wanted.source.kind || recorded.source.id !== wanted.source.id) {
    throw new FenceAlreadyBoundError(name, recorded);
  }
  return wanted;
}

async function inTransaction<T>(pool: MySqlPool, body: (tx: MySqlQueryable) => Promise<T>): Promise<T> {
  if (!isPool(pool)) throw new InvalidArgumentError('binding needs a mysql2 promise Pool');
  const connection = await pool.getConnection();
  let broken = false;
  try {
    await query(connection, 'START TRANSACTION');
    try {
      const result = await body(connection);
      await query(connection, 'COMMIT');
      return result;
    } catch (error) {
      await rollback(connection).catch(() => { broken = true; });
      throw error;
    }
  } finally {
    if (broken) connection.destroy();
    else connection.release();
  }
}
