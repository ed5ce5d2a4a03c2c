// The paused holder, per lock kind (read lock, write lock, permit), on the
// ZooKeeper and etcd sources: a child process (test/fixtures/kind-holder.mjs)
// takes its grant and writes once through a PostgreSQL fence, is SIGSTOPped,
// and stays stopped while its session (ZooKeeper, 4 s) or lease (etcd, 2 s)
// runs out and the next holder is granted: a writer after a stopped reader or
// writer, the next permit of the stopped holder's slot (the other slot held
// meanwhile, so only that slot's release can grant it). The next holder's
// token is larger and it writes through the fence (advancing it). Then the
// stopped holder is resumed and writes with its old token: refused
// (STALE_TOKEN), a reader's check-only write ({ advance: false }) as well as
// a writer's and a permit's advancing one; its first check reads held false.
import pg from 'pg';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, withFence } from '../../../adapters/postgres/index.js';
import type { Lock } from '../../../src/lock.js';
import type { LockSource } from '../../../src/lock-source.js';
import type { FencingToken } from '../../../src/token.js';
import { etcdSession, etcdSource } from '../../../src/sources/etcd/index.js';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { spawnHolder, type HolderProcess } from '../../../src/testing/index.js';
import { processStopped } from '../../helpers/paused-source-holder.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { within } from '../../helpers/wait.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/kind-holder.mjs', import.meta.url));
const PERMITS = 2;

interface KindSource {
  readonly kind: 'zookeeper' | 'etcd';
  /** The ZooKeeper session timeout / the etcd lease TTL, the holder's and ours. */
  readonly grantMs: number;
  open(): Promise<{ source: LockSource; close(): Promise<void> }>;
}

const SOURCES: readonly KindSource[] = [
  {
    kind: 'zookeeper',
    grantMs: 4000,
    async open() {
      const zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone, sessionTimeoutMs: 4000 });
      return { source: zookeeperSource(zk), close: () => zk.close() };
    },
  },
  {
    kind: 'etcd',
    // etcd grants no lease shorter than 1.5 x its election timeout (1 s on the test servers).
    grantMs: 2000,
    async open() {
      const etcd = new Etcd3({ hosts: new URL(testServers().etcd).host });
      return {
        source: etcdSource(etcd, { ttlSeconds: 2 }),
        close: async () => {
          await etcdSession(etcd).close().catch(() => undefined);
          etcd.close();
        },
      };
    },
  },
];

type Kind = 'read' | 'write' | 'permit';

interface Held {
  readonly step: 'held';
  readonly slot: number | null;
  readonly kind: string;
  readonly sequencer: string;
  readonly first: string;
}

interface Wrote {
  readonly step: 'wrote';
  readonly held: boolean;
  readonly aborted: boolean;
  readonly reason: string | null;
  readonly token: FencingToken;
  readonly postgres: string;
}

let pool: pg.Pool;
const holders: HolderProcess[] = [];

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: testServers().databaseUrl, max: 4 });
  await migrate(pool);
}, 120_000);
afterAll(async () => {
  await Promise.all(holders.map((h) => h.stop()));
  await pool?.end();
}, 60_000);

const fencedWrite = (resource: string, token: FencingToken): Promise<string> =>
  withFence(pool, resource, token, async (client) => client.query({ text: 'SELECT 1' })).then(
    () => 'written',
    (error: { code?: string; message: string }) => error.code ?? error.message,
  );

describe.each(SOURCES)('a holder SIGSTOPped past its grant: $kind', (sut) => {
  it.each<Kind>(['read', 'write', 'permit'])('%s: the next holder gets a larger token and writes; the resumed holder\'s write is refused by the fence', async (kind) => {
    const name = uniqueLockName(`paused_kind_${sut.kind}_${kind}`);
    const resource = `paused-kinds/${name}`;
    const holder = await spawnHolder(FIXTURE, {
      env: {
        ...process.env,
        FK_KIND_SOURCE: sut.kind,
        FK_KIND: kind,
        FK_LOCK: name,
        FK_PERMITS: String(PERMITS),
        FK_RESOURCE: resource,
        FK_SESSION_MS: String(sut.grantMs),
        FK_ZK: testServers().zkStandalone,
        FK_ETCD: testServers().etcd,
        DATABASE_URL: testServers().databaseUrl,
      },
    });
    holders.push(holder);
    const [mine, other] = await Promise.all([sut.open(), sut.open()]);
    const granted: Lock[] = [];
    try {
      const { token: oldToken } = await within(holder.holding, 60_000, `the holder to take its ${kind} grant`);
      const held = (await holder.next((m) => (m as Held).step === 'held')) as Held;
      expect(held.first, 'the holder\'s own write before its pause').toBe('written');
      expect(held.kind).toBe(kind);
      // A permit's fence is its slot's: another slot's holder must not stand in the way.
      const fenceOf = (slot: number | null): string => (slot === null ? resource : `${resource}#${slot}`);
      if (kind === 'permit') {
        expect(held.sequencer).toBe(`${name}#${held.slot}`);
        // The other slot taken and kept: the next permit can only get the stopped holder's slot.
        const rest = await mine.source.acquirePermit!(name, { permits: PERMITS, timeoutMs: 30_000 });
        granted.push(rest);
        expect(rest.slot).not.toBe(held.slot);
      }
      // While the holder runs, its grant excludes the next one.
      const early =
        kind === 'permit'
          ? await other.source.tryAcquirePermit!(name, { permits: PERMITS })
          : await other.source.tryAcquireWriteLock!(name);
      if (early !== null) granted.push(early);
      expect(early, `a ${kind === 'permit' ? 'permit' : 'writer'} granted beside the live holder`).toBeNull();
      await holder.pause();
      const pausedAt = performance.now();
      const limit = sut.grantMs * 10 + 30_000;
      // A writer after a stopped reader or writer; the next permit after a stopped permit.
      const next =
        kind === 'permit'
          ? await other.source.acquirePermit!(name, { permits: PERMITS, timeoutMs: limit })
          : await other.source.acquireWriteLock!(name, { timeoutMs: limit });
      granted.push(next);
      const waitedMs = performance.now() - pausedAt;
      const stoppedAtGrant = processStopped(holder.pid);
      // Not before the stopped grant could have run out: its last renewal (a ping, a keepalive, every
      // third of its lifetime) came about a third of it before the pause, so two thirds remain; a third
      // is the bound, leaving another third for renewals late on a loaded machine. A lower bound only.
      expect(waitedMs, 'the next grant came before the stopped one could have expired').toBeGreaterThan(sut.grantMs / 3);
      expect(stoppedAtGrant, 'the holder was still stopped when the next grant came').toBe(true);
      expect(next.token > oldToken, `next ${next.token} after the stopped holder's ${oldToken}`).toBe(true);
      const slot = kind === 'permit' ? (next as Lock & { slot: number }).slot : null;
      if (kind === 'permit') expect(slot).toBe(held.slot);
      expect(await fencedWrite(fenceOf(slot), next.token)).toBe('written');

      holder.send('write'); // read by the holder once it runs again
      holder.resume();
      const wrote = (await within(holder.next((m) => (m as Wrote).step === 'wrote'), 60_000, 'the resumed holder\'s report')) as Wrote;
      expect(wrote.token).toBe(oldToken);
      expect(wrote.held, 'the resumed holder\'s first check').toBe(false);
      expect(wrote.aborted).toBe(true);
      // The holder's own clock ran out (deadline), or it heard of its session's end or its node's deletion first.
      expect(['deadline', 'session_expired', 'node_deleted']).toContain(wrote.reason);
      expect(wrote.postgres, 'the stale write').toBe('STALE_TOKEN');
      expect(next.held).toBe(true);
    } finally {
      await Promise.all(granted.map((g) => g.release().catch(() => undefined)));
      await Promise.all([mine.close(), other.close()]);
    }
    holder.send('exit');
    await within(holder.exited, 30_000, 'the holder to exit');
  });
});
