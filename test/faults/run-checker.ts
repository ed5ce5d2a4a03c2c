// The long fault-injection run: the same harness as the suite's
// short run (fault-checker.test.ts), with more workers, operations and random
// faults. Prints the figures and exits 0 only if the checker finds no
// violation, the run refused at least one stale write, every promised fault
// was injected (with its evidence) and no worker crashed.
//
//   node node_modules/vite-node/vite-node.mjs test/faults/run-checker.ts -- \
//     --workers 8 --ops 400 --duration 300 [--session-ms 2000] [--http-store memory|postgres] \
//     [--no-random] [--no-build] [--no-http-cuts]
//
//   --workers N      worker processes (default 8)
//   --ops N          lock cycles after which the workers stop (default 400; extended
//                    until the guaranteed faults are in and a stale write was refused)
//   --duration S     hard cap on the run in seconds (default 600)
//   --session-ms MS  requested ZooKeeper session timeout (default 2000; the ensemble's
//                    tick of 500 ms allows 1000..10000)
//   --http-store     the HTTP service's fence: memory (MemoryFenceStore, default) or
//                    postgres (PostgresFenceStore)
//   --no-random      only the guaranteed faults (a paused fresh holder, a cut, a leader kill)
//   --no-build       do not rebuild dist/ first (the workers run the built package)
//   --no-http-cuts   resource cuts leave the workers' HTTP connections alone (on by default;
//                    they once exposed a fence that an aborted admission rolled back)
//
// Servers: as in the test suite. Variables already set (FK_ZK_ENSEMBLE with
// FK_ZK_ENSEMBLE_CTL, DATABASE_URL, S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY)
// are used as they are; otherwise the suite's global setup starts or reuses
// the project's servers (test/servers/*.sh) and releases them at the end.
// The ensemble must be one this run may drive: FK_ZK_ENSEMBLE_CTL is the
// script the nemesis calls to kill and restart its leader.
// It takes the same cross-process turn as the test files that kill leaders.
import { parseArgs } from 'node:util';
import type { TestProject } from 'vitest/node';
import { holdEnsembleForFaults } from '../helpers/ensemble-lock.js';
import setupServers from '../setup/global-setup.js';
import { runFaultCheck } from './harness.js';
import { scriptEnsembleControl, scriptServers } from './script-servers.js';

function positive(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} wants a positive integer, got ${JSON.stringify(text)}`);
  return value;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((arg) => arg !== '--'),
    options: {
      workers: { type: 'string' },
      ops: { type: 'string' },
      duration: { type: 'string' },
      'session-ms': { type: 'string' },
      'http-store': { type: 'string' },
      'no-random': { type: 'boolean' },
      'no-build': { type: 'boolean' },
      'no-http-cuts': { type: 'boolean' },
    },
  });
  const httpStore = values['http-store'] ?? 'memory';
  if (httpStore !== 'memory' && httpStore !== 'postgres') throw new Error(`--http-store is memory or postgres, got ${httpStore}`);
  const workers = positive('workers', values.workers, 8);
  const ops = positive('ops', values.ops, 400);
  const durationS = positive('duration', values.duration, 600);
  const sessionTimeoutMs = positive('session-ms', values['session-ms'], 2000);

  // The suite's global setup: starts (or reuses) whatever the environment does not name.
  const release = await setupServers({ provide: () => undefined } as unknown as TestProject);
  const log = (line: string): void => {
    process.stdout.write(`${line}\n`);
  };
  // The ensemble's faults are one holder's at a time (the test files that kill leaders take turns too).
  let releaseEnsemble: (() => Promise<void>) | undefined;
  const started = Date.now();
  try {
    log('waiting for the ensemble (other runs that kill its leader go one at a time)');
    releaseEnsemble = await holdEnsembleForFaults();
    await scriptEnsembleControl.waitHealthy();
    log(`fault-injection run: ${workers} workers, ${ops} lock cycles, at most ${durationS} s, session ${sessionTimeoutMs} ms, http store ${httpStore}${values['no-http-cuts'] === true ? ', no HTTP cuts' : ''}${values['no-random'] === true ? ', guaranteed faults only' : ''}`);
    const { result, report, crashes } = await runFaultCheck({
      servers: scriptServers(),
      ensembleControl: scriptEnsembleControl,
      workers,
      ops,
      maxDurationMs: durationS * 1000,
      sessionTimeoutMs,
      randomFaults: values['no-random'] !== true,
      httpStore,
      build: values['no-build'] !== true,
      httpCuts: values['no-http-cuts'] !== true,
      log,
    });
    log('');
    for (const line of report) log(line);
    log(`(${((Date.now() - started) / 1000).toFixed(1)} s)`);
    return result.valid && crashes.length === 0 ? 0 : 1;
  } finally {
    if (releaseEnsemble !== undefined) {
      await scriptEnsembleControl.restore().catch((error: unknown) => log(`restoring the ensemble failed: ${String(error)}`));
      await releaseEnsemble();
    }
    await release();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`run-checker: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(2);
  },
);
