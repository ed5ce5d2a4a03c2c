// Row-level fencing for tables that carry their own token column
// (`fencing_token BIGINT` by default), with the same option shapes as
// fencekeeper/postgres. A row whose token column is NULL was never written
// under a fence: the first fenced write claims it.
//
// fencedUpdate is one statement: the comparison sits in its WHERE, and an
// UPDATE is a current read in InnoDB (it reads and locks the latest row,
// never the transaction's snapshot), so the check and the write are one
// atomic step at every isolation level. Only when it matches nothing does a
// second, locking, read tell "stale" (StaleTokenError with the row's token)
// from "no such row" (0).
//
// Deletes keep the fence: fencedDelete() locks the rows it will delete,
// writes each one's key and the deleting token into fencekeeper_tombstones,
// then deletes them. fencedInsert()/fencedUpsert() read the tombstone with a
// locking read before writing, and again after inserting: under READ
// COMMITTED a missing tombstone key is not locked, so a newer holder could
// delete a row and tombstone it between the two reads' first and the
// insert; the second read sees that (the newer holder's delete had locked
// the row our INSERT waited for) and the row just inserted is deleted again
// before the refusal is thrown. These helpers take several statements:
// given a Pool they run in a transaction of their own on one connection;
// given a connection, in whatever transaction it is in (withFence's, or
// yours; in autocommit mode each statement commits on its own). In a
// transaction of their own they start over when InnoDB rolls it back as a
// deadlock's victim.
//
// None of the SQL uses RETURNING, `INSERT ... AS`, or VALUES() in ON
// DUPLICATE KEY UPDATE (deprecated in MySQL 8.0.20): values are sent again
// as parameters instead. MariaDB 10.11 and MySQL 8 accept all of it.
import { InvalidArgumentError, SequencerMismatchError, StaleTokenError, formatToken, resolveFencing, type FencingToken, type ResolvedFencing } from '../../src/index.js';
import { fenceAdvances, publishRefused, refuseCheckOnly, traceFencedWrite } from '../../src/extend.js';
import type { FencedDeleteOptions, FencedInsertOptions, FencedUpdateOptions, FencedUpsertOptions } from '../../src/extend.js';
export type { FencedDeleteOptions, FencedInsertOptions, FencedUpdateOptions, FencedUpsertOptions };
import { ER_DUP_ENTRY, ER_LOCK_DEADLOCK, errnoOf, headerOf, isPool, matchedRows, query, readToken, rowsOf, type MySqlPool, type MySqlQueryable } from './database.js';
import { bindingFrom, mismatch, rollback } from './fence.js';
import { assertIdentifier, checkColumns, checkKey, quoteIdentifier, rowKeyText, tableName, type TableName } from './identifiers.js';

const DEFAULT_TOKEN_COLUMN = 'fencing_token';
// Why only fencedUpdate has the check-only mode among the row helpers: the
// others create or remove a row, and the row (or its tombstone) is where the
// mark lives, so each would have to write a mark it did not present.
const NO_CHECK_ONLY_ROW = 'the row or tombstone it writes carries the mark itself; only fencedUpdate leaves it unchanged';
const MAX_INSERT_ATTEMPTS = 3;

/** `a = ? AND b IS NULL ...`, appending the parameters to `values`. */
function whereClause(entries: readonly [string, unknown][], values: unknown[]): string {
  return entries.map(([column, value]) => {
    if (value === null) return `${quoteIdentifier(column)} IS NULL`;
    values.push(value);
    return `${quoteIdentifier(column)} = ?`;
  }).join(' AND ');
}

/** The token column admits the token (appends it). */
function tokenPasses(column: string, token: FencingToken, values: unknown[]): string {
  values.push(formatToken(token));
  return `(${quoteIdentifier(column)} <= CAST(? AS SIGNED) OR ${quoteIdentifier(column)} IS NULL)`;
}

/** The table is unbound, or bound to exactly the presented lock (appends the presented lock's four fields, NULL for a bare token). */
function bindingAdmits(table: TableName, fencing: ResolvedFencing, values: unknown[]): string {
  const s = fencing.sequencer;
  values.push(s?.kind ?? null, s?.name ?? null, s?.source.kind ?? null, s?.source.id ?? null);
  return `NOT EXISTS (SELECT 1 FROM fencekeeper_table_bindings AS b WHERE b.relation = ${table.relation}
  AND NOT (b.kind <=> ? AND b.lock_name <=> ? AND b.source_kind <=> ? AND b.source_id <=> ?))`;
}

const BINDING_OF = (table: TableName): string => `SELECT kind, lock_name, source_kind, source_id FROM fencekeeper_table_bindings WHERE relation = ${table.relation} LOCK IN SHARE MODE`;

interface Checked {
  readonly table: TableName;
  readonly tableText: string;
  readonly fencing: ResolvedFencing;
  readonly tokenColumn: string;
}

function checkCommon(options: unknown, what: string): Checked & { readonly o: Record<string, unknown> } {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError(`${what} needs an options object`);
  const o = options as Record<string, unknown>;
  const table = tableName(o['table']);
  const fencing = resolveFencing(o['token']);
  const tokenColumn = o['tokenColumn'] === undefined ? DEFAULT_TOKEN_COLUMN : assertIdentifier(o['tokenColumn'], 'tokenColumn');
  return { o, table, tableText: o['table'] as string, fencing, tokenColumn };
}

/**
 * `UPDATE table SET <set>, token = n WHERE <where> AND token <= n`: one round
 * trip when it updates. Answers the number of rows matched (written). When
 * nothing matched, one more (locking) read: a row matching `where` with a
 * larger token → StaleTokenError (current: the largest such token); none → 0.
 * With a `where` matching several rows each row is fenced on its own.
 * `advance: false` (check-only, a reader of a read-write lock): the same
 * compare, but the rows keep their token column as it was.
 */
export async function fencedUpdate(db: MySqlQueryable, options: FencedUpdateOptions): Promise<number> {
  const c = checkCommon(options, 'fencedUpdate');
  const advance = fenceAdvances(c.o, 'fencedUpdate');
  const where = checkColumns(c.o['where'], 'where');
  const set = checkColumns(c.o['set'], 'set');
  if (!advance && set.length === 0) throw new InvalidArgumentError('fencedUpdate: set must name a column to write (check-only writes no token)');
  if (set.some(([column]) => column === c.tokenColumn)) throw new InvalidArgumentError(`set must not write the token column ${c.tokenColumn}: it is set to the token`);
  return traceFencedWrite('mysql', 'update', c.tableText, c.fencing.token, async () => {
    const values: unknown[] = [];
    const assignments = set.map(([column, value]) => {
      values.push(value);
      return `${quoteIdentifier(column)} = ?`;
    });
    // Check-only: the rows keep their token column (a NULL stays NULL: it admits every token, as before).
    if (advance) {
      values.push(formatToken(c.fencing.token));
      assignments.push(`${quoteIdentifier(c.tokenColumn)} = CAST(? AS SIGNED)`);
    }
    const sql = `UPDATE ${c.table.quoted} SET ${assignments.join(', ')} WHERE ${whereClause(where, values)} AND ${tokenPasses(c.tokenColumn, c.fencing.token, values)} AND ${bindingAdmits(c.table, c.fencing, values)}`;
    const matched = matchedRows(await headerOf(db, sql, values));
    if (matched > 0) return matched;
    await refuseIfStale(db, c, where);
    return 0;
  });
}

/**
 * Delete the rows matching `where` whose token is not larger than `token`,
 * keeping each one's fence in fencekeeper_tombstones (a larger tombstone is
 * kept), in the same transaction. Answers the number of rows deleted; none
 * deleted because a matching row holds a larger token → StaleTokenError; no
 * matching row → 0.
 */
export async function fencedDelete(db: MySqlQueryable, options: FencedDeleteOptions): Promise<number> {
  const c = checkCommon(options, 'fencedDelete');
  refuseCheckOnly(fenceAdvances(c.o, 'fencedDelete'), 'fencedDelete', NO_CHECK_ONLY_ROW);
  const where = checkColumns(c.o['where'], 'where');
  const key = c.o['key'] === undefined ? where.map(([column]) => column) : checkKey(c.o['key']);
  return traceFencedWrite('mysql', 'delete', c.tableText, c.fencing.token, () => inTransaction(db, async (tx) => {
    const values: unknown[] = [];
    const keyText = key.map((column, i) => `CAST(${quoteIdentifier(column)} AS CHAR) AS k${i}`).join(', ');
    const conditions = `${whereClause(where, values)} AND ${tokenPasses(c.tokenColumn, c.fencing.token, values)}`;
    const locked = await rowsOf(tx, `SELECT ${keyText} FROM ${c.table.quoted} WHERE ${conditions} AND ${bindingAdmits(c.table, c.fencing, values)} FOR UPDATE`, values);
    if (locked.length === 0) {
      await refuseIfStale(tx, c, where);
      return 0;
    }
    const keys = locked.map((row) => key.map((_, i) => row[`k${i}`]));
    const token = formatToken(c.fencing.token);
    // The tombstones first, then the rows (which this transaction holds locked already).
    for (const rowKey of keys) {
      await query(tx, `INSERT INTO fencekeeper_tombstones (relation, row_key, token, deleted_at) VALUES (${c.table.relation}, ?, CAST(? AS SIGNED), NOW(6))
ON DUPLICATE KEY UPDATE token = GREATEST(token, CAST(? AS SIGNED)), deleted_at = NOW(6)`, [rowKeyText(rowKey), token, token]);
    }
    const deleteValues: unknown[] = [];
    const deleteConditions = `${whereClause(where, deleteValues)} AND ${tokenPasses(c.tokenColumn, c.fencing.token, deleteValues)}`;
    const tuple = `(${key.map((column) => `CAST(${quoteIdentifier(column)} AS CHAR)`).join(', ')})`;
    const listed = keys.map((rowKey) => {
      deleteValues.push(...rowKey);
      return `(${rowKey.map(() => '?').join(', ')})`;
    }).join(', ');
    const { affectedRows } = await headerOf(tx, `DELETE FROM ${c.table.quoted} WHERE ${deleteConditions} AND ${tuple} IN (${listed})`, deleteValues);
    return affectedRows;
  }));
}

/**
 * Insert a new row carrying `token`, unless its fence forbids it: no row
 * with this key and no larger tombstone → inserted, 1; a tombstone for the
 * key holds a larger token (a newer holder deleted the row) →
 * StaleTokenError; the row exists with a larger token → StaleTokenError;
 * the row exists with a token not larger → 0, left as it is (an insert
 * never overwrites: that is fencedUpsert).
 */
export async function fencedInsert(db: MySqlQueryable, options: FencedInsertOptions): Promise<number> {
  const c = checkCommon(options, 'fencedInsert');
  refuseCheckOnly(fenceAdvances(c.o, 'fencedInsert'), 'fencedInsert', NO_CHECK_ONLY_ROW);
  const row = checkRow(c);
  return traceFencedWrite('mysql', 'insert', c.tableText, c.fencing.token, () => inTransaction(db, async (tx) => {
    await refuseByTombstone(tx, c, row);
    try {
      await query(tx, row.insert, row.insertValues);
    } catch (error) {
      if (errnoOf(error) !== ER_DUP_ENTRY) throw error;
      const current = await rowToken(tx, c, row, 'LOCK IN SHARE MODE');
      // The duplicate was on another unique index: not ours to answer.
      if (current === undefined) throw error;
      if (current !== null && current > c.fencing.token) throw refused(new StaleTokenError(row.resource, c.fencing.token, current));
      return 0;
    }
    await undoIfTombstoned(tx, c, row);
    return 1;
  }));
}

/**
 * Insert the row, or update it when its token is not larger than `token`;
 * refuses to re-create a row whose tombstone is larger. Answers which it
 * did; a larger row token or tombstone → StaleTokenError.
 */
export async function fencedUpsert(db: MySqlQueryable, options: FencedUpsertOptions): Promise<'inserted' | 'updated'> {
  const c = checkCommon(options, 'fencedUpsert');
  refuseCheckOnly(fenceAdvances(c.o, 'fencedUpsert'), 'fencedUpsert', NO_CHECK_ONLY_ROW);
  const row = checkRow(c);
  return traceFencedWrite('mysql', 'upsert', c.tableText, c.fencing.token, () => inTransaction(db, async (tx) => {
    await refuseByTombstone(tx, c, row);
    for (let attempt = 1; ; attempt += 1) {
      const current = await rowToken(tx, c, row, 'FOR UPDATE');
      if (current !== undefined) {
        if (current !== null && current > c.fencing.token) throw refused(new StaleTokenError(row.resource, c.fencing.token, current));
        await query(tx, row.update, row.updateValues);
        return 'updated';
      }
      try {
        await query(tx, row.insert, row.insertValues);
      } catch (error) {
        // Inserted by someone else since the read (READ COMMITTED locks no missing key): read it again, locked.
        if (errnoOf(error) === ER_DUP_ENTRY && attempt < MAX_INSERT_ATTEMPTS) continue;
        throw error;
      }
      await undoIfTombstoned(tx, c, row);
      return 'inserted';
    }
  }));
}

interface RowShape {
  readonly resource: string;
  readonly keyText: string;
  readonly keyWhere: string;
  readonly keyValues: readonly unknown[];
  readonly insert: string;
  readonly insertValues: readonly unknown[];
  readonly update: string;
  readonly updateValues: readonly unknown[];
}

function checkRow(c: Checked & { readonly o: Record<string, unknown> }): RowShape {
  const values = checkColumns(c.o['values'], 'values');
  const key = checkKey(c.o['key']);
  if (values.some(([column]) => column === c.tokenColumn)) throw new InvalidArgumentError(`values must not hold the token column ${c.tokenColumn}: it is set to the token`);
  const byColumn = new Map(values);
  const keyValues = key.map((column) => {
    if (!byColumn.has(column)) throw new InvalidArgumentError(`values must hold the key column ${column}`);
    const value = byColumn.get(column);
    if (value === null) throw new InvalidArgumentError(`the key column ${column} must not be null`);
    return value;
  });
  const keyText = rowKeyText(keyValues);
  const token = formatToken(c.fencing.token);
  const keyWhere = key.map((column) => `${quoteIdentifier(column)} = ?`).join(' AND ');
  const columns = [...values.map(([column]) => quoteIdentifier(column)), quoteIdentifier(c.tokenColumn)];
  const insert = `INSERT INTO ${c.table.quoted} (${columns.join(', ')}) VALUES (${values.map(() => '?').join(', ')}, CAST(? AS SIGNED))`;
  const rest = values.filter(([column]) => !key.includes(column));
  const assignments = [...rest.map(([column]) => `${quoteIdentifier(column)} = ?`), `${quoteIdentifier(c.tokenColumn)} = CAST(? AS SIGNED)`];
  const update = `UPDATE ${c.table.quoted} SET ${assignments.join(', ')} WHERE ${keyWhere}`;
  return {
    resource: `${c.tableText} ${keyText}`,
    keyText,
    keyWhere,
    keyValues,
    insert,
    insertValues: [...values.map(([, value]) => value), token],
    update,
    updateValues: [...rest.map(([, value]) => value), token, ...keyValues],
  };
}

/** The row's token under a locking read: undefined when there is no such row, null when its token column is NULL. */
async function rowToken(tx: MySqlQueryable, c: Checked, row: RowShape, lock: 'FOR UPDATE' | 'LOCK IN SHARE MODE'): Promise<bigint | null | undefined> {
  const rows = await rowsOf(tx, `SELECT CAST(${quoteIdentifier(c.tokenColumn)} AS CHAR) AS token FROM ${c.table.quoted} WHERE ${row.keyWhere} ${lock}`, row.keyValues);
  return rows.length === 0 ? undefined : readToken(rows[0]?.['token']);
}

/** Before writing: the table's binding and the row's tombstone, in one locking read. */
async function refuseByTombstone(tx: MySqlQueryable, c: Checked, row: RowShape): Promise<void> {
  const [state] = await rowsOf(tx, `SELECT CAST(tb.token AS CHAR) AS tombstone, b.kind, b.lock_name, b.source_kind, b.source_id
FROM (SELECT 1 AS one) AS o
LEFT JOIN fencekeeper_tombstones AS tb ON tb.relation = ${c.table.relation} AND tb.row_key = ?
LEFT JOIN fencekeeper_table_bindings AS b ON b.relation = ${c.table.relation}
LOCK IN SHARE MODE`, [row.keyText]);
  const wrongLock = mismatch(c.tableText, c.fencing, bindingFrom(state));
  if (wrongLock !== null) throw refused(wrongLock, c.fencing.token);
  const tombstone = readToken(state?.['tombstone']);
  if (tombstone !== null && tombstone > c.fencing.token) throw refused(new StaleTokenError(row.resource, c.fencing.token, tombstone));
}

/** After inserting: a newer holder's tombstone that appeared since the first read takes the row out again. */
async function undoIfTombstoned(tx: MySqlQueryable, c: Checked, row: RowShape): Promise<void> {
  const [state] = await rowsOf(tx, `SELECT CAST(token AS CHAR) AS tombstone FROM fencekeeper_tombstones WHERE relation = ${c.table.relation} AND row_key = ? LOCK IN SHARE MODE`, [row.keyText]);
  const tombstone = readToken(state?.['tombstone']);
  if (tombstone === null || tombstone <= c.fencing.token) return;
  await query(tx, `DELETE FROM ${c.table.quoted} WHERE ${row.keyWhere}`, row.keyValues);
  throw refused(new StaleTokenError(row.resource, c.fencing.token, tombstone));
}

/** The rare path of update/delete: is the table bound to another lock, or does a matching row hold a larger token? Locking reads: never the snapshot. */
async function refuseIfStale(tx: MySqlQueryable, c: Checked, where: readonly [string, unknown][]): Promise<void> {
  const [binding] = await rowsOf(tx, BINDING_OF(c.table));
  const wrongLock = mismatch(c.tableText, c.fencing, bindingFrom(binding));
  if (wrongLock !== null) throw refused(wrongLock, c.fencing.token);
  const values: unknown[] = [];
  const [row] = await rowsOf(tx, `SELECT CAST(MAX(${quoteIdentifier(c.tokenColumn)}) AS CHAR) AS current FROM ${c.table.quoted} WHERE ${whereClause(where, values)} LOCK IN SHARE MODE`, values);
  const current = readToken(row?.['current']);
  if (current !== null && current > c.fencing.token) {
    throw refused(new StaleTokenError(`${c.tableText} ${JSON.stringify(Object.fromEntries(where), (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}`, c.fencing.token, current));
  }
}

function refused(error: StaleTokenError): StaleTokenError;
function refused(error: SequencerMismatchError, presented: FencingToken): SequencerMismatchError;
function refused(error: StaleTokenError | SequencerMismatchError, presented?: FencingToken): StaleTokenError | SequencerMismatchError {
  if (error instanceof SequencerMismatchError) publishRefused('mysql', error, presented as FencingToken);
  else publishRefused('mysql', error);
  return error;
}

/**
 * On a Pool: a transaction of its own on one connection, started over when
 * InnoDB picks it as a deadlock's victim (1213: concurrent first inserts of
 * one key deadlock on the gap locks REPEATABLE READ takes; the victim is
 * rolled back whole, and nothing of the caller's was in it). On a
 * connection: as it is, in the caller's transaction (a deadlock there is
 * the caller's to retry: InnoDB rolled back the whole transaction).
 */
async function inTransaction<T>(db: MySqlQueryable, body: (tx: MySqlQueryable) => Promise<T>): Promise<T> {
  if (!isPool(db)) return body(db);
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await transaction(db, body);
    } catch (error) {
      if (errnoOf(error) !== ER_LOCK_DEADLOCK || attempt >= DEADLOCK_ATTEMPTS) throw error;
      // A little jitter, so the same transactions do not meet again at once.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * attempt));
    }
  }
}

const DEADLOCK_ATTEMPTS = 20;

async function transaction<T>(pool: MySqlPool, body: (tx: MySqlQueryable) => Promise<T>): Promise<T> {
  const connection = await pool.getConnection();
  let broken = false;
  try {
    await query(connection, 'START TRANSACTION');
    let result: T;
    try {
      result = await body(connection);
      await query(connection, 'COMMIT');
    } catch (error) {
      await rollback(connection).catch(() => { broken = true; });
      throw error;
    }
    return result;
  } finally {
    if (broken) connection.destroy();
    else connection.release();
  }
}
