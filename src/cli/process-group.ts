// Whether a process group still has a running member: asked by the
// supervisor before it reports the command's end, and by `run` before it
// releases the lock after the supervisor itself was killed.
import { readFileSync, readdirSync } from 'node:fs';

/**
 * Whether any process of `group` still runs. A zombie does not count: it
 * has exited and waits for its parent (or for PID 1, which some container
 * inits never do) to reap it, and kill(-group, 0) would count it. Nor does
 * a process the kernel is taking down ('X').
 */
export function groupRuns(group: number): boolean {
  if (group === 0) return false;
  try {
    process.kill(-group, 0);
  } catch {
    return false;
  }
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return true; // no /proc (not Linux): kill(-group, 0) is all we have
  }
  for (const pid of entries) {
    const first = pid.charCodeAt(0);
    if (first < 48 || first > 57) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ', 3);
    if (Number(pgrp) === group && state !== 'Z' && state !== 'X') return true;
  }
  return false;
}
