/**
 * One lock holder of the demo, in a process of its own so the demo can
 * freeze it with SIGSTOP the way a 25 s garbage-collection pause freezes a
 * real one (holder-process.ts is the demo's side). It reports in JSON lines
 * on stdout and takes 'go' lines on stdin.
 *
 * Holder A is the paused holder: it acquires, writes, checks `lock.held`
 * (true), and is frozen right after that check. When it resumes it goes on
 * to write with the token it had, without checking again: exactly the code
 * that a lock alone cannot save. The resources refuse it.
 */
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { formatToken, type FencingToken } from '../../index.js';
import { lockServiceFrom } from '../services/index.js';
import { startDemoMetrics } from './metrics.js';
import { openDemoResources, type DemoResources } from './resources.js';

type Report = Record<string, unknown> & { event: string };

function report(message: Report): void {
  process.stdout.write(`${JSON.stringify({ ...message, at: performance.timeOrigin + performance.now() })}\n`);
}

async function writeAll(resources: DemoResources, actor: string, token: FencingToken): Promise<void> {
  for (const write of resources.writers) {
    const outcome = await write.write(`written by ${actor} with token ${formatToken(token)}`, token);
    report({ event: 'write', resource: write.name, token: formatToken(token), ...outcome });
  }
}

async function main(): Promise<void> {
  const actor = process.env.DEMO_ACTOR ?? '?';
  const lockName = process.env.DEMO_LOCK ?? 'jobs/reindex';
  const metrics = process.env.DEMO_METRICS === '1' ? await startDemoMetrics() : null;
  const resources = await openDemoResources(process.env);
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

  const locks = await lockServiceFrom({
    zookeeper: process.env.ZOOKEEPER ?? '127.0.0.1:2181',
    'session-timeout': process.env.DEMO_SESSION_TIMEOUT_MS ?? '4000',
  }).connect();
  const lock = await locks.hold('lock', lockName, { owner: `demo holder ${actor}`, safetyMarginMs: locks.safetyMargin(undefined) });
  report({ event: 'acquired', token: formatToken(lock.token), sessionTimeoutMs: locks.sessionTimeoutMs });
  await writeAll(resources, actor, lock.token);

  if (process.env.DEMO_PAUSE === '1') {
    // The check that passes just before the pause: after it, this code
    // believes it holds the lock, whatever happens while it is frozen.
    report({ event: 'checked', held: lock.held });
    await lines.next(); // frozen here (SIGSTOP), then told to go on
    const held = lock.held; // the first thing it reads after resuming
    report({ event: 'resumed', held, signalAborted: lock.signal.aborted, reason: (lock.signal.reason as Error | undefined)?.message ?? null });
    await writeAll(resources, actor, lock.token);
  }
  await lock.end();
  report({ event: 'released' });
  await locks.close().catch(() => undefined);
  await resources.close();
  if (metrics !== null) {
    report({ event: 'metrics', series: await metrics.collect() });
    await metrics.stop();
  }
  report({ event: 'done' });
}

main().catch((error: unknown) => {
  report({ event: 'error', message: (error as Error)?.message ?? String(error) });
  process.exitCode = 1;
});
