/**
 * Where a lock's or an election's queue lives in the tree, for operators
 * (zkCli, an ACL of their own) and for code that checks a name before it
 * connects (the CLI does). The recipes create it on the first join.
 */
import { ELECTIONS_ROOT } from './election.js';
import { LOCKS_ROOT } from './lock.js';
import { queueParent } from './queue-order.js';

/** The znode under which `name`'s queue nodes are created; throws InvalidArgumentError for a name that is not a relative path. */
export function queuePath(kind: 'lock' | 'election', name: string): string {
  return queueParent(kind === 'lock' ? LOCKS_ROOT : ELECTIONS_ROOT, name);
}
