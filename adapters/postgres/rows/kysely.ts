// For people who already write Kysely queries: add the fence to their own
// update builder instead of switching to fencedUpdate().
import { InvalidArgumentError, formatToken, resolveFencing, type FenceMode, type Fencing } from '../../../src/index.js';
import { fenceAdvances } from '../../../src/extend.js';
import { bindingValues } from '../fence/row.js';
import { assertIdentifier, quoteIdentifier } from '../identifiers.js';

/** The part of Kysely's UpdateQueryBuilder fenced() calls (any builder fits). */
export interface FenceableUpdate {
  /** Kysely's `.set(...)`: fenced() adds the token column to what the update writes. */
  set: (...args: never[]) => unknown;
  /** Kysely's `.where(...)`: fenced() adds the token comparison to the update's condition. */
  where: (...args: never[]) => unknown;
}

interface ExpressionBuilder {
  (column: string, operator: string, value: unknown): unknown;
  or(expressions: unknown[]): unknown;
}

interface LooseUpdate {
  set(column: string, value: unknown): LooseUpdate;
  where(condition: ((eb: ExpressionBuilder) => unknown) | RawCondition): LooseUpdate;
  toOperationNode?(): { readonly table?: unknown };
}

/** A Kysely expression made of a raw node (Kysely takes any object with toOperationNode as one). */
interface RawCondition {
  readonly expressionType: undefined;
  toOperationNode(): { readonly kind: 'RawNode'; readonly sqlFragments: readonly string[]; readonly parameters: readonly { readonly kind: 'ValueNode'; readonly value: unknown }[] };
}

/**
 * Returns the builder with `.set(column, token)` and
 * `.where(column <= token OR column IS NULL)` added, so the update writes the
 * token and touches only rows whose token is not larger (a NULL token: a row
 * never written under a fence, which the first fenced write claims):
 *
 *   const result = await fenced(db.updateTable('docs').set({ body }).where('id', '=', id), token)
 *     .executeTakeFirst();
 *   // result.numUpdatedRows === 0n: stale, refused by the table's binding, or
 *   // no such row (tell them apart with a read, or use fencedUpdate(), which
 *   // does it for you)
 *
 * `token` is a bare token, a Sequencer, a Lock or Leadership (LockLostError
 * before the builder is touched once it is not held) or CURRENT_LOCK. The update also
 * carries the check of the table's binding (bindTable), read from the
 * builder's own table: on a bound table a sequencer of another lock, or a
 * bare token, updates nothing. (A schema the builder gets from withSchema()
 * is a compile-time plugin this check does not see: name the schema in
 * updateTable('schema.table') instead.)
 *
 * `mode` `{ advance: false }` is the check-only mode (a reader of a
 * read-write lock): the same condition, without `.set(column, token)`, so
 * the rows keep their token.
 *
 * Run it inside withFence()'s transaction or on its own: either way the
 * comparison, the binding check and the write are one statement.
 */
export function fenced<QB extends FenceableUpdate>(qb: QB, token: Fencing, column = 'fencing_token', mode?: FenceMode): QB {
  const fencing = resolveFencing(token);
  assertIdentifier(column, 'column');
  const advance = fenceAdvances(mode, 'fenced()');
  const builder = qb as unknown as LooseUpdate;
  const table = updatedTable(builder);
  // Sent as decimal text: exact for every int8, whatever the column's TS type.
  const value = formatToken(fencing.token);
  // Check-only: the rows keep their token column.
  return (advance ? builder.set(column, value) : builder)
    .where((eb) => eb.or([eb(column, '<=', value), eb(column, 'is', null)]))
    .where(bindingAdmits(table, bindingValues(fencing.sequencer))) as unknown as QB;
}

/** The table the builder updates, quoted (`"schema"."table"`), from its operation node. */
function updatedTable(builder: LooseUpdate): string {
  const node = typeof builder.toOperationNode === 'function' ? builder.toOperationNode().table : undefined;
  const table = (node as { kind?: unknown } | undefined)?.kind === 'AliasNode' ? (node as { node?: unknown }).node : node;
  const named = table as { kind?: unknown; table?: { schema?: { name?: unknown }; identifier?: { name?: unknown } } } | undefined;
  const name = named?.kind === 'TableNode' ? named.table?.identifier?.name : undefined;
  if (typeof name !== 'string') throw new InvalidArgumentError('fenced() needs a Kysely update of one table (db.updateTable(name))');
  const schema = named?.table?.schema?.name;
  return typeof schema === 'string' ? `${quoteIdentifier(schema)}.${quoteIdentifier(name)}` : quoteIdentifier(name);
}

/** The binding check of bind-table.ts as a Kysely raw expression: the table and the presented lock are parameters. */
function bindingAdmits(table: string, presented: readonly (string | null)[]): RawCondition {
  const [kind, lock, sourceKind, sourceId] = presented;
  const parameters = [table, kind, kind, lock, sourceKind, sourceId, table].map((value) => ({ kind: 'ValueNode' as const, value }));
  const sqlFragments = [
    'NOT EXISTS (SELECT 1 FROM fencekeeper_table_bindings b WHERE b.relation = ',
    '::regclass AND (',
    '::text IS NULL OR (b.kind, b.lock, b.source_kind, b.source_id) IS DISTINCT FROM (',
    '::text, ', '::text, ', '::text, ',
    `::text))) AND (current_setting('transaction_isolation') = 'read committed' OR fencekeeper_check_table_binding(`,
    '::regclass))',
  ];
  return { expressionType: undefined, toOperationNode: () => ({ kind: 'RawNode', sqlFragments, parameters }) };
}
