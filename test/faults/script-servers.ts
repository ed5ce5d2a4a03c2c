// The servers of run-checker.ts, a plain Node script: test/helpers/servers.ts
// imports 'vitest', which only loads inside a vitest worker, so the script
// reads the same environment variables (SERVER_ENV) and drives the ensemble
// through the same control script (FK_ZK_ENSEMBLE_CTL) itself.
import { execFile } from 'node:child_process';
import { SERVER_DEFAULTS, SERVER_ENV, serversReadBy, type ProvidedServers, type TestServers } from '../helpers/server-env.js';
import type { EnsembleControl } from './harness.js';

function env(key: keyof ProvidedServers): string {
  const value = process.env[SERVER_ENV[key]];
  if (value !== undefined && value !== '') return value;
  const fallback = SERVER_DEFAULTS[key];
  if (fallback !== undefined) return fallback;
  throw new Error(`${SERVER_ENV[key]} is not set (and the global setup did not start that server)`);
}

/** Like testServers(): each field is read when used, so a script needs only the servers it touches. */
export function scriptServers(): TestServers {
  return serversReadBy(env);
}

function ctl(args: readonly string[]): Promise<string> {
  const script = env('zkEnsembleCtl');
  return new Promise((resolve, reject) => {
    execFile('bash', [script, ...args], { timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${script} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

export const scriptEnsembleControl: EnsembleControl & { waitHealthy(): Promise<void>; restore(): Promise<void> } = {
  async killLeader() {
    const id = Number(await ctl(['kill-leader']));
    if (![1, 2, 3].includes(id)) throw new Error(`kill-leader printed ${id}`);
    return id;
  },
  async startNode(n) {
    await ctl(['start-node', String(n)]);
  },
  async waitHealthy() {
    await ctl(['wait-healthy', '60']);
  },
  async restore() {
    for (const n of [1, 2, 3]) await ctl(['start-node', String(n)]);
    await ctl(['wait-healthy', '60']);
  },
};
