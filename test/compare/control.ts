// The servers' fault commands for npm run compare: test/servers/redis.sh,
// etcd.sh and zk-ensemble.sh, run as this process (FK_USER_PID), which is
// what holds each set's fault turn while a scenario breaks its nodes. No
// vitest here: the script loads this module outside a test worker.
import { execFile } from 'node:child_process';
import { holdEnsembleForFaults } from '../helpers/ensemble-lock.js';
import { healedTurn, scriptTurn } from '../helpers/fault-turn.js';
import { SERVER_ENV } from '../helpers/server-env.js';

type Script = 'redisCtl' | 'etcdCtl' | 'zkEnsembleCtl';

function run(which: Script, args: readonly string[]): Promise<string> {
  const script = process.env[SERVER_ENV[which]];
  if (script === undefined || script === '') {
    return Promise.reject(new Error(`${SERVER_ENV[which]} is not set: the servers of this run cannot be driven (start them with the global setup)`));
  }
  return new Promise((resolve, reject) => {
    execFile('bash', [script, ...args], { timeout: 660_000, env: { ...process.env, FK_USER_PID: String(process.pid) } }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${script} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

export const redisCtl = (...args: string[]): Promise<string> => run('redisCtl', args);
export const etcdCtl = (...args: string[]): Promise<string> => run('etcdCtl', args);
export const zkCtl = (...args: string[]): Promise<string> => run('zkEnsembleCtl', args);

/** A node id 1..3 printed by a kill-leader or leader command. */
export function memberId(text: string, what: string): number {
  const id = Number(text.split('\n').at(-1));
  if (![1, 2, 3].includes(id)) throw new Error(`${what}: expected a node id 1..3, got ${JSON.stringify(text)}`);
  return id;
}

/** A fault turn, taken; the function gives it back (after healing what the scenario broke). */
export type Turn = () => Promise<void>;

/** The Redis set's turn (single, Redlock, pair), healed on both ends. */
export const holdRedis = (): Promise<Turn> => healedTurn(scriptTurn(redisCtl, 600), () => redisCtl('heal'));

/** The etcd cluster's turn, healthy on both ends. */
export const holdEtcd = (): Promise<Turn> => healedTurn(scriptTurn(etcdCtl, 600), () => etcdCtl('heal'));

/** The ZooKeeper ensemble's turn (the lock directory the leader-killing test files take), every node up on both ends. */
export const holdEnsemble = (): Promise<Turn> => healedTurn(holdEnsembleForFaults, restoreEnsemble);

export async function restoreEnsemble(): Promise<void> {
  for (const n of [1, 2, 3]) await zkCtl('start-node', String(n));
  await zkCtl('wait-healthy', '60');
}
