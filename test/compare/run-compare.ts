// npm run compare: the seeds' comparison table, measured. Every source
// (single Redis, Redlock over 5, etcd, ZooKeeper) through the same fault
// scenarios on the project's servers, counted; see compare.ts.
//
//   npm run compare -- [--trials N] [--source redis,redlock,etcd,zookeeper] [--json]
//                      [--latency-cycles N] [--concurrency N] [--no-build] [--html FILE]
//
//   --trials N          trials per failover, clock and pause scenario and source (default 20)
//   --source LIST       a subset of the sources, comma-separated (default all four)
//   --json              the report as JSON on stdout (progress goes to stderr)
//   --latency-cycles N  uncontended acquire/release cycles per source (default 200)
//   --concurrency N     paused holders of one source at once (default 5)
//   --no-build          do not rebuild dist/ first (the paused holders run the built package)
//   --html FILE         also write the report as one self-contained HTML page (./html.ts)
//
// Servers: as in the test suite. Variables already set (FK_REDIS, FK_ETCD,
// FK_ZK_ENSEMBLE, DATABASE_URL, S3_ENDPOINT...) are used as they are;
// otherwise the suite's global setup starts or reuses the project's servers
// (test/servers/*.sh acquire) and releases them at the end. Exit 0 only if
// every trial of every scenario showed its fault by its evidence and every
// scenario ran all its trials (a trial that fails is run again, at most as
// many extra runs as trials): ./evidence.ts, runFailures.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { TestProject } from 'vitest/node';
import { positive } from '../helpers/script-options.js';
import setupServers from '../setup/global-setup.js';
import { SOURCE_KINDS, loadAverage, runCompare, type SourceKind } from './compare.js';
import { runFailures } from './evidence.js';
import { writeHtml } from './html.js';
import { renderReport, reportJson } from './table.js';

function sourcesOf(text: string | undefined): SourceKind[] {
  if (text === undefined) return [...SOURCE_KINDS];
  const picked = text.split(',').map((s) => s.trim());
  for (const s of picked) {
    if (!(SOURCE_KINDS as readonly string[]).includes(s)) throw new Error(`--source takes ${SOURCE_KINDS.join(', ')} (comma-separated), got ${JSON.stringify(s)}`);
  }
  return SOURCE_KINDS.filter((s) => picked.includes(s));
}

function build(): Promise<void> {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  return new Promise((resolve, reject) => {
    execFile('npm', ['run', '-s', 'build'], { cwd: root }, (error, _stdout, stderr) => (error ? reject(new Error(`npm run build failed:\n${stderr}`)) : resolve()));
  });
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((arg) => arg !== '--'),
    options: {
      trials: { type: 'string' },
      source: { type: 'string' },
      json: { type: 'boolean' },
      'latency-cycles': { type: 'string' },
      concurrency: { type: 'string' },
      'no-build': { type: 'boolean' },
      html: { type: 'string' },
    },
  });
  const trials = positive('trials', values.trials, 20);
  const sources = sourcesOf(values.source);
  const json = values.json === true;
  const log = (line: string): void => {
    (json ? process.stderr : process.stdout).write(`${line}\n`);
  };
  const started = performance.now();
  const since = (t: number): string => `${((performance.now() - t) / 1000).toFixed(0)} s`;
  const times: string[] = [];
  if (values['no-build'] !== true) {
    log('building dist/ (the paused holders run the built package)');
    const t = performance.now();
    await build();
    times.push(`build ${since(t)}`);
  }
  const serversStarted = performance.now();
  const release = await setupServers({ provide: () => undefined } as unknown as TestProject);
  times.push(`servers ${since(serversStarted)}`);
  let compareStarted = performance.now();
  try {
    compareStarted = performance.now();
    const report = await runCompare({
      trials,
      sources,
      latencyCycles: positive('latency-cycles', values['latency-cycles'], 200),
      pausedConcurrency: positive('concurrency', values.concurrency, 5),
      log,
    });
    if (json) process.stdout.write(`${reportJson(report)}\n`);
    else log(`\n${renderReport(report)}`);
    if (values.html !== undefined) log(`\nHTML page: ${await writeHtml(values.html, report)}`);
    return runFailures(report).length === 0 ? 0 : 1;
  } finally {
    times.push(`comparison ${since(compareStarted)}`);
    const releaseStarted = performance.now();
    await release();
    times.push(`servers' release ${since(releaseStarted)}`);
    log(`\ntotal ${since(started)} (${times.join(', ')}; load now ${loadAverage()})`);
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`compare: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(2);
  },
);
