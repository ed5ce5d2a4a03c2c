// The five token sources of the scale bench, each opened as a LockSource on the
// deployment the issue names (3-node ZooKeeper ensemble, 3-node etcd cluster, single
// Redis, Redlock over 5 nodes, PostgreSQL), with what the server holds read where it
// can be: ZooKeeper `mntr` (approximate data size, znodes, watches), Redis INFO
// memory (used_memory, summed over the nodes), etcd's db size metric, PostgreSQL's
// pg_total_relation_size of the source's tables (in a schema of the run's own).
// Also a round trip of each (the cheapest request it answers): the bound a handoff
// is put beside. Used by the parent and by the contended child processes alike.
import { randomBytes } from 'node:crypto';
import { connect as tcpConnect } from 'node:net';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { LockSource } from '../../../src/lock-source.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { etcdSource } from '../../../src/sources/etcd/source.js';
import { etcdSession } from '../../../src/sources/etcd/session.js';
import { redisSource } from '../../../src/sources/redis/source.js';
import { postgresSource } from '../../../src/sources/postgres/source.js';
import { lockKeys } from '../../../src/sources/redis/scripts.js';
import { queuePath } from '../../../src/sources/zookeeper/recipes/queue-path.js';
import { migrate } from '../../../adapters/postgres/migrate.js';

export const FAMILIES = ['zookeeper', 'etcd', 'redis', 'redlock', 'postgres'] as const;
export type SourceFamily = (typeof FAMILIES)[number];

const env = process.env;
export const servers = {
  zk: env['FK_ZK_ENSEMBLE'] ?? '127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283',
  etcd: (env['FK_ETCD_CLUSTER'] ?? 'http://127.0.0.1:2391,http://127.0.0.1:2392,http://127.0.0.1:2393').split(','),
  redis: env['FK_REDIS'] ?? 'redis://127.0.0.1:6390',
  redlock: (env['FK_REDLOCK'] ?? [6391, 6392, 6393, 6394, 6395].map((p) => `redis://127.0.0.1:${p}`).join(',')).split(','),
  pg: env['DATABASE_URL'] ?? 'postgres://root@127.0.0.1:5432/test',
};

export const DEPLOYMENT: Record<SourceFamily, string> = {
  zookeeper: `3-node ensemble ${servers.zk}`,
  etcd: `3-node cluster ${servers.etcd.join(',')}`,
  redis: `single node ${servers.redis}`,
  redlock: `Redlock over 5 nodes ${servers.redlock.map((u) => u.replace(/^redis:\/\/[^:]+:/, ':')).join('')}`,
  postgres: `PostgreSQL ${servers.pg.replace(/\/\/[^@]*@/, '//')}`,
};

/** One opened source: the LockSource, a round trip to its server, and its close. */
export interface Opened {
  readonly source: LockSource;
  /** One cheapest request (ZooKeeper exists, etcd get, Redis PING, PostgreSQL SELECT 1): the bound of a handoff. */
  ping(): Promise<void>;
  /**
   * The lock's queue length (holder + waiters) by the cheapest listing the source has:
   * ZooKeeper getChildren of the queue node (what a join lists), Redis the lock key and the
   * waiter set on one node (EXISTS + ZCARD), etcd and PostgreSQL lockStatus.
   */
  queued(name: string): Promise<number>;
  /**
   * PostgreSQL only: the scans an enter makes over the name's queue at its depth now
   * (reap's DELETE over the name's entries, is_head of the last entry, holder_ms), as
   * one statement in a transaction rolled back: the part of an enter that grows with N.
   */
  enterScans?(name: string): Promise<void>;
  /**
   * ZooKeeper only: how many listings the recipes have made on this source so far
   * outside a join (getChildren: a waiter that could not tell a release from a
   * give-up lists the queue; a join lists with getChildrenListing). The bench's
   * own queued() is not counted.
   */
  waiterListings?(): number;
  close(): Promise<void>;
}

/** Redis: the lock key (held or reserved) plus the waiter list's length, on one node (lockStatus shows no waiters there). */
const redisLength = async (c: Redis, name: string): Promise<number> => {
  const [lock, , waiters] = lockKeys(name);
  const [held, len] = await Promise.all([c.exists(lock), c.zcard(waiters)]);
  return held + len;
};

/** Queue length from lockStatus (holder + waiters). */
const statusLength = async (source: LockSource, name: string): Promise<number> => {
  const st = await source.lockStatus!(name);
  return (st.holder === null ? 0 : 1) + st.waiters.length;
};

// The machine is shared (load averages of 10-20 on 2 cores seen): the default 500 ms per
// Redis request fails the run's setup there, while the figures are about the waiting.
const NODE_TIMEOUT_MS = 5000;

function redisClient(url: string, autoPipelining = false): Redis {
  const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(url);
  if (m === null) throw new Error(`not a redis://host:port URL: ${url}`);
  return new Redis({ host: m[1] as string, port: Number(m[2]), maxRetriesPerRequest: 3, enableAutoPipelining: autoPipelining });
}

/**
 * How the heap section opens Redis and Redlock: thousands of acquires at once, as an
 * application holding that many locks would configure its clients and TTL. A TTL of
 * 10 minutes: with 30 s the watchdog renews every held lock every 10 s (100,000
 * Redlock holds: 50,000 scripts a second), which the set-up of a point then spends
 * its time on; the heap a grant or a waiter keeps does not depend on the TTL.
 * ioredis's auto-pipelining: the commands of one turn go out in one write, not one
 * write each (a profile of the 10,000 Redlock point: 35% of the process in
 * writeUtf8String).
 */
export const HEAP_REDIS = { ttlMs: 600_000, autoPipelining: true } as const;

/** A PostgreSQL pool on the run's schema (search_path), `max` connections. */
export function pgPool(schema: string, max: number): pg.Pool {
  return new pg.Pool({ connectionString: servers.pg, max, options: `-c search_path=${schema}` });
}

/** A fresh schema with the migrations applied; returns its name and a drop. */
export async function pgSchema(): Promise<{ schema: string; drop(): Promise<void> }> {
  const schema = `fk_scale_${randomBytes(4).toString('hex')}`;
  const root = new pg.Pool({ connectionString: servers.pg, max: 1 });
  await root.query(`CREATE SCHEMA ${schema}`);
  const p = pgPool(schema, 1);
  await migrate(p);
  await p.end();
  return {
    schema,
    drop: async () => {
      await root.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => undefined);
      await root.end();
    },
  };
}

/** Opens one source of `family`. `pgSchemaName` is needed for postgres, `pgMax` its pool size. */
export async function openSource(family: SourceFamily, o: { pgSchemaName?: string | undefined; pgMax?: number; redis?: { readonly ttlMs: number; readonly autoPipelining: boolean } } = {}): Promise<Opened> {
  const redisTtlMs = o.redis?.ttlMs ?? 30_000;
  const autoPipelining = o.redis?.autoPipelining ?? false;
  switch (family) {
    case 'zookeeper': {
      const zk = await ZooKeeperClient.connect({ connectString: servers.zk, sessionTimeoutMs: 30_000 });
      // Count the recipes' getChildren calls (see waiterListings); queued() calls the method unwrapped.
      const list = zk.getChildren.bind(zk);
      let listings = 0;
      zk.getChildren = (...args: Parameters<ZooKeeperClient['getChildren']>) => {
        listings++;
        return list(...args);
      };
      return {
        source: zookeeperSource(zk),
        ping: async () => void (await zk.exists('/')),
        queued: async (name) => (await list(queuePath('lock', name))).length,
        waiterListings: () => listings,
        close: () => zk.close(),
      };
    }
    case 'etcd': {
      const etcd = new Etcd3({ hosts: [...servers.etcd] });
      const source = etcdSource(etcd, { ttlSeconds: 30 });
      return {
        source,
        queued: (name) => statusLength(source, name),
        ping: async () => void (await etcd.get('fk_scale_ping').string()),
        close: async () => {
          await etcdSession(etcd).close().catch(() => undefined);
          etcd.close();
        },
      };
    }
    case 'redis': {
      const c = redisClient(servers.redis, autoPipelining);
      const source = redisSource(c, { ttlMs: redisTtlMs, nodeTimeoutMs: NODE_TIMEOUT_MS });
      return { source, ping: async () => void (await c.ping()), queued: (name) => redisLength(c, name), close: async () => c.disconnect() };
    }
    case 'redlock': {
      const cs = servers.redlock.map((u) => redisClient(u, autoPipelining));
      const source = redisSource(cs, { ttlMs: redisTtlMs, nodeTimeoutMs: NODE_TIMEOUT_MS });
      return {
        source,
        // The first node's list: every waiter's entry goes to each node.
        queued: (name) => redisLength(cs[0]!, name),
        ping: async () => void (await Promise.all(cs.map((c) => c.ping()))),
        close: async () => cs.forEach((c) => c.disconnect()),
      };
    }
    case 'postgres': {
      if (o.pgSchemaName === undefined) throw new Error('postgres needs a schema');
      const pool = pgPool(o.pgSchemaName, o.pgMax ?? 3);
      const source = postgresSource(pool, { leaseMs: 30_000 });
      return {
        source,
        ping: async () => void (await pool.query('SELECT 1')),
        queued: (name) => statusLength(source, name),
        enterScans: async (name) => {
          const c = await pool.connect();
          try {
            await c.query('BEGIN');
            await c.query(
              `SELECT fencekeeper_lock_reap('lock', $1), fencekeeper_lock_holder_ms('lock', $1),
                      fencekeeper_lock_is_head('lock', $1, (SELECT max(id) FROM fencekeeper_lock_entries WHERE kind = 'lock' AND name = $1))`,
              [name],
            );
          } finally {
            await c.query('ROLLBACK').catch(() => undefined);
            c.release();
          }
        },
        close: async () => {
          await source.close().catch(() => undefined);
          await pool.end();
        },
      };
    }
  }
}

/** ZooKeeper four-letter word `mntr` of the first server, as key -> value. */
function zkMntr(): Promise<Map<string, string>> {
  const [host, port] = servers.zk.split(',')[0]!.split(':') as [string, string];
  return new Promise((resolve, reject) => {
    let text = '';
    const s = tcpConnect(Number(port), host, () => s.write('mntr'));
    s.setEncoding('utf8');
    s.on('data', (d: string) => (text += d));
    s.on('error', reject);
    s.on('end', () => resolve(new Map(text.split('\n').map((l) => l.split('\t') as [string, string]))));
  });
}

/** What the server holds, in bytes (and a note of what was read), or null where it cannot be read. */
export interface ServerReading {
  readonly bytes: number;
  readonly what: string;
  readonly detail: string;
}

export async function readServer(family: SourceFamily, schema?: string): Promise<ServerReading> {
  switch (family) {
    case 'zookeeper': {
      const m = await zkMntr();
      return { bytes: Number(m.get('zk_approximate_data_size')), what: 'mntr zk_approximate_data_size', detail: `znodes ${m.get('zk_znode_count')}, watches ${m.get('zk_watch_count')}` };
    }
    case 'etcd': {
      const text = await (await fetch(`${servers.etcd[0]}/metrics`)).text();
      const v = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
      return { bytes: v('etcd_mvcc_db_total_size_in_use_in_bytes'), what: 'etcd_mvcc_db_total_size_in_use_in_bytes', detail: `keys ${v('etcd_debugging_mvcc_keys_total')}` };
    }
    case 'redis':
    case 'redlock': {
      const urls = family === 'redis' ? [servers.redis] : servers.redlock;
      let bytes = 0;
      let keys = 0;
      for (const url of urls) {
        const c = redisClient(url);
        const info = await c.info('memory');
        bytes += Number(/used_memory:(\d+)/.exec(info)?.[1]);
        keys += await c.dbsize();
        c.disconnect();
      }
      return { bytes, what: `INFO used_memory${urls.length > 1 ? ` summed over ${urls.length} nodes` : ''}`, detail: `keys ${keys}` };
    }
    case 'postgres': {
      const c = new pg.Client({ connectionString: servers.pg });
      await c.connect();
      try {
        const { rows } = await c.query<{ bytes: string; n: string }>(
          `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::text AS bytes, count(*)::text AS n
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'fencekeeper_lock%'`,
          [schema],
        );
        return { bytes: Number(rows[0]!.bytes), what: 'pg_total_relation_size of fencekeeper_lock* tables', detail: `${rows[0]!.n} tables` };
      } finally {
        await c.end();
      }
    }
  }
}
