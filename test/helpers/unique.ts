// Per-test names, so test files can run side by side (and next to another
// engineer's run) against the same ZooKeeper, PostgreSQL and S3 without
// seeing each other's znodes, tables, buckets or keys.
import { randomBytes } from 'node:crypto';

/**
 * A random id that is valid everywhere we put one: a znode name, an unquoted
 * PostgreSQL identifier (starts with a letter, [a-z0-9_], well under 63
 * bytes), an S3 bucket name (lowercase, 3-63) and an object key.
 */
export function uniqueId(prefix = 't'): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9]+/g, '_').replace(/^_+|_+$/g, '').slice(0, 30);
  const head = /^[a-z]/.test(clean) ? clean : `t${clean}`;
  return `${head}_${randomBytes(6).toString('hex')}`;
}

/** A fresh znode path under /fencekeeper-test, e.g. '/fencekeeper-test/lock_3f9a...'. */
export function uniqueZnodePath(prefix = 'node'): string {
  return `/fencekeeper-test/${uniqueId(prefix)}`;
}

/** A lock or election name (the recipes put it under /fencekeeper/locks/<name>). */
export function uniqueLockName(prefix = 'lock'): string {
  return uniqueId(prefix);
}

/** A PostgreSQL table or schema name (unquoted-safe). */
export function uniqueTable(prefix = 'tbl'): string {
  return uniqueId(prefix);
}

/** An S3 bucket name: lowercase letters, digits and hyphens, 3-63 characters. */
export function uniqueBucket(prefix = 'fk'): string {
  return uniqueId(prefix).replace(/_/g, '-').slice(0, 63);
}

/** An S3 object key. */
export function uniqueKey(prefix = 'obj'): string {
  return `${uniqueId(prefix)}/data`;
}
