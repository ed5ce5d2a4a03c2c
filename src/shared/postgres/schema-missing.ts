// What a database without fencekeeper's migrations answers, read the same
// way by the PostgreSQL source (src/sources/postgres/) and the PostgreSQL
// fences (adapters/postgres/): both call our tables and functions, and a
// missing one must say "run migrate()" from either.
import { SchemaMissingError } from '../../index.js';

// Undefined table, undefined column, undefined function: what a database
// without our migrations (or with only an older version's) answers.
const MISSING_STATES = new Set(['42P01', '42703', '42883']);
// Our objects are all named fencekeeper_*; PostgreSQL quotes the name it
// could not find in its message in every locale, so the name is found
// without depending on the message's language.
const OUR_OBJECT = /\bfencekeeper_[a-z0-9_]+/;

/**
 * A SchemaMissingError for an error that says one of OUR tables, columns or
 * functions does not exist; undefined for anything else. A missing table of
 * the caller's own (in a fenced row helper, or in work) names no
 * fencekeeper_* object and is passed through untouched.
 */
export function schemaMissing(error: unknown): SchemaMissingError | undefined {
  const state = sqlState(error);
  if (state === undefined || !MISSING_STATES.has(state)) return undefined;
  const message = (error as { message?: unknown }).message;
  if (typeof message !== 'string') return undefined;
  const relation = OUR_OBJECT.exec(message)?.[0];
  if (relation === undefined) return undefined;
  return new SchemaMissingError(
    relation,
    `fencekeeper's schema is missing or out of date in this database (${message}): ` +
      'run migrate(db) from fencekeeper/postgres, or `fencekeeper migrate`, on this database (the same search_path) first',
    { cause: error },
  );
}

/** The SQLSTATE of a PostgreSQL error (pg and Kysely pass the server's error through). */
export function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}
