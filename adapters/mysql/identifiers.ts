// Checks on what a caller passes, before any SQL is built: names become
// backtick-quoted identifiers (never spliced text), values become parameters,
// tokens are bigints in 1..2^63-1 sent as decimal text and converted on the
// server with CAST(? AS SIGNED) (a string compared with a BIGINT column would
// otherwise be compared as a DOUBLE, losing the low digits of a large token).
// A bad argument throws here and no statement is sent.
import { InvalidArgumentError } from '../../src/index.js';

// A plain identifier: letters, digits, _ and $, not starting with a digit, at
// most 64 (MySQL's limit). Anything that would need escaping (backticks,
// dots, spaces, quotes) is refused rather than escaped.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]{0,63}$/;

export function assertIdentifier(value: unknown, what: string): string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw new InvalidArgumentError(`${what} must be a plain SQL identifier (letters, digits, _ and $, not starting with a digit, at most 64), got ${describe(value)}`);
  }
  return value;
}

export function quoteIdentifier(name: string): string {
  // Validated names carry no backtick; doubling is defence in depth.
  return `\`${name.replaceAll('`', '``')}\``;
}

/** A table as the statements name it, and the SQL expression of its `database.table` name (the key of its tombstones and binding). */
export interface TableName {
  readonly quoted: string;
  readonly relation: string;
}

/** `table` (in the connection's current database) or `database.table`. */
export function tableName(value: unknown): TableName {
  if (typeof value !== 'string') throw new InvalidArgumentError(`table must be a string, got ${describe(value)}`);
  const parts = value.split('.');
  if (parts.length > 2) throw new InvalidArgumentError(`table must be "table" or "database.table", got ${describe(value)}`);
  for (const part of parts) assertIdentifier(part, 'table');
  const quoted = parts.map(quoteIdentifier).join('.');
  // Validated identifiers: safe inside a literal.
  const relation = parts.length === 2 ? `'${parts[0]}.${parts[1]}'` : `CONCAT(DATABASE(), '.${parts[0]}')`;
  return { quoted, relation };
}

const LONE_SURROGATE = /\p{Cs}/u;
const RESOURCE_BYTES = 1024;

/**
 * A resource name for fencekeeper_fences: a non-empty string of at most 1024
 * UTF-8 bytes (the column's width), without NUL (kept out so a name means
 * the same to every other fencekeeper store) or a lone surrogate (no UTF-8
 * form: the driver would send U+FFFD in its place and fence another name).
 */
export function checkResource(resource: unknown): string {
  if (typeof resource !== 'string' || resource.length === 0) throw new InvalidArgumentError(`resource must be a non-empty string, got ${describe(resource)}`);
  if (resource.includes('\0')) throw new InvalidArgumentError(`resource must not contain NUL, got ${describe(resource)}`);
  if (LONE_SURROGATE.test(resource)) throw new InvalidArgumentError(`resource must be well-formed Unicode (it has a lone surrogate, which has no UTF-8 form), got ${describe(resource)}`);
  if (Buffer.byteLength(resource, 'utf8') > RESOURCE_BYTES) throw new InvalidArgumentError(`resource must be at most ${RESOURCE_BYTES} bytes of UTF-8, got ${Buffer.byteLength(resource, 'utf8')}`);
  return resource;
}

/**
 * A `{ column: value }` object (where, set, values): a non-empty plain object
 * whose keys are identifiers and whose values are defined (null is a value;
 * undefined is almost always a bug, so it is refused).
 */
export function checkColumns(value: unknown, what: string): [string, unknown][] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidArgumentError(`${what} must be a plain object of { column: value }, got ${describe(value)}`);
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) throw new InvalidArgumentError(`${what} must be a plain object of { column: value }, got an instance of ${describe(value)}`);
  const entries = Object.entries(value);
  if (entries.length === 0) throw new InvalidArgumentError(`${what} must name at least one column`);
  for (const [column, columnValue] of entries) {
    assertIdentifier(column, `${what} column`);
    if (columnValue === undefined) throw new InvalidArgumentError(`${what}.${column} is undefined (pass null for SQL NULL)`);
    checkValue(columnValue, `${what}.${column}`);
  }
  return entries;
}

/**
 * A column value mysql2 sends as one SQL value: null, a string, a finite
 * number, a bigint, a boolean, a Date or bytes. mysql2's query() escapes an
 * array as a list and a plain object as `key` = value pairs, so such a
 * value in `where` would turn `col = ?` into another comparison than the
 * one written: refused.
 */
function checkValue(value: unknown, what: string): void {
  if (value === null || typeof value === 'string' || typeof value === 'bigint' || typeof value === 'boolean') return;
  if (typeof value === 'number' && Number.isFinite(value)) return;
  if (value instanceof Date && !Number.isNaN(value.getTime())) return;
  if (value instanceof Uint8Array) return;
  throw new InvalidArgumentError(`${what} must be a single SQL value (null, a string, a finite number, a bigint, a boolean, a valid Date or a Buffer), got ${describe(value)}`);
}

/** A list of key column names (the unique key a row is identified by). */
export function checkKey(value: unknown, what = 'key'): string[] {
  if (!Array.isArray(value) || value.length === 0) throw new InvalidArgumentError(`${what} must be a non-empty array of column names, got ${describe(value)}`);
  const seen = new Set<string>();
  for (const column of value) {
    assertIdentifier(column, `${what} column`);
    if (seen.has(column as string)) throw new InvalidArgumentError(`${what} names ${String(column)} twice`);
    seen.add(column as string);
  }
  return [...seen];
}

const ROW_KEY_BYTES = 1024;

/**
 * A row's key as the text its tombstone is kept under: a JSON array of the
 * key values as text, in key order. Key values must be strings or integers
 * (numbers or bigints; 1, 1n and '1' name the same row, as MySQL compares
 * them with an integer column); fencedDelete reads the deleted rows' keys
 * back with CAST(column AS CHAR), which gives the same text. Keys are
 * compared byte for byte: under a case-insensitive collation 'A' and 'a'
 * are one row to MySQL but two tombstones here, so give key columns a
 * binary (_bin) collation or integer type.
 */
export function rowKeyText(values: readonly unknown[]): string {
  const parts = values.map((value) => {
    if (typeof value === 'string') return value;
    if (typeof value === 'bigint') return value.toString(10);
    if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
    throw new InvalidArgumentError(`key values must be strings or integers (a number that is a safe integer, or a bigint), got ${describe(value)}`);
  });
  for (const part of parts) {
    if (LONE_SURROGATE.test(part)) throw new InvalidArgumentError('key values must be well-formed Unicode (a lone surrogate has no UTF-8 form)');
  }
  const text = JSON.stringify(parts);
  if (Buffer.byteLength(text, 'utf8') > ROW_KEY_BYTES) throw new InvalidArgumentError(`the row key ${describe(text)} is longer than ${ROW_KEY_BYTES} bytes: a tombstone cannot hold it`);
  return text;
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}
