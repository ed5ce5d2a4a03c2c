// The token sources every source-generic test runs against, one entry per
// source. A test takes a SourceUnderTest and needs nothing else: the URL a
// child process (or the CLI) names the source by, how long a stopped holder
// takes to lose its grant, and a way to open the source in the test itself.
// A new source plugs in by adding its entry to SOURCES.
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import { etcdSession, etcdSource } from '../../src/sources/etcd/index.js';
import { redisSource } from '../../src/sources/redis/index.js';
import type { AcquireOptions } from '../../src/lock.js';
import type { LockSource } from '../../src/lock-source.js';
import type { FencingToken } from '../../src/token.js';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../src/sources/zookeeper/recipes/source.js';
// The environment, not ./servers.js: that module imports 'vitest', which the
// scripts using these sources (test/compare/run-compare.ts) cannot load.
import { environmentServers as testServers } from './server-env.js';

export interface OpenSource {
  readonly source: LockSource;
  close(): Promise<void>;
}

export interface SourceUnderTest {
  /** LockSource.kind of what open() returns. */
  readonly kind: string;
  /** The source as the CLI's --lock-service (and FENCEKEEPER_LOCK_SERVICE) takes it. */
  readonly lockService: string;
  /**
   * The grant's lifetime without renewals: a ZooKeeper session timeout, a
   * Redis key's TTL. Give it to a holder as --session-timeout; a holder
   * stopped for longer than this (and what the source adds to it) has lost the grant.
   */
  readonly grantMs: number;
  /** The same source, opened in this process, with the same grant lifetime. */
  open(): Promise<OpenSource>;
}

function redisClient(url: string): Redis {
  const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(url);
  if (m === null) throw new Error(`not a redis://host:port URL: ${url}`);
  const client = new Redis({ host: m[1] as string, port: Number(m[2]), retryStrategy: () => 50 });
  client.on('error', () => {});
  return client;
}

const hostsOf = (urls: readonly string[]): string => urls.map((u) => u.replace(/^redis:\/\//, '')).join(',');

export const ZOOKEEPER: SourceUnderTest = {
  kind: 'zookeeper',
  get lockService() {
    return `zookeeper://${testServers().zkStandalone}`;
  },
  grantMs: 4000,
  async open() {
    const zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 4000 });
    return { source: zookeeperSource(zk), close: () => zk.close() };
  },
};

// The short TTL is for the paused-holder tests (a stopped holder's grant
// ends soon); its default node timeout (a twentieth, 100 ms) is too short for a
// loaded test machine, where a command that outlasts it fails the test for
// nothing the test is about. The library's default for longer TTLs.
const REDIS_NODE_TIMEOUT_MS = 500;

export const REDIS: SourceUnderTest = {
  kind: 'redis',
  get lockService() {
    return `redis://${hostsOf([testServers().redis])}`;
  },
  grantMs: 2000,
  async open() {
    const client = redisClient(testServers().redis);
    return {
      source: redisSource(client, { ttlMs: 2000, nodeTimeoutMs: REDIS_NODE_TIMEOUT_MS }),
      close: async () => client.disconnect(),
    };
  },
};

export const REDLOCK: SourceUnderTest = {
  kind: 'redlock',
  get lockService() {
    return `redlock://${hostsOf(testServers().redlock)}`;
  },
  grantMs: 2000,
  async open() {
    const clients = testServers().redlock.map(redisClient);
    return {
      source: redisSource(clients, { ttlMs: 2000, nodeTimeoutMs: REDIS_NODE_TIMEOUT_MS }),
      close: async () => {
        for (const c of clients) c.disconnect();
      },
    };
  },
};

export const ETCD: SourceUnderTest = {
  kind: 'etcd',
  get lockService() {
    return `etcd://${new URL(testServers().etcd).host}`;
  },
  // A 2 s lease: etcd grants nothing shorter than 1.5 x its election timeout (1 s here).
  grantMs: 2000,
  async open() {
    const etcd = new Etcd3({ hosts: testServers().etcd });
    return {
      source: etcdSource(etcd, { ttlSeconds: 2 }),
      close: async () => {
        await etcdSession(etcd).close();
        etcd.close();
      },
    };
  },
};

export const SOURCES: readonly SourceUnderTest[] = [ZOOKEEPER, REDIS, REDLOCK, ETCD];

/**
 * Code that takes any source: each source takes the lock `turns` times, and
 * throws at once if two ever hold it together (or a fresh grant is not
 * held). The tokens, in grant order.
 */
export async function takeTurns(sources: readonly LockSource[], name: string, turns: number, options: AcquireOptions = {}): Promise<FencingToken[]> {
  const tokens: FencingToken[] = [];
  let holders = 0;
  await Promise.all(
    sources.map(async (source) => {
      for (let i = 0; i < turns; i++) {
        const lock = await source.acquireLock(name, { owner: source.description, ...options });
        holders++;
        if (holders !== 1 || !lock.held) throw new Error(`${holders} holders at token ${lock.token}`);
        tokens.push(lock.token);
        await new Promise((r) => setImmediate(r));
        holders--;
        await lock.release();
      }
    }),
  );
  return tokens;
}
