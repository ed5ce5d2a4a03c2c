// For people who already write Kysely queries: add the fence to their own
// update builder instead of switching to fencedUpdate().
import { formatToken, type FencingToken } from '../../src/index.js';
import { assertIdentifier, checkToken } from './identifiers.js';

/** The part of Kysely's UpdateQueryBuilder fenced() calls (any builder fits). */
export interface FenceableUpdate {
  set: (...args: never[]) => unknown;
  where: (...args: never[]) => unknown;
}

interface ExpressionBuilder {
  (column: string, operator: string, value: unknown): unknown;
  or(expressions: unknown[]): unknown;
}

interface LooseUpdate {
  set(column: string, value: unknown): LooseUpdate;
  where(callback: (eb: ExpressionBuilder) => unknown): LooseUpdate;
}

/**
 * Returns the builder with `.set(column, token)` and
 * `.where(column <= token OR column IS NULL)` added, so the update writes the
 * token and touches only rows whose token is not larger (a NULL token: a row
 * never written under a fence, which the first fenced write claims):
 *
 *   const result = await fenced(db.updateTable('docs').set({ body }).where('id', '=', id), token)
 *     .executeTakeFirst();
 *   // result.numUpdatedRows === 0n: stale, or no such row (tell them apart
 *   // with a read, or use fencedUpdate(), which does it for you)
 *
 * Run it inside withFence()'s transaction or on its own: either way the
 * comparison and the write are one statement.
 */
export function fenced<QB extends FenceableUpdate>(qb: QB, token: FencingToken, column = 'fencing_token'): QB {
  checkToken(token);
  assertIdentifier(column, 'column');
  // Sent as decimal text: exact for every int8, whatever the column's TS type.
  const value = formatToken(token);
  const builder = qb as unknown as LooseUpdate;
  return builder
    .set(column, value)
    .where((eb) => eb.or([eb(column, '<=', value), eb(column, 'is', null)])) as unknown as QB;
}
