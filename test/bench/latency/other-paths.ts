// The S3 pair and the lock-cycle pairs of the latency bench, each client talking to
// its server through the delay proxy. Floors as the existing benches define them:
//   fencedPutObject       steady state (rewriting the key this client wrote last: one
//                         conditional PUT) vs a plain PutObject (s3-bench.mjs)
//   ZooKeeper             acquireLock + release vs raw-zk.ts's floor: create2 + getChildren in
//                         one write, then delete (lock-throughput.ts)
//   etcd                  acquireLock + release vs a put-if-absent txn on a lease, then a
//                         delete (etcd-bench.ts)
//   Redis / Redlock       acquireLock + release vs SET NX PX, then a compare-and-delete
//                         script, on one node / on five in parallel (redis-bench.ts)
//   PostgreSQL source     acquireLock + release vs fencekeeper_lock_enter and _leave sent
//                         by a bare pg client on a session of its own (postgres-source.ts)
// Each worker locks a name of its own: uncontended cycles, the latency-bound case.
import { randomBytes } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { Redis } from 'ioredis';
import pg from 'pg';
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { fencedPutObject } from '../../../adapters/s3/index.js';
import { migrate, postgresSource } from '../../../adapters/postgres/index.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { etcdSession, etcdSource } from '../../../src/sources/etcd/index.js';
import { redisSource } from '../../../src/sources/redis/index.js';
import { RawSession, rawCycle } from '../raw-zk.js';
import type { PathPair } from './pairs.js';

type PortOf = (target: number) => number;
const portOf = (hostPort: string): number => Number(hostPort.slice(hostPort.lastIndexOf(':') + 1));
const tag = `lat${process.pid}${randomBytes(3).toString('hex')}`;
const LOCKS_USUAL = 16; // lock-throughput.ts's K = 16

export interface Endpoints {
  readonly s3: string; // http://127.0.0.1:7480
  readonly zk: string; // 127.0.0.1:2181
  readonly etcd: string; // http://127.0.0.1:2379
  readonly redis: string; // redis://127.0.0.1:6390
  readonly redlock: readonly string[];
  readonly postgres: string; // postgres://...
}

/** Every port the proxy must stand in front of. */
export function targetPorts(e: Endpoints): number[] {
  return [portOf(new URL(e.s3).host), portOf(e.zk), Number(new URL(e.etcd).port), portOf(e.redis.replace('redis://', '')), ...e.redlock.map((u) => portOf(u.replace('redis://', ''))), Number(new URL(e.postgres).port || 5432)];
}

const S3_CONFIG = (endpoint: string) => ({
  endpoint,
  region: process.env['S3_REGION'] ?? 'us-east-1',
  forcePathStyle: true,
  credentials: { accessKeyId: process.env['S3_ACCESS_KEY'] ?? 'test', secretAccessKey: process.env['S3_SECRET_KEY'] ?? 'testsecret' },
});

/** The bucket, made and emptied directly (not through the proxy). */
export async function s3Setup(endpoint: string): Promise<{ bucket: string; drop(): Promise<void> }> {
  const admin = new S3Client(S3_CONFIG(endpoint));
  const bucket = `fk-lat-${randomBytes(4).toString('hex')}`;
  await admin.send(new CreateBucketCommand({ Bucket: bucket }));
  return {
    bucket,
    drop: async () => {
      const listed = await admin.send(new ListObjectsV2Command({ Bucket: bucket }));
      for (const o of listed.Contents ?? []) await admin.send(new DeleteObjectCommand({ Bucket: bucket, Key: o.Key! }));
      await admin.send(new DeleteBucketCommand({ Bucket: bucket }));
      admin.destroy();
    },
  };
}

export function s3Pair(e: Endpoints, port: PortOf, bucket: string, rtt: number): PathPair {
  const u = new URL(e.s3);
  u.port = String(port(Number(u.port)));
  const fencedClient = new S3Client(S3_CONFIG(u.origin));
  const plainClient = new S3Client(S3_CONFIG(u.origin));
  let n = 0;
  // Unique bodies: in place, a body equal to the current one is refused.
  const body = (): Buffer => Buffer.concat([Buffer.from(String((n += 1)).padStart(12, '0')), randomBytes(1012)]);
  return {
    path: 'fencedPutObject',
    aim: 0.95,
    usual: 8,
    fenced: { name: 'fencedPutObject (steady)', op: (w) => fencedPutObject(fencedClient, { Bucket: bucket, Key: `f-${rtt}-${w}`, Body: body(), token: 1n }) },
    baseline: { name: 'PutObject', op: (w) => plainClient.send(new PutObjectCommand({ Bucket: bucket, Key: `p-${rtt}-${w}`, Body: body() })) },
    close: async () => {
      fencedClient.destroy();
      plainClient.destroy();
    },
  };
}

export async function zookeeperPair(e: Endpoints, port: PortOf): Promise<PathPair> {
  const at = `127.0.0.1:${port(portOf(e.zk))}`;
  const zk = await ZooKeeperClient.connect({ connectString: at, sessionTimeoutMs: 10_000 });
  const source = zookeeperSource(zk);
  const raw = await RawSession.connect(at);
  const parents: string[] = [];
  for (let w = 0; w < LOCKS_USUAL; w += 1) {
    const parent = `/fk-lat-${tag}-w${w}`;
    await zk.create(parent).catch((error: { code?: string }) => {
      if (error.code !== 'ZK_NODEEXISTS') throw error;
    });
    parents.push(parent);
  }
  return {
    path: 'ZooKeeper lock cycle',
    aim: 0.9,
    usual: LOCKS_USUAL,
    fenced: {
      name: 'acquireLock + release',
      op: async (w) => {
        const lock = await source.acquireLock(`lat/${tag}/w${w}`);
        await lock.release();
      },
    },
    baseline: { name: 'raw floor', op: (w) => rawCycle(raw, parents[w]!) },
    close: async () => {
      raw.close();
      for (const p of parents) await zk.delete(p).catch(() => undefined);
      await zk.close();
    },
  };
}

export async function etcdPair(e: Endpoints, port: PortOf): Promise<PathPair> {
  const u = new URL(e.etcd);
  u.port = String(port(Number(u.port)));
  const etcd = new Etcd3({ hosts: u.origin });
  const source = etcdSource(etcd, { ttlSeconds: 10 });
  const bare = new Etcd3({ hosts: u.origin });
  const lease = await bare.leaseClient.leaseGrant({ TTL: 60 });
  return {
    path: 'etcd lock cycle',
    aim: 0.9,
    usual: LOCKS_USUAL,
    fenced: {
      name: 'acquireLock + release',
      op: async (w) => {
        const lock = await source.acquireLock(`lat/${tag}/w${w}`);
        await lock.release();
      },
    },
    baseline: {
      name: 'raw floor',
      op: async (w) => {
        const key = Buffer.from(`lat/${tag}/raw/w${w}`);
        const r = await bare.kv.txn({
          compare: [{ key, target: 'Create', result: 'Equal', create_revision: '0' }],
          success: [{ request_put: { key, value: Buffer.from('x'), lease: lease.ID } }],
          failure: [],
        });
        if (!r.succeeded) throw new Error('raw floor: key taken');
        await bare.kv.deleteRange({ key });
      },
    },
    close: async () => {
      await etcdSession(etcd).close();
      etcd.close();
      await bare.leaseClient.leaseRevoke({ ID: lease.ID }).catch(() => undefined);
      bare.close();
    },
  };
}

const RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

function redisClient(url: string, port: PortOf): Redis {
  const client = new Redis({ host: '127.0.0.1', port: port(portOf(url.replace('redis://', ''))) });
  client.defineCommand('fkRelease', { numberOfKeys: 1, lua: RELEASE });
  client.on('error', () => {});
  return client;
}

export function redisPair(urls: readonly string[], port: PortOf, path: string): PathPair {
  const ours = urls.map((u) => redisClient(u, port));
  const bare = urls.map((u) => redisClient(u, port));
  const source = redisSource(ours.length === 1 ? ours[0]! : ours, { ttlMs: 10_000 });
  return {
    path,
    aim: 0.9,
    usual: LOCKS_USUAL,
    fenced: {
      name: 'acquireLock + release',
      op: async (w) => {
        const lock = await source.acquireLock(`lat:${tag}:w${w}`);
        await lock.release();
      },
    },
    baseline: {
      name: 'raw floor',
      op: async (w) => {
        const key = `lat:${tag}:raw:w${w}`;
        const value = randomBytes(15).toString('base64url');
        const replies = await Promise.all(bare.map((c) => c.set(key, value, 'PX', 10_000, 'NX')));
        if (replies.filter((r) => r === 'OK').length < Math.floor(bare.length / 2) + 1) throw new Error('raw: not acquired');
        await Promise.all(bare.map((c) => (c as Redis & { fkRelease(key: string, value: string): Promise<unknown> }).fkRelease(key, value)));
      },
    },
    close: async () => {
      for (const c of [...ours, ...bare]) c.disconnect();
    },
  };
}

export async function postgresSourcePair(url: string, schema: string): Promise<PathPair> {
  const pools: pg.Pool[] = [];
  const pool = (max: number): pg.Pool => {
    const p = new pg.Pool({ connectionString: url, max, options: `-c search_path=${schema}` });
    pools.push(p);
    return p;
  };
  await migrate(pool(1));
  const source = postgresSource(pool(LOCKS_USUAL + 2), { leaseMs: 30_000 });
  const barePool = pool(LOCKS_USUAL);
  const sessionPool = pool(1);
  const { rows } = await sessionPool.query<{ id: string }>(`SELECT session_id::text AS id FROM fencekeeper_lock_session_open($1, 'bench', 600000)`, [`fencekeeper_lat_${randomBytes(6).toString('hex')}`]);
  const session = rows[0]!.id;
  const ENTER = `SELECT status, entry_id::text AS entry_id, token::text AS token, head, holder_ms::text AS holder_ms, reaped FROM fencekeeper_lock_enter($1, $2, $3, $4, $5, $6)`;
  const LEAVE = `SELECT fencekeeper_lock_leave($1, $2, $3)::text AS granted`;
  return {
    path: 'PostgreSQL source cycle',
    aim: 0.9,
    usual: LOCKS_USUAL,
    fenced: {
      name: 'acquireLock + release',
      op: async (w) => {
        const lock = await source.acquireLock(`lat/${tag}/w${w}`);
        await lock.release();
      },
    },
    baseline: {
      name: 'enter + leave, bare',
      op: async (w) => {
        const key = randomBytes(12).toString('base64url');
        const client = await barePool.connect();
        try {
          const entered = await client.query<{ entry_id: string }>({ name: 'lat_enter', text: ENTER, values: [session, 'lock', `lat/${tag}/floor/w${w}`, 'bench', true, key] });
          await client.query({ name: 'lat_leave', text: LEAVE, values: [session, entered.rows[0]!.entry_id, key] });
        } finally {
          client.release();
        }
      },
    },
    close: async () => {
      await source.close();
      await Promise.all(pools.map((p) => p.end()));
    },
  };
}
