// One contender process of the contended-grants section (./contended.ts): opens a
// source of the family given on argv, says 'ready' over IPC, and on 'go' loops
// acquire + release of one lock until the deadline it was sent, then reports its
// grants and exits. Run by the parent with fork(); not for use on its own.
import { setMaxListeners } from 'node:events';
import { performance } from 'node:perf_hooks';
import { openSource, type SourceFamily } from './sources.js';

const [family, name, schema, pgMax] = process.argv.slice(2) as [SourceFamily, string, string, string];
const opened = await openSource(family, { pgSchemaName: schema === '-' ? undefined : schema, pgMax: Number(pgMax) });
// One cycle uncontended first: every path (parents, scripts, prepared statements) exists before the clock runs.
await (await opened.source.acquireLock(`${name}/warm/${process.pid}`)).release();
process.send!({ ready: true });
process.once('message', async (m: { runMs: number }) => {
  const stop = new AbortController();
  setMaxListeners(0, stop.signal);
  const until = performance.now() + m.runMs;
  const timer = setTimeout(() => stop.abort(), m.runMs);
  let grants = 0;
  try {
    while (performance.now() < until) {
      const lock = await opened.source.acquireLock(name, { signal: stop.signal });
      grants++;
      await lock.release();
    }
  } catch (e) {
    if (!stop.signal.aborted) throw e;
  }
  clearTimeout(timer);
  process.send!({ grants }, () => void opened.close().finally(() => process.exit(0)));
});
