/**
 * Every argument checked before the first request: a bad one is an
 * InvalidArgumentError and nothing is sent.
 */
import { InvalidArgumentError } from '../../index.js';
import { assertLockName } from '../../extend.js';
export { checkWaitOptions, type CheckedWait } from '../../extend.js';
import type { EtcdClient } from './client.js';

export function checkClient(etcd: unknown): asserts etcd is EtcdClient {
  const client = etcd as Partial<EtcdClient> | null;
  if (
    client === null ||
    typeof client !== 'object' ||
    typeof client.kv?.txn !== 'function' ||
    typeof client.leaseClient?.leaseKeepAlive !== 'function' ||
    typeof client.watchClient?.watch !== 'function'
  ) {
    throw new InvalidArgumentError('expected an etcd3 client (new Etcd3({ hosts }))');
  }
  // A namespace's raw services ignore its prefix: the caller's keys would not
  // be where the caller expects them.
  const prefix = (etcd as { prefix?: unknown }).prefix;
  if (Buffer.isBuffer(prefix) && prefix.length > 0) {
    throw new InvalidArgumentError('pass the Etcd3 client itself, not a namespace of it (its raw services ignore the namespace prefix)');
  }
}

const MAX_NAME_LENGTH = 1024;
// eslint-disable-next-line no-control-regex
const FORBIDDEN_IN_NAME = /[\u0000-\u001f\u007f#]/;
const DOT = 0x2e;

/**
 * A lock or election name: a relative path of non-empty segments ("jobs/reindex"),
 * without '.' or '..' segments, control characters, '#' or a lone surrogate.
 * The queue's keys are `<root><name>/#<join>`; a name may not contain '#', so
 * one lock's prefix never covers the keys of another ("a" and "a/b").
 */
export function checkName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name === '') throw new InvalidArgumentError(`a lock name must be a non-empty string, got ${describe(name)}`);
  if (name.length > MAX_NAME_LENGTH) throw new InvalidArgumentError(`a lock name must be at most ${MAX_NAME_LENGTH} characters, got ${name.length}`);
  if (FORBIDDEN_IN_NAME.test(name)) throw new InvalidArgumentError(`a lock name may not contain '#' or control characters, got ${JSON.stringify(name)}`);
  // Well-formed Unicode (etcd3 encodes keys as UTF-8: a lone surrogate would become U+FFFD, one key for several names).
  assertLockName(name);
  // Segment by segment in place: every acquire checks its name, and a split makes an array and a string per segment.
  for (let start = 0; ; ) {
    const slash = name.indexOf('/', start);
    const end = slash === -1 ? name.length : slash;
    const length = end - start;
    if (length === 0 || (name.charCodeAt(start) === DOT && (length === 1 || (length === 2 && name.charCodeAt(start + 1) === DOT)))) {
      throw new InvalidArgumentError(`a lock name is a relative path of non-empty segments without '.' or '..', like "jobs/reindex", got ${JSON.stringify(name)}`);
    }
    if (end === name.length) return;
    start = end + 1;
  }
}

function describe(value: unknown): string {
  return value === null ? 'null' : typeof value === 'string' ? JSON.stringify(value) : typeof value;
}
