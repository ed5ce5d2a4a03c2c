/**
 * Where a lock's, an election's, a read-write lock's or a semaphore's queue
 * lives in the tree, for operators (zkCli, an ACL of their own) and for code
 * that checks a name before it connects (the CLI does). The recipes create
 * it on the first join.
 */
import { InvalidArgumentError } from '../../../errors.js';
import { ELECTIONS_ROOT } from './election.js';
import { LOCKS_ROOT } from './lock.js';
import { SEMAPHORES_ROOT } from './permit.js';
import { queueParent } from './queue-order.js';
import { RW_LOCKS_ROOT } from './rw-lock.js';

const ROOTS = { lock: LOCKS_ROOT, election: ELECTIONS_ROOT, rwlock: RW_LOCKS_ROOT, semaphore: SEMAPHORES_ROOT } as const;

/**
 * The znode under which `name`'s queue nodes are created: a plain lock's
 * ('lock'), an election's, a read-write lock's ('rwlock': its readers and
 * writers share it) or a semaphore's (its waiters and its slot nodes).
 * Throws InvalidArgumentError for a name that is not a relative path.
 */
export function queuePath(kind: 'lock' | 'election' | 'rwlock' | 'semaphore', name: string): string {
  const root = Object.hasOwn(ROOTS, kind) ? ROOTS[kind] : undefined;
  if (root === undefined) throw new InvalidArgumentError(`queuePath: kind is 'lock', 'election', 'rwlock' or 'semaphore', got ${JSON.stringify(kind)}`);
  return queueParent(root, name);
}
