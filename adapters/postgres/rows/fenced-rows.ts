// Row-level fencing for tables that carry their own token column
// (`fencing_token bigint` by default): every write compares and stores the
// token in the same statement, so the check and the write are one atomic step.
//
// Cost model: the statement that succeeds is the only round trip. Only when a
// write touches nothing does one more query tell "stale" (StaleTokenError with
// the row's current token) from "no such row" (0). Answering that on every
// write (a CTE that always reports) measured 0.70x of a plain UPDATE; the
// conditional UPDATE alone 0.94x; so the rare case pays, not every write.
//
// A row whose token column is NULL has never been written under a fence: the
// first fenced write claims it (treated like token 0).
//
// Deletes keep the fence: fencedDelete() writes the deleting token into
// fencekeeper_tombstones under (relation, row key), and fencedInsert() /
// fencedUpsert() refuse to re-create a row whose tombstone is larger.
//
// A token column holds tokens of whatever lock wrote it, and tokens of
// different locks are not comparable. A table bound with bindTable() (see
// bind-table.ts) is guarded by one lock: every statement here carries the
// check against that binding in its WHERE, so a sequencer of another lock, or
// a bare token, writes nothing, with no extra round trip on success (which one
// it was is read on the refusal path only). On a table never bound they
// compare numbers only, as before: bare tokens and sequencers alike.
import { SequencerMismatchError, StaleTokenError, formatToken, resolveFencing, type FencingToken, type ResolvedFencing } from '../../../src/index.js';
import { fenceAdvances, publishRefused, refuseCheckOnly, traceFencedWrite } from '../../../src/extend.js';

// Why only fencedUpdate has the check-only mode among the row helpers: the
// others create or remove a row, and the row (or its tombstone) is where the
// mark lives, so each would have to write a mark it did not present.
const NO_CHECK_ONLY_ROW = 'the row or tombstone it writes carries the mark itself; only fencedUpdate (and fenced() for Kysely) leave it unchanged';
import { BINDING_COLUMNS, bindingAdmits, bindingJoin, presentedLock, tableMismatch } from './bind-table.js';
import { readBigint, run, sqlState, statementName, type Queryable } from '../database.js';
import { assertIdentifier, checkColumnValues, checkColumns, checkKey, quoteIdentifier, quoteTable } from '../identifiers.js';
import { InvalidArgumentError } from '../../../src/index.js';
import type { FencedDeleteOptions, FencedInsertOptions, FencedUpdateOptions, FencedUpsertOptions } from '../../../src/extend.js';
export type { FencedDeleteOptions, FencedInsertOptions, FencedUpdateOptions, FencedUpsertOptions };

const DEFAULT_TOKEN_COLUMN = 'fencing_token';

// The table resolved on the server to "schema"."table" (whatever search_path
// and spelling the caller used), so a tombstone written through `docs` is found
// through `public.docs`. $n is the quoted name as text: a value, not SQL.
function relationName(param: string): string {
  return `(SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ${param}::regclass)`;
}

// A row key as canonical jsonb: each key column's typed value, so 1, '1' and
// 1n name the same integer row and a uuid's case does not matter.
function rowKeyOf(key: readonly string[], rowAlias: string): string {
  return `jsonb_build_object(${key.map((column) => `'${column}', ${rowAlias}.${quoteIdentifier(column)}`).join(', ')})`;
}

/** `"a" = $1 AND "b" IS NULL ...`, appending parameters to `values`. */
function whereClause(entries: readonly [string, unknown][], values: unknown[]): string {
  return entries
    .map(([column, value]) => {
      if (value === null) return `${quoteIdentifier(column)} IS NULL`;
      values.push(value);
      return `${quoteIdentifier(column)} = $${values.length}`;
    })
    .join(' AND ');
}

function tokenPasses(column: string, param: string, alias = ''): string {
  const ref = `${alias}${quoteIdentifier(column)}`;
  return `(${ref} <= ${param} OR ${ref} IS NULL)`;
}

function checkTokenColumn(value: unknown): string {
  return value === undefined ? DEFAULT_TOKEN_COLUMN : assertIdentifier(value, 'tokenColumn');
}

function checkOptions(options: unknown, what: string): Record<string, unknown> {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError(`${what} needs an options object`);
  return options as Record<string, unknown>;
}

/**
 * `UPDATE table SET <set>, token = n WHERE <where> AND token <= n`: one round
 * trip when it updates. Answers the number of rows updated. When nothing was
 * updated, one more read: if a row matching `where` holds a larger token,
 * StaleTokenError (current: the largest such token); if none matches, 0.
 * With a `where` matching several rows, each row is fenced on its own: rows
 * holding a larger token are skipped, and only "nothing updated" is an error.
 * `advance: false` (check-only, a reader of a read-write lock): the same
 * compare, but the rows keep their token column as it was.
 */
export function fencedUpdate(db: Queryable, options: FencedUpdateOptions): Promise<number> {
  return traced('update', options, (fencing) => updateRows(db, options, fencing));
}

async function updateRows(db: Queryable, options: FencedUpdateOptions, fencing: () => ResolvedFencing): Promise<number> {
  const o = checkOptions(options, 'fencedUpdate');
  const resolved = fencing();
  const token = resolved.token;
  const advance = fenceAdvances(o, 'fencedUpdate');
  const where = checkColumnValues(o['where'], 'where');
  const set = checkColumnValues(o['set'], 'set');
  // The statement's text depends only on the names (and which where values
  // are null): built and validated once per shape, then reused, so the hot
  // path is a cache lookup, not regexes and string building per write.
  const shapeKey = JSON.stringify([o['table'], o['tokenColumn'] ?? null, where.map(([c, v]) => (v === null ? `${c}\0` : c)), set.map(([c]) => c), advance]);
  let shape = updateShapes.get(shapeKey);
  if (shape === undefined) {
    shape = updateShape(o['table'], o['tokenColumn'], where, set, advance);
    if (updateShapes.size >= 1024) updateShapes.clear();
    updateShapes.set(shapeKey, shape);
  }
  const values: unknown[] = [formatToken(token)];
  for (const [, value] of set) values.push(value);
  for (const [, value] of where) if (value !== null) values.push(value);
  values.push(...presentedLock(resolved));
  const { rowCount } = await run(db, { text: shape.text, values, prepared: true, name: shape.name });
  if (rowCount > 0) return rowCount;
  await refuseIfStale(db, shape.table, where, shape.tokenColumn, resolved, o['table'] as string);
  return 0;
}

interface UpdateShape {
  readonly table: string;
  readonly tokenColumn: string;
  readonly text: string;
  readonly name: string;
}

const updateShapes = new Map<string, UpdateShape>();

function updateShape(tableName: unknown, tokenColumnName: unknown, where: readonly [string, unknown][], set: readonly [string, unknown][], advance: boolean): UpdateShape {
  const table = quoteTable(tableName);
  const tokenColumn = checkTokenColumn(tokenColumnName);
  for (const [column] of where) assertIdentifier(column, 'where column');
  for (const [column] of set) assertIdentifier(column, 'set column');
  if (set.some(([column]) => column === tokenColumn)) {
    throw new InvalidArgumentError(`set must not write the token column ${tokenColumn}: it is set to the token`);
  }
  // $1 is the token, then the set values, then the non-null where values, then
  // the presented lock (bindingAdmits), in the order fencedUpdate pushes them.
  const numbered: unknown[] = [null];
  const assignments = set.map(([column, value]) => {
    numbered.push(value);
    return `${quoteIdentifier(column)} = $${numbered.length}`;
  });
  // Check-only: the row keeps its token (a NULL stays NULL: it admits every token, as before).
  if (advance) assignments.push(`${quoteIdentifier(tokenColumn)} = $1`);
  if (assignments.length === 0) throw new InvalidArgumentError('fencedUpdate: set must name a column to write (check-only writes no token)');
  const conditions = whereClause(where, numbered);
  const text = `UPDATE ${table} SET ${assignments.join(', ')} WHERE ${conditions} AND ${tokenPasses(tokenColumn, '$1')} AND ${bindingAdmits(table, numbered.length + 1)}`;
  return { table, tokenColumn, text, name: statementName(text) };
}

/**
 * Delete the rows matching `where` whose token is not larger than `token`, and
 * keep each deleted row's fence: its key and the deleting token go into
 * fencekeeper_tombstones (a larger existing tombstone is kept), in the same
 * statement, so the delete and the tombstone commit together. Answers the
 * number of rows deleted; 0 rows because a matching row holds a larger token
 * → StaleTokenError; no matching row → 0.
 */
export function fencedDelete(db: Queryable, options: FencedDeleteOptions): Promise<number> {
  refuseCheckOnly(fenceAdvances(options, 'fencedDelete'), 'fencedDelete', NO_CHECK_ONLY_ROW);
  return traced('delete', options, (fencing) => deleteRows(db, options, fencing));
}

async function deleteRows(db: Queryable, options: FencedDeleteOptions, fencing: () => ResolvedFencing): Promise<number> {
  const o = checkOptions(options, 'fencedDelete');
  const table = quoteTable(o['table']);
  const resolved = fencing();
  const token = resolved.token;
  const tokenColumn = checkTokenColumn(o['tokenColumn']);
  const where = checkColumns(o['where'], 'where');
  const key = o['key'] === undefined ? where.map(([column]) => column) : checkKey(o['key']);

  const values: unknown[] = [formatToken(token), table];
  const conditions = whereClause(where, values);
  const presented = values.push(...presentedLock(resolved)) - 3;
  const text = `WITH gone AS (
  DELETE FROM ${table} WHERE ${conditions} AND ${tokenPasses(tokenColumn, '$1')} AND ${bindingAdmits(table, presented)}
  RETURNING ${key.map(quoteIdentifier).join(', ')}
)
INSERT INTO fencekeeper_tombstones AS t (relation, row_key, token, deleted_at)
SELECT ${relationName('$2')}, ${rowKeyOf(key, 'g')}, $1, now() FROM gone g
ON CONFLICT (relation, row_key) DO UPDATE SET token = GREATEST(t.token, EXCLUDED.token), deleted_at = now()`;
  const { rowCount } = await run(db, { text, values, prepared: true });
  if (rowCount > 0) return rowCount;
  await refuseIfStale(db, table, where, tokenColumn, resolved, o['table'] as string);
  return 0;
}

/**
 * Insert a new row carrying `token`, unless the row's fence forbids it:
 * - no row with this key exists and no tombstone for it is larger → inserted, 1;
 * - a tombstone for this key holds a larger token (a newer holder deleted the
 *   row) → StaleTokenError: an old holder cannot resurrect it;
 * - the row exists with a larger token → StaleTokenError;
 * - the row exists with a token not larger → 0, left as it is (an insert never
 *   overwrites; that is fencedUpsert). ON CONFLICT DO NOTHING on `key` means a
 *   duplicate does not abort the caller's transaction.
 * Under REPEATABLE READ or SERIALIZABLE, a newer holder's delete committed
 * after the transaction's snapshot fails the insert with SQLSTATE 40001
 * (retry the transaction: the retry is refused as stale); the same holds for
 * fencedUpsert.
 */
export function fencedInsert(db: Queryable, options: FencedInsertOptions): Promise<number> {
  refuseCheckOnly(fenceAdvances(options, 'fencedInsert'), 'fencedInsert', NO_CHECK_ONLY_ROW);
  return traced('insert', options, async (fencing) => (await insertRow(db, options, 'insert', fencing)).rowCount);
}

/**
 * Insert the row, or update it when its token is not larger than `token`
 * (`INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE t.token <= EXCLUDED.token`),
 * refusing to re-create a row whose tombstone is larger. Answers which it did;
 * a larger row token or tombstone → StaleTokenError.
 */
export function fencedUpsert(db: Queryable, options: FencedUpsertOptions): Promise<'inserted' | 'updated'> {
  refuseCheckOnly(fenceAdvances(options, 'fencedUpsert'), 'fencedUpsert', NO_CHECK_ONLY_ROW);
  return traced('upsert', options, async (fencing) => {
    const { rows } = await insertRow(db, options, 'upsert', fencing);
    return rows[0]?.['inserted'] === true ? 'inserted' : 'updated';
  });
}

/**
 * The write, traced with its token. The value passed as `token` is resolved
 * (a bare token, a Sequencer, CURRENT_LOCK) before the trace starts, so the
 * trace carries the number; a bad one is refused inside the traced call, after
 * the options object itself is checked (`fencing()` throws it there).
 */
function traced<T>(operation: 'update' | 'delete' | 'insert' | 'upsert', options: unknown, write: (fencing: () => ResolvedFencing) => Promise<T>): Promise<T> {
  let resolved: ResolvedFencing | undefined;
  let failure: unknown;
  try {
    resolved = resolveFencing((options as { token?: unknown } | null | undefined)?.token);
  } catch (error) {
    failure = error;
  }
  const fencing = (): ResolvedFencing => {
    if (resolved === undefined) throw failure;
    return resolved;
  };
  return traceFencedWrite('postgres', operation, tableOf(options), (resolved?.token ?? (options as { token?: unknown } | null | undefined)?.token) as FencingToken, () => write(fencing));
}

/** The table as the trace names it, before validation (a bad one is refused inside the traced call). */
function tableOf(options: unknown): string {
  const table = (options as { table?: unknown } | null | undefined)?.table;
  return typeof table === 'string' ? table : String(table);
}

/** Every refusal of a row helper is counted as one write refused at the resource: a stale token, or a lock the table is not bound to. */
function refused(error: StaleTokenError): StaleTokenError;
function refused(error: SequencerMismatchError, presented: FencingToken): SequencerMismatchError;
function refused(error: StaleTokenError | SequencerMismatchError, presented?: FencingToken): StaleTokenError | SequencerMismatchError {
  if (error instanceof SequencerMismatchError) publishRefused('postgres', error, presented as FencingToken);
  else publishRefused('postgres', error);
  return error;
}

async function insertRow(db: Queryable, options: FencedInsertOptions, mode: 'insert' | 'upsert', fencing: () => ResolvedFencing): Promise<{ rowCount: number; rows: Record<string, unknown>[] }> {
  const o = checkOptions(options, mode === 'insert' ? 'fencedInsert' : 'fencedUpsert');
  const table = quoteTable(o['table']);
  const resolved = fencing();
  const token = resolved.token;
  const tokenColumn = checkTokenColumn(o['tokenColumn']);
  const row = checkColumns(o['values'], 'values');
  const key = checkKey(o['key']);
  if (row.some(([column]) => column === tokenColumn)) {
    throw new InvalidArgumentError(`values must not write the token column ${tokenColumn}: it is set to the token`);
  }
  const keyValues: [string, unknown][] = key.map((column) => {
    const entry = row.find(([name]) => name === column);
    if (entry === undefined) throw new InvalidArgumentError(`values must include the key column ${column}`);
    if (entry[1] === null) throw new InvalidArgumentError(`key column ${column} must not be null`);
    return entry;
  });

  // $1 token, $2 the quoted table name, $3 the key as JSON (typed on the
  // server by the table's own row type), then the row's values.
  const values: unknown[] = [formatToken(token), table, keyJson(keyValues)];
  const columns = row.map(([column, value]) => {
    values.push(value);
    return { column, param: `$${values.length}` };
  });
  const target = [...columns.map(({ column }) => quoteIdentifier(column)), quoteIdentifier(tokenColumn)].join(', ');
  const selected = [...columns.map(({ param }) => param), '$1'].join(', ');
  const presented = values.push(...presentedLock(resolved)) - 3;
  const typedKey = `(SELECT ${rowKeyOf(key, 'k')} FROM jsonb_populate_record(NULL::${table}, $3::jsonb) k)`;
  const onConflict = mode === 'insert'
    ? 'DO NOTHING'
    : `DO UPDATE SET ${[...row.filter(([column]) => !key.includes(column)).map(([column]) => column), tokenColumn]
        .map((column) => `${quoteIdentifier(column)} = EXCLUDED.${quoteIdentifier(column)}`)
        .join(', ')} WHERE ${tokenPasses(tokenColumn, `EXCLUDED.${quoteIdentifier(tokenColumn)}`, 't.')}`;
  const text = `INSERT INTO ${table} AS t (${target})
SELECT ${selected}
WHERE NOT EXISTS (SELECT 1 FROM fencekeeper_tombstones tb WHERE tb.relation = ${relationName('$2')} AND tb.row_key = ${typedKey} AND tb.token > $1)
  AND ${bindingAdmits(table, presented)}
ON CONFLICT (${key.map(quoteIdentifier).join(', ')}) ${onConflict}
RETURNING (t.xmax = 0) AS inserted, fencekeeper_check_tombstone(${relationName('$2')}, ${rowKeyOf(key, 't')}, $1) AS checked`;

  let result;
  try {
    result = await run(db, { text, values, prepared: true });
  } catch (error) {
    // A delete committed while our insert waited on its row: the fresh-snapshot
    // re-check in RETURNING refused the resurrection (see 002_tombstones.sql).
    // Under REPEATABLE READ or SERIALIZABLE a tombstone committed after the
    // transaction's snapshot fails the statement with 40001 instead (see
    // 003_tombstones_snapshot_isolation.sql): passed through, for the caller
    // to retry as any serialization failure.
    if (sqlState(error) === 'FK409') {
      throw refused(new StaleTokenError(rowResource(o['table'] as string, keyValues), token, readBigint(detail(error)), { cause: error }));
    }
    throw error;
  }
  if (result.rowCount > 0) return result;

  // Nothing written: a lock the table is not bound to, a larger tombstone or
  // row token (stale), or, for an insert, a row that already exists with a
  // token not larger (0).
  const lookupValues: unknown[] = [table, keyJson(keyValues)];
  const rowWhere = whereClause(keyValues, lookupValues);
  const current = await run(db, {
    text: `SELECT GREATEST(
  (SELECT max(${quoteIdentifier(tokenColumn)}) FROM ${table} WHERE ${rowWhere}),
  (SELECT tb.token FROM fencekeeper_tombstones tb WHERE tb.relation = ${relationName('$1')} AND tb.row_key = (SELECT ${rowKeyOf(key, 'k')} FROM jsonb_populate_record(NULL::${table}, $2::jsonb) k))
)::text AS current, ${BINDING_COLUMNS} FROM (SELECT 1) AS one ${bindingJoin(1)}`,
    values: lookupValues,
    prepared: false,
  });
  const mismatch = tableMismatch(o['table'] as string, resolved, current.rows[0]);
  if (mismatch !== null) throw refused(mismatch, token);
  const mark = readBigint(current.rows[0]?.['current']);
  if (mode === 'upsert' || (mark !== null && mark > token)) {
    throw refused(new StaleTokenError(rowResource(o['table'] as string, keyValues), token, mark));
  }
  return result;
}

/** The rare path of update/delete: is the table bound to another lock, or does a matching row hold a larger token? */
async function refuseIfStale(db: Queryable, table: string, where: readonly [string, unknown][], tokenColumn: string, fencing: ResolvedFencing, tableName: string): Promise<void> {
  const token = fencing.token;
  const values: unknown[] = [];
  const conditions = whereClause(where, values);
  values.push(table);
  const text = `SELECT (SELECT max(${quoteIdentifier(tokenColumn)})::text FROM ${table} WHERE ${conditions}) AS current, ${BINDING_COLUMNS}
FROM (SELECT 1) AS one ${bindingJoin(values.length)}`;
  const { rows } = await run(db, { text, values, prepared: false });
  const mismatch = tableMismatch(tableName, fencing, rows[0]);
  if (mismatch !== null) throw refused(mismatch, token);
  const current = readBigint(rows[0]?.['current']);
  if (current !== null && current > token) {
    throw refused(new StaleTokenError(rowResource(tableName, where), token, current));
  }
}

/** How a row is named in StaleTokenError.resource: `table {"id":1}`. */
function rowResource(table: string, where: readonly [string, unknown][]): string {
  return `${table} ${keyJson(where)}`;
}

/** JSON for key values: bigint as decimal text, bytes as bytea hex; jsonb_populate_record types them. */
function keyJson(entries: readonly [string, unknown][]): string {
  return JSON.stringify(Object.fromEntries(entries), function (this: Record<string, unknown>, name: string, value: unknown) {
    // `this[name]` is the value before toJSON (a Buffer's toJSON hides its bytes).
    const raw = this[name];
    if (typeof raw === 'bigint') return raw.toString(10);
    if (raw instanceof Uint8Array) return `\\x${Buffer.from(raw).toString('hex')}`;
    return value;
  });
}

function detail(error: unknown): string | undefined {
  const text = (error as { detail?: unknown } | null)?.detail;
  return typeof text === 'string' ? text : undefined;
}
