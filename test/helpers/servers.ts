// Where the real servers of this test run are, and how fault tests drive the
// ZooKeeper ensemble. The global setup (test/setup/global-setup.ts) starts or
// finds the servers and publishes them twice: as environment variables (the
// forks pool hands the main process's env to every worker) and through
// vitest's provide/inject. This module reads the environment first, then the
// injected copy, so it works in either case and in a plain Node script.
import { execFile } from 'node:child_process';
import { afterAll, afterEach, beforeAll, inject } from 'vitest';
import { holdEnsembleForFaults } from './ensemble-lock.js';
import { SERVER_DEFAULTS, SERVER_ENV, serversReadBy, type ProvidedServers, type TestServers } from './server-env.js';

export { holdEnsembleForFaults, SERVER_ENV, type ProvidedServers, type TestServers };

function provided(): ProvidedServers {
  try {
    return inject('fencekeeperServers') ?? {};
  } catch {
    return {}; // not inside a vitest worker
  }
}

function lookup(key: keyof ProvidedServers): string | undefined {
  const fromEnv = process.env[SERVER_ENV[key]];
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  return provided()[key] ?? SERVER_DEFAULTS[key];
}

function required(key: keyof ProvidedServers): string {
  const value = lookup(key);
  if (value === undefined) {
    throw new Error(
      `${SERVER_ENV[key]} is not set: the vitest global setup (test/setup/global-setup.ts) did not ` +
        `start this server (FK_NO_SERVERS set?), and no server was given in the environment`,
    );
  }
  return value;
}

/**
 * The servers of this run. Each field is read when accessed, so a unit test
 * file that never touches a server works even when none was started.
 */
export function testServers(): TestServers {
  return serversReadBy(required);
}

/** True when a server is available (for scripts and helpers that can do without one). */
export function hasServer(key: keyof ProvidedServers): boolean {
  return lookup(key) !== undefined;
}

// --- ensemble control (fault tests) ------------------------------------------

function ensembleCtl(args: readonly string[]): Promise<string> {
  const ctl = lookup('zkEnsembleCtl');
  if (ctl === undefined) {
    return Promise.reject(
      new Error(`${SERVER_ENV.zkEnsembleCtl} is not set: the ensemble was not started by this test run, so it cannot be driven`),
    );
  }
  return new Promise((resolve, reject) => {
    execFile('bash', [ctl, ...args], { timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${ctl} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

function nodeId(text: string, what: string): number {
  const id = Number(text);
  if (![1, 2, 3].includes(id)) throw new Error(`${what}: expected a node id 1..3, got ${JSON.stringify(text)}`);
  return id;
}

/** The id (1..3) of the node that currently leads. */
export async function ensembleLeader(): Promise<number> {
  return nodeId(await ensembleCtl(['leader']), 'ensembleLeader');
}

/** SIGKILL the leader; resolves with its id once the process is gone. */
export async function killEnsembleLeader(): Promise<number> {
  return nodeId(await ensembleCtl(['kill-leader']), 'killEnsembleLeader');
}

/** (Re)start node n keeping its data; resolves when it serves (follower or leader). */
export async function startEnsembleNode(n: number): Promise<void> {
  await ensembleCtl(['start-node', String(n)]);
}

/** SIGTERM node n and wait until it has exited. */
export async function stopEnsembleNode(n: number): Promise<void> {
  await ensembleCtl(['stop-node', String(n)]);
}

/** SIGKILL node n (any node, not only the leader). */
export async function killEnsembleNode(n: number): Promise<void> {
  await ensembleCtl(['kill-node', String(n)]);
}

/**
 * Resolves when every running node serves and one of them leads. Fault
 * tests call it after restarting nodes, so the next test starts from a
 * healthy ensemble.
 */
export async function waitEnsembleHealthy(timeoutSeconds = 60): Promise<void> {
  await ensembleCtl(['wait-healthy', String(timeoutSeconds)]);
}

/**
 * Leader kills for a test file: `kill()` SIGKILLs the ensemble's leader
 * (killEnsembleLeader) and resolves with its id; after each test that killed
 * one, the node is started again with its data and the ensemble is waited
 * for until healthy. Register it before the file's afterEach that closes
 * its clients: after-hooks run last-registered first, so the clients go
 * before the node comes back.
 */
export function ensembleLeaderKills(): { kill(): Promise<number> } {
  let killed: number | undefined;
  afterEach(async () => {
    if (killed === undefined) return;
    await startEnsembleNode(killed);
    killed = undefined;
    await waitEnsembleHealthy();
  });
  return { kill: async () => (killed = await killEnsembleLeader()) };
}

/** Restart every node that is down, then wait until healthy (for afterEach/afterAll). */
export async function restoreEnsemble(): Promise<void> {
  for (const n of [1, 2, 3]) await startEnsembleNode(n);
  await waitEnsembleHealthy();
}

/**
 * The servers as the environment the CLI, the demo and the README examples
 * read (ZOOKEEPER, DATABASE_URL, S3_*), for child processes of a test.
 */
export function serverEnvironment(servers: TestServers = testServers()): Record<string, string> {
  return {
    ZOOKEEPER: servers.zkStandalone,
    DATABASE_URL: servers.databaseUrl,
    S3_ENDPOINT: servers.s3.endpoint,
    S3_REGION: servers.s3.region,
    S3_ACCESS_KEY: servers.s3.credentials.accessKeyId,
    S3_SECRET_KEY: servers.s3.credentials.secretAccessKey,
  };
}

/**
 * For a test file that injects ensemble faults: hold the ensemble for the
 * whole file (holdEnsembleForFaults), start any node that is down and wait
 * until it is healthy before the first test; after the last, run `cleanup`, restart whatever is down and
 * give the ensemble back. Register it before the file's own hooks, so its
 * afterAll runs last.
 */
export function useEnsembleForFaults(cleanup: () => Promise<void> = async () => undefined): void {
  let release: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    release = await holdEnsembleForFaults();
    // Every node up, not only healthy: a run stopped before its restart left a node down, and
    // killing the leader of the two left would leave no quorum (and the next test hanging).
    await restoreEnsemble();
  }, 16 * 60_000);
  afterAll(async () => {
    try {
      await cleanup();
      await restoreEnsemble();
    } finally {
      await release?.();
    }
  }, 120_000);
}
