// The long fault-injection run: the same harness as the suite's short runs
// (fault-checker*.test.ts), with more workers, operations and random faults,
// against one token source. Prints the figures and exits 0 only if the
// checker finds no violation at the resources, the run refused at least one
// stale write, every promised fault was injected (with its evidence), no
// worker crashed and the source's tokens were monotonic; 3 when all of that
// holds but the source's tokens were not (the report lists the regressions:
// a single Redis whose failover lost INCRs of its counter); 1 otherwise.
//
//   npm run faults -- [--source zookeeper|redis|redlock|etcd|postgres] \
//     [--workers 8] [--ops 400] [--duration 600] [--session-ms 2000] \
//     [--http-store memory|postgres] [--no-random] [--no-build] [--no-http-cuts]
//
//   --source S       where the workers take the lock, and the nemesis's own
//                    faults for it (test/faults/source-faults.ts):
//                      zookeeper  the 3-node ensemble; leader SIGKILL + restart (default)
//                      redis      the single-instance lock on FK_REDIS_PAIR's primary;
//                                 primary SIGKILL + promotion of the replica, in sync
//                                 or held back by SIGSTOP (the lag that loses INCRs),
//                                 then the old primary rejoins as the replica
//                      redlock    the five FK_REDLOCK nodes; one restarted from its AOF,
//                                 or one paused, at a time (never a majority)
//                      etcd       the 3-node FK_ETCD_CLUSTER; leader SIGKILL + restart
//                      postgres   postgresSource on a cluster of the checker's own
//                                 (test/servers/pg-replica.sh, port 25451); its primary
//                                 SIGKILLed and restarted (crash recovery)
//                    Holder pauses, TCP cuts and partitions of the workers'
//                    connections, and held-then-reset resource writes, for every source.
//   --workers N      worker processes (default 8)
//   --ops N          lock cycles after which the workers stop (default 400; extended
//                    until the guaranteed faults are in and a stale write was refused)
//   --duration S     hard cap on the run in seconds (default 600)
//   --session-ms MS  the grant's lifetime: ZooKeeper session timeout (the ensemble's
//                    tick of 500 ms allows 1000..10000), Redis/Redlock TTL, etcd lease
//                    (rounded to whole seconds); default 2000
//   --http-store     the HTTP service's fence: memory (MemoryFenceStore, default) or
//                    postgres (PostgresFenceStore)
//   --no-random      only the guaranteed faults (a paused fresh holder, a cut, the
//                    source's own, a held-then-reset write per resource)
//   --no-build       do not rebuild dist/ first (the workers run the built package)
//   --no-http-cuts   resource cuts leave the workers' HTTP connections alone (on by default;
//                    they once exposed a fence that an aborted admission rolled back)
//
// Servers: as in the test suite. Variables already set (FK_ZK_ENSEMBLE with
// FK_ZK_ENSEMBLE_CTL, FK_REDIS_PAIR / FK_REDLOCK with FK_REDIS_CTL,
// FK_ETCD_CLUSTER with FK_ETCD_CTL, DATABASE_URL, S3_ENDPOINT, S3_ACCESS_KEY,
// S3_SECRET_KEY) are used as they are; otherwise the suite's global setup
// starts or reuses the project's servers (test/servers/*.sh) and releases
// them at the end. The nodes must be ones this run may break: the *_CTL
// script is what the nemesis calls. The run takes the same cross-process
// fault turn as the test files that break those nodes, and restores them
// (restart, resume, re-pair) before giving it back.
import { parseArgs } from 'node:util';
import type { TestProject } from 'vitest/node';
import { positive } from '../helpers/script-options.js';
import setupServers from '../setup/global-setup.js';
import { runFaultCheck } from './harness.js';
import { scriptServers } from './script-servers.js';
import { SOURCE_KINDS, isSourceKind, sourceControl } from './source-faults.js';

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((arg) => arg !== '--'),
    options: {
      source: { type: 'string' },
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
  const source = values.source ?? 'zookeeper';
  if (!isSourceKind(source)) throw new Error(`--source is one of ${SOURCE_KINDS.join(', ')}, got ${source}`);
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
  // The nodes' faults are one holder's at a time (the test files that break them take turns too).
  const control = sourceControl(source);
  let releaseTurn: (() => Promise<void>) | undefined;
  const started = Date.now();
  try {
    log(`waiting for the ${source} servers' fault turn (runs that break their nodes go one at a time)`);
    releaseTurn = await control.hold();
    log(`fault-injection run on ${source}: ${workers} workers, ${ops} lock cycles, at most ${durationS} s, session ${sessionTimeoutMs} ms, http store ${httpStore}${values['no-http-cuts'] === true ? ', no HTTP cuts' : ''}${values['no-random'] === true ? ', guaranteed faults only' : ''}`);
    const { result, report, crashes } = await runFaultCheck({
      servers: scriptServers(),
      source: control,
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
    if (!result.valid || crashes.length > 0) return 1;
    return result.tokenRegressions.length === 0 ? 0 : 3;
  } finally {
    if (releaseTurn !== undefined) await releaseTurn().catch((error: unknown) => log(`restoring the ${source} servers failed: ${String(error)}`));
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
