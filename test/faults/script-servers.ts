// The servers of run-checker.ts, a plain Node script: test/helpers/servers.ts
// imports 'vitest', which only loads inside a vitest worker, so the script
// reads the same environment variables (SERVER_ENV) and drives the ensemble
// through the same control script (FK_ZK_ENSEMBLE_CTL) itself.
import { execFile } from 'node:child_process';
import { SERVER_ENV } from '../helpers/server-env.js';
import type { TestServers } from '../helpers/servers.js';
import type { EnsembleControl } from './harness.js';

function env(name: string, fallback?: string): string {
  const value = process.env[name];
  if (value !== undefined && value !== '') return value;
  if (fallback !== undefined) return fallback;
  throw new Error(`${name} is not set (and the global setup did not start that server)`);
}

export function scriptServers(): TestServers {
  return {
    zkStandalone: env(SERVER_ENV.zkStandalone, ''),
    zkEnsemble: env(SERVER_ENV.zkEnsemble),
    databaseUrl: env(SERVER_ENV.databaseUrl),
    s3: {
      endpoint: env(SERVER_ENV.s3Endpoint),
      region: env(SERVER_ENV.s3Region, 'us-east-1'),
      credentials: { accessKeyId: env(SERVER_ENV.s3AccessKey, 'test'), secretAccessKey: env(SERVER_ENV.s3SecretKey, 'testsecret') },
    },
  };
}

function ctl(args: readonly string[]): Promise<string> {
  const script = env(SERVER_ENV.zkEnsembleCtl);
  return new Promise((resolve, reject) => {
    execFile('bash', [script, ...args], { timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${script} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

export const scriptEnsembleControl: EnsembleControl & { restore(): Promise<void> } = {
  async killLeader() {
    const id = Number(await ctl(['kill-leader']));
    if (![1, 2, 3].includes(id)) throw new Error(`kill-leader printed ${id}`);
    return id;
  },
  async startNode(n) {
    await ctl(['start-node', String(n)]);
  },
  async restore() {
    for (const n of [1, 2, 3]) await ctl(['start-node', String(n)]);
    await ctl(['wait-healthy', '60']);
  },
};
