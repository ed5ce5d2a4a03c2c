// vitest global setup: make the real servers of the integration and fault
// tests available, in parallel, before any test file runs.
//
//   standalone ZooKeeper  FK_ZK_STANDALONE    test/servers/zk-standalone.sh
//   3-node ensemble       FK_ZK_ENSEMBLE      test/servers/zk-ensemble.sh (also FK_ZK_ENSEMBLE_CTL)
//   (their secure client ports: FK_ZK_STANDALONE_TLS, FK_ZK_ENSEMBLE_TLS, and the CA
//   FK_ZK_TLS_CA, printed by the same scripts; certificates from test/servers/zk-certs.sh)
//   PostgreSQL            DATABASE_URL        test/servers/postgres.sh
//   S3 (Ceph RGW)         S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY, S3_SECRET_KEY   test/servers/rgw.sh
//   Redis (1 + 5 + pair)  FK_REDIS, FK_REDLOCK, FK_REDIS_PAIR, FK_REDIS_CTL        test/servers/redis.sh
//   etcd (1 + 3-node)     FK_ETCD, FK_ETCD_CLUSTER, FK_ETCD_CTL                   test/servers/etcd.sh
//   DynamoDB (dynalite)   FK_DYNAMODB                                             test/servers/dynalite.sh
//   MariaDB               FK_MYSQL                                                test/servers/mariadb.sh
//
// A variable already set in the environment means "use that server": nothing
// is started for it. Otherwise the script's `acquire` reuses a server already
// answering on its port (a developer's, or another test run's) or starts one.
// Teardown calls `release` for exactly the scripts this run acquired; a server
// is stopped only by the last run using it, and only if a run started it.
// FK_NO_SERVERS=1 skips all of this (unit tests only).
//
// The values reach the workers twice: in process.env (the forks pool spawns
// its workers after this setup, with the main process's environment) and by
// project.provide(), which test/helpers/servers.ts falls back to.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { SERVER_ENV, type ProvidedServers } from '../helpers/server-env.js';

const SERVERS_DIR = fileURLToPath(new URL('../servers/', import.meta.url));

interface ServerScript {
  readonly script: string;
  /** Skip the script when this variable is already set. */
  readonly givenBy: string;
}

const SCRIPTS: readonly ServerScript[] = [
  { script: 'zk-standalone.sh', givenBy: SERVER_ENV.zkStandalone },
  { script: 'zk-ensemble.sh', givenBy: SERVER_ENV.zkEnsemble },
  { script: 'postgres.sh', givenBy: SERVER_ENV.databaseUrl },
  { script: 'rgw.sh', givenBy: SERVER_ENV.s3Endpoint },
  { script: 'redis.sh', givenBy: SERVER_ENV.redis },
  { script: 'etcd.sh', givenBy: SERVER_ENV.etcd },
  { script: 'dynalite.sh', givenBy: SERVER_ENV.dynamodb },
  { script: 'mariadb.sh', givenBy: SERVER_ENV.mysql },
];

/** Run a server script; resolve with the NAME=value lines it printed on stdout. */
function runScript(script: string, command: 'acquire' | 'release'): Promise<Record<string, string>> {
  const env = { ...process.env, FK_USER_PID: String(process.pid) };
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [SERVERS_DIR + script, command], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk; });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code !== 0) {
        reject(new Error(`${script} ${command} failed (${signal ?? `exit ${code}`}):\n${stderr.trimEnd()}`));
        return;
      }
      if (stderr.trim() !== '') process.stderr.write(stderr.replace(/^/gm, '[servers] ').replace(/\[servers\] $/, ''));
      const vars: Record<string, string> = {};
      for (const line of stdout.split('\n')) {
        const match = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
        if (match?.[1] !== undefined && match[2] !== undefined) vars[match[1]] = match[2];
      }
      resolve(vars);
    });
  });
}

function readProvided(): ProvidedServers {
  const out: Record<string, string> = {};
  for (const [key, name] of Object.entries(SERVER_ENV)) {
    const value = process.env[name];
    if (value !== undefined && value !== '') out[key] = value;
  }
  return out;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const acquired: string[] = [];
  const release = async (): Promise<void> => {
    const results = await Promise.allSettled(acquired.map((script) => runScript(script, 'release')));
    acquired.length = 0;
    for (const r of results) if (r.status === 'rejected') process.stderr.write(`[servers] ${String(r.reason)}\n`);
  };

  if (process.env.FK_NO_SERVERS === undefined || process.env.FK_NO_SERVERS === '') {
    const started = performance.now();
    const wanted = SCRIPTS.filter(({ givenBy }) => (process.env[givenBy] ?? '') === '');
    const results = await Promise.allSettled(
      wanted.map(async ({ script }) => {
        const vars = await runScript(script, 'acquire');
        acquired.push(script);
        return vars;
      }),
    );
    const failures = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    if (failures.length > 0) {
      await release();
      throw new AggregateError(failures, failures.map(String).join('\n'));
    }
    for (const r of results) {
      if (r.status === 'fulfilled') for (const [name, value] of Object.entries(r.value)) process.env[name] = value;
    }
    if (wanted.length > 0) {
      process.stderr.write(`[servers] ready in ${((performance.now() - started) / 1000).toFixed(2)} s: ${wanted.map((w) => w.script).join(', ')}\n`);
    }
  }

  project.provide('fencekeeperServers', readProvided());
  return release;
}
