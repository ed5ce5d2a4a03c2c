// A child process's stdout as a queue of JSON lines: the fixtures that hold a lock
// in a process of their own report each step as one JSON object per line.
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { within } from './wait.js';

/**
 * Read `stdout` line by line from now on; each call of the function returned
 * answers the next line parsed (a line that came before the call is kept
 * for it), or rejects after `limitMs` without one.
 */
export function jsonLines(stdout: Readable, limitMs = 30_000, what = 'a line from the holder'): () => Promise<Record<string, unknown>> {
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: stdout }).on('line', (line) => {
    const take = waiting.shift();
    if (take) take(line);
    else lines.push(line);
  });
  return () =>
    within(new Promise<string>((resolve) => (lines.length > 0 ? resolve(lines.shift()!) : waiting.push(resolve))), limitMs, what).then(
      (line) => JSON.parse(line) as Record<string, unknown>,
    );
}
