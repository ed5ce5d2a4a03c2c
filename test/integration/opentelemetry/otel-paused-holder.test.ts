// The paused holder, counted as an operator would see it: `fencekeeper demo
// --metrics` (real processes, real servers; each process records through
// fencekeeper/opentelemetry into the OpenTelemetry SDK's in-memory exporter).
// Holder A is frozen (SIGSTOP) past its session timeout, B takes the lock
// and writes, A resumes and writes with its old token. Then:
//   - A's process counts one fencekeeper.lock.lost, with the reason A saw:
//     the step-down deadline (its own clock, before any word from the
//     server), and the two refusals decided in A's process: PostgreSQL's
//     (its fencedUpsert) and S3's (its fencedPutObject);
//   - the HTTP service's process (the demo itself) counts the one request it
//     refused, 409;
//   - B lost nothing and refused nothing.
import { describe, expect, it } from 'vitest';
import { serverEnvironment } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli, type Run } from '../cli/helpers.js';

/** The adapters whose refusal of A's stale write is published in A's own process. */
const REFUSED_IN_HOLDER = ['postgres', 's3'];

interface Series {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

/** The demo's "metrics ... per process" section: process name -> its series. */
function parseMetrics(stdout: string): Map<string, Series[]> {
  const processes = new Map<string, Series[]>();
  let current: Series[] | null = null;
  const section = stdout.slice(stdout.indexOf('metrics (fencekeeper/opentelemetry), per process:'));
  for (const line of section.split('\n').slice(1)) {
    const header = /^ {2}(\S.*):$/.exec(line);
    if (header !== null) {
      current = [];
      processes.set(header[1]!, current);
      continue;
    }
    const entry = /^ {4}([a-z_.]+)\{(.*)\} (?:count=)?([0-9.]+)/.exec(line);
    if (entry === null || current === null) {
      if (line.trim() === '' && current !== null) break;
      continue;
    }
    const labels = Object.fromEntries([...entry[2]!.matchAll(/([a-z_.]+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]));
    current.push({ name: entry[1]!, labels, value: Number(entry[3]) });
  }
  return processes;
}

function total(series: readonly Series[] | undefined, name: string, where: Record<string, string> = {}): number {
  return (series ?? []).filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v)).reduce((n, s) => n + s.value, 0);
}

function runDemo(): Promise<Run> {
  assertBuilt();
  return cli(['demo', '--metrics'], { ...serverEnvironment(), DEMO_LOCK: uniqueLockName('otel-demo') }).done;
}

describe('the paused holder, in metrics', () => {
  it('A counts one lost lock (deadline) and the refusals decided in its process; the HTTP service counts its one 409; B neither', { timeout: 120_000 }, async () => {
    const run = await runDemo();
    expect(run.stderr).toBe('');
    expect(run.code, run.stdout).toBe(0);
    // The timeline happened: all three stale writes refused.
    expect(run.stdout.match(/with its old token\s+\| refused/g)).toHaveLength(3);

    const metrics = parseMetrics(run.stdout);
    const a = metrics.get('holder A');
    const b = metrics.get('holder B');
    const service = metrics.get('HTTP service (the demo process)');
    expect(a, run.stdout).toBeDefined();
    expect(b, run.stdout).toBeDefined();
    expect(service, run.stdout).toBeDefined();

    expect(total(a, 'fencekeeper.lock.lost'), 'one loss in A').toBe(1);
    expect(total(a, 'fencekeeper.lock.lost', { 'fencekeeper.lock.loss_reason': 'deadline', 'fencekeeper.lock.source': 'zookeeper' }), 'lost at the step-down deadline').toBe(1);
    expect(total(a, 'fencekeeper.lock.held')).toBe(0);
    expect(total(a, 'fencekeeper.fence.refused')).toBe(REFUSED_IN_HOLDER.length);
    for (const adapter of REFUSED_IN_HOLDER) expect(total(a, 'fencekeeper.fence.refused', { 'fencekeeper.adapter': adapter }), adapter).toBe(1);

    expect(total(service, 'fencekeeper.fence.refused')).toBe(1);
    expect(total(service, 'fencekeeper.fence.refused', { 'fencekeeper.adapter': 'express' })).toBe(1);

    expect(total(b, 'fencekeeper.lock.lost')).toBe(0);
    expect(total(b, 'fencekeeper.fence.refused')).toBe(0);
    expect(total(b, 'fencekeeper.lock.hold.duration', { 'fencekeeper.lock.loss_reason': 'released' })).toBe(1);
  });
});
