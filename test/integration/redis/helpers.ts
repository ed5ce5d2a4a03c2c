// Redis in tests: ioredis clients closed after each test, the servers of
// this run (FK_REDIS, FK_REDLOCK), and the node faults of test/servers/redis.sh
// under the set's fault turn.
import { execFile } from 'node:child_process';
import { afterAll, beforeAll } from 'vitest';
import { Redis } from 'ioredis';
import type { RedisClient } from '../../../src/sources/redis/index.js';
import { healedTurn, scriptTurn } from '../../helpers/fault-turn.js';
import { testServers } from '../../helpers/servers.js';

export function hostPort(url: string): { host: string; port: number } {
  const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(url);
  if (m === null) throw new Error(`not a redis://host:port URL: ${url}`);
  return { host: m[1] as string, port: Number(m[2]) };
}

export const singleUrl = (): string => testServers().redis;
export const redlockUrls = (): readonly string[] => testServers().redlock;
export const redlockPorts = (): number[] => redlockUrls().map((u) => hostPort(u).port);

/** The clients a test file opened, disconnected together after each test. */
export class RedisPool {
  readonly #clients: Redis[] = [];

  open(url: string): Redis {
    const { host, port } = hostPort(url);
    // A node under a fault test is down for a while: keep trying to reconnect, quietly.
    const client = new Redis({ host, port, retryStrategy: () => 50 });
    client.on('error', () => {});
    this.#clients.push(client);
    return client;
  }

  single(): Redis {
    return this.open(singleUrl());
  }

  /** One client per Redlock node. */
  redlock(count = 5): Redis[] {
    return redlockUrls().slice(0, count).map((u) => this.open(u));
  }

  closeAll(): void {
    for (const c of this.#clients.splice(0)) c.disconnect();
  }
}

/** A client that counts the commands sent through it (for "one release wakes one waiter"). */
export function counting(client: Redis, count: (command: string, args: readonly (string | number)[]) => void): RedisClient {
  return {
    call: (command, args) => {
      count(command, args);
      return client.call(command, args);
    },
    duplicate: (override) => client.duplicate(override),
    options: client.options,
  };
}

/** test/servers/redis.sh COMMAND..., as this worker (FK_USER_PID: the fault turn is ours). */
export function redisCtl(...args: string[]): Promise<string> {
  // The global setup puts it in the environment it hands to every worker.
  const ctl = process.env.FK_REDIS_CTL;
  if (ctl === undefined || ctl === '') return Promise.reject(new Error('FK_REDIS_CTL is not set: the Redis servers of this run cannot be driven'));
  return new Promise((resolve, reject) => {
    execFile('bash', [ctl, ...args], { timeout: 120_000, env: { ...process.env, FK_USER_PID: String(process.pid) } }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${ctl} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      else resolve(stdout.trim());
    });
  });
}

/**
 * Take the Redis set's fault turn for this file (other files that pause or
 * kill nodes wait), and give it back healed. Call from beforeAll; the
 * returned function from afterAll.
 */
export function holdRedisFaults(): Promise<() => Promise<void>> {
  return healedTurn(scriptTurn(redisCtl, 600), () => redisCtl('heal'));
}

/**
 * holdRedisFaults for the whole of the calling file: taken in its beforeAll
 * (waiting up to 11 minutes for the turn), given back healed in its afterAll.
 */
export function holdRedisFaultsForFile(): void {
  let giveBack: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    giveBack = await holdRedisFaults();
  }, 11 * 60_000);
  afterAll(async () => giveBack?.(), 120_000);
}

/** A raw command to one port, on a connection of its own. */
export async function onPort<T = unknown>(port: number, command: string, ...args: (string | number)[]): Promise<T> {
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => null });
  c.on('error', () => {});
  try {
    await c.connect();
    return (await c.call(command, args)) as T;
  } finally {
    c.disconnect();
  }
}
