// Checks on what a caller passes, before any SQL is built: names become quoted
// identifiers (never spliced text), values become parameters, tokens are
// bigints in 1..2^63-1. A bad argument throws here and no statement is sent.
import { assertToken, formatToken, InvalidArgumentError, type FencingToken } from '../../src/index.js';

// A plain SQL identifier: what a column or table is called when nobody quoted
// it at creation, plus mixed case (we quote, so case is kept as written).
// Anything else, quotes, dots, spaces, semicolons, is refused rather than
// escaped: a name with a quote in it is far more likely an injection than a
// real table. 63 is PostgreSQL's NAMEDATALEN - 1.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

export function quoteIdentifier(name: string): string {
  // Validated names carry no quote; doubling is defence in depth.
  return `"${name.replaceAll('"', '""')}"`;
}

export function assertIdentifier(value: unknown, what: string): string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw new InvalidArgumentError(`${what} must be a plain SQL identifier (letters, digits, _ and $, not starting with a digit, at most 63), got ${describe(value)}`);
  }
  return value;
}

/** A table name, optionally schema-qualified (`schema.table`), as quoted SQL. */
export function quoteTable(value: unknown): string {
  if (typeof value !== 'string') {
    throw new InvalidArgumentError(`table must be a string, got ${describe(value)}`);
  }
  const parts = value.split('.');
  if (parts.length > 2) {
    throw new InvalidArgumentError(`table must be "table" or "schema.table", got ${describe(value)}`);
  }
  return parts.map((part) => quoteIdentifier(assertIdentifier(part, 'table'))).join('.');
}

export function checkToken(token: unknown): FencingToken {
  return assertToken(token);
}

// A UTF-16 code unit of a surrogate pair standing alone: with the u flag a
// well-formed pair is one code point and does not match.
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * A resource name for fencekeeper_fences: any non-empty string that
 * PostgreSQL can store exactly. NUL cannot be in a PostgreSQL text value, and
 * a lone surrogate has no UTF-8 form (the driver would send U+FFFD in its
 * place, so a different name would be fenced): both are refused here, before
 * any SQL, rather than failing on the server or fencing the wrong name.
 */
export function checkResource(resource: unknown): string {
  if (typeof resource !== 'string' || resource.length === 0) {
    throw new InvalidArgumentError(`resource must be a non-empty string, got ${describe(resource)}`);
  }
  if (resource.includes('\0')) throw new InvalidArgumentError(`resource must not contain NUL (PostgreSQL text cannot hold it), got ${describe(resource)}`);
  if (LONE_SURROGATE.test(resource)) throw new InvalidArgumentError(`resource must be well-formed Unicode (it has a lone surrogate, which has no UTF-8 form), got ${describe(resource)}`);
  return resource;
}

// Bytes outside ASCII: what a literal must not contain for its meaning to be
// the same under every client_encoding.
const NON_ASCII = /[^\x00-\x7f]/;

/**
 * A string as an escape-string literal, E'...', for a statement that travels
 * in a simple-query message with others (such a message carries no
 * parameters). Inside E'' a backslash starts an escape and a quote ends the
 * literal, so both are doubled; E'' does not depend on
 * standard_conforming_strings. Every character outside ASCII is written as a
 * Unicode escape (\uXXXX, \UXXXXXXXX), so the literal is ASCII only: node-postgres
 * sends UTF-8 whatever the session's client_encoding says, and under a
 * multi-byte client encoding such as GBK, BIG5 or SJIS the server would read
 * a UTF-8 byte followed by a backslash as one character, and a doubled
 * backslash would no longer escape the quote after it. NUL is refused
 * (PostgreSQL text cannot hold it), and so is a lone surrogate (no code point).
 */
export function quoteLiteral(text: string): string {
  if (text.includes('\0')) throw new InvalidArgumentError('a SQL literal must not contain NUL');
  if (LONE_SURROGATE.test(text)) throw new InvalidArgumentError('a SQL literal must be well-formed Unicode');
  const escaped = text.replaceAll('\\', '\\\\').replaceAll("'", "''");
  if (!NON_ASCII.test(escaped)) return `E'${escaped}'`;
  let ascii = '';
  for (const character of escaped) {
    const point = character.codePointAt(0) as number;
    if (point < 0x80) ascii += character;
    else if (point <= 0xffff) ascii += `\\u${point.toString(16).padStart(4, '0')}`;
    else ascii += `\\U${point.toString(16).padStart(8, '0')}`;
  }
  return `E'${ascii}'`;
}

/** A validated token as an int8 literal (decimal digits only: nothing to escape). */
export function tokenLiteral(token: FencingToken): string {
  return `${formatToken(checkToken(token))}::int8`;
}

/**
 * A `{ column: value }` object (where, set, values): a non-empty plain object
 * whose keys are identifiers and whose values are defined (null is a value;
 * undefined is almost always a bug in the caller, so it is refused).
 */
export function checkColumns(value: unknown, what: string): [string, unknown][] {
  const entries = checkColumnValues(value, what);
  for (const [column] of entries) assertIdentifier(column, `${what} column`);
  return entries;
}

/**
 * The shape checks of checkColumns without validating the names (the caller
 * validates them once per statement shape, see fencedUpdate).
 */
export function checkColumnValues(value: unknown, what: string): [string, unknown][] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(`${what} must be a plain object of { column: value }, got ${describe(value)}`);
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    throw new InvalidArgumentError(`${what} must be a plain object of { column: value }, got an instance of ${describe(value)}`);
  }
  const entries = Object.entries(value);
  if (entries.length === 0) throw new InvalidArgumentError(`${what} must name at least one column`);
  for (const [column, columnValue] of entries) {
    if (columnValue === undefined) throw new InvalidArgumentError(`${what}.${column} is undefined (pass null for SQL NULL)`);
  }
  return entries;
}

/** A list of key column names (the unique key a row is identified by). */
export function checkKey(value: unknown, what = 'key'): string[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new InvalidArgumentError(`${what} must be a non-empty array of column names, got ${describe(value)}`);
  }
  const seen = new Set<string>();
  for (const column of value) {
    assertIdentifier(column, `${what} column`);
    if (seen.has(column as string)) throw new InvalidArgumentError(`${what} names ${String(column)} twice`);
    seen.add(column as string);
  }
  return [...seen];
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}
