// Each real source's sequencers against fences bound to one of its locks, on
// the real servers: withFence and PostgresFenceStore (PostgreSQL),
// fencedPutObject (RGW) and fencing() over HTTP (MemoryFenceStore). For every
// source (ZooKeeper, Redis, Redlock, etcd): the guarding lock's later grant,
// with a larger token, advances; a later grant of another lock of the same
// source (a larger token), an election of the same name where the source has
// elections, a lock of the same name from another source, and the guarding
// lock's own token bare are all refused and change nothing.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SequencerMismatchError, formatSequencer, type FenceBinding, type Fencing, type LockSource, type Sequencer } from '../../../src/index.js';
import { MemoryFenceStore, fencing } from '../../../adapters/express/index.js';
import { PostgresFenceStore, bindFence, migrate, withFence } from '../../../adapters/postgres/index.js';
import { fencedPutObject, readFence } from '../../../adapters/s3/index.js';
import { SOURCES, type OpenSource } from '../../helpers/sources.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { post, serve, type Served } from '../express/helpers.js';
import { express } from '../express/variants.js';
import { DATABASE_URL, createSchema, dropSchema, newPool, uniqueName } from '../postgres/helpers.js';
import { holdRedisFaults } from '../redis/helpers.js';
import { TestBucket, expectRejects, newClient, randomPrefix } from '../s3/helpers.js';

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
const schema = uniqueName('fk_seq_fences');
const bucket = new TestBucket('seqfences');
let pool: pg.Pool;
const memory = new MemoryFenceStore();
let served: Served;

// Redis and Redlock must stay up for the whole file: wait out the files that
// kill or pause their nodes (the Redis set's fault turn).
let giveBackRedis: (() => Promise<void>) | undefined;
beforeAll(async () => {
  giveBackRedis = await holdRedisFaults();
}, 660_000);
afterAll(async () => giveBackRedis?.(), 120_000);

beforeAll(async () => {
  await createSchema(admin, schema);
  pool = newPool(schema, uniqueName('fk_seq_fences'), 4);
  await migrate(pool);
  await bucket.create();
  const app = express();
  app.post('/r/:id', fencing({ store: memory, resource: (req) => String(req.params['id']) }), (_req, res) => void res.end());
  served = await serve(app);
});
afterAll(async () => {
  await served.close();
  await bucket.remove();
  await pool.end();
  await dropSchema(admin, schema);
  await admin.end();
});

const bindingOf = (s: Sequencer): FenceBinding => ({ kind: s.kind, lock: s.name, source: s.source });

/** The four fenced writes, each to its own fence named `resource`; each resolves to the fence's mark afterwards. */
const fences = {
  withFence: async (resource: string, presented: Fencing) => {
    await withFence(pool, resource, presented, async () => undefined);
  },
  PostgresFenceStore: async (resource: string, presented: Fencing) => {
    const admission = await new PostgresFenceStore(pool).admit(resource, presented);
    await admission.commit();
  },
  fencedPutObject: async (resource: string, presented: Fencing) => {
    await fencedPutObject(newClient().client, { Bucket: bucket.name, Key: resource, Body: `${resource} ${String(typeof presented === 'bigint' ? presented : (presented as Sequencer).token)}`, token: presented });
  },
  fencing: async (resource: string, presented: Fencing) => {
    const header = typeof presented === 'bigint' ? presented.toString() : formatSequencer(presented as Sequencer);
    const answer = await post(served.port, `/r/${resource}`, { 'fencing-token': header });
    if (answer.status === 409 && (answer.body as { code?: string }).code === 'SEQUENCER_MISMATCH') {
      throw new SequencerMismatchError(resource, (answer.body as { bound: FenceBinding }).bound, null);
    }
    if (answer.status !== 200) throw new Error(`fencing() answered ${answer.status}`);
  },
};

/** fencing() commits its admission once the response has gone out: wait for the mark. */
async function expectMark(kind: keyof typeof fences, resource: string, mark: bigint): Promise<void> {
  await until(async () => (await markOf(kind, resource)) === mark, `${kind}: the mark of ${resource} to be ${mark}`);
}

async function markOf(kind: keyof typeof fences, resource: string): Promise<bigint | null> {
  if (kind === 'fencedPutObject') return readFence(newClient().client, { Bucket: bucket.name, Key: resource });
  if (kind === 'fencing') return memory.current(resource);
  const { rows } = await pool.query<{ token: string }>('SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1', [resource]);
  return rows[0] === undefined ? null : BigInt(rows[0].token);
}

async function bind(kind: keyof typeof fences, resource: string, first: Sequencer): Promise<void> {
  const binding = bindingOf(first);
  if (kind === 'fencedPutObject') {
    await fencedPutObject(newClient().client, { Bucket: bucket.name, Key: resource, Body: 'bound', token: first }, { bind: binding });
  } else if (kind === 'fencing') {
    await memory.bind(resource, binding);
    await fences.fencing(resource, first);
  } else {
    await bindFence(pool, resource, binding);
    await fences[kind](resource, first);
  }
}

describe.each(SOURCES)('$kind sequencers against bound fences', (under) => {
  let opened: OpenSource;
  let other: OpenSource;
  beforeAll(async () => {
    opened = await under.open();
    other = await (SOURCES.find((s) => s.kind !== under.kind) as (typeof SOURCES)[number]).open();
  });
  afterAll(async () => {
    await opened.close();
    await other.close();
  });

  const grant = async (source: LockSource, name: string): Promise<Sequencer> => {
    const lock = await source.acquireLock(name);
    await lock.release();
    return lock.sequencer;
  };

  it.each(Object.keys(fences) as (keyof typeof fences)[])('%s', async (kind) => {
    const name = uniqueLockName('guard');
    const resource = `${randomPrefix()}-${kind}`;
    const first = await grant(opened.source, name);
    await bind(kind, resource, first);
    const mark = first.token;
    await expectMark(kind, resource, mark);

    const intruders: [string, Fencing][] = [['another lock of the same source', await grant(opened.source, `${name}-other`)]];
    if (opened.source.campaign !== undefined) {
      const leader = await opened.source.campaign(name);
      await leader.resign();
      intruders.push(['an election of the same name', leader.sequencer]);
    }
    intruders.push(['the same name at another source', await grant(other.source, name)]);
    const later = await grant(opened.source, name);
    intruders.push(['the guarding lock\'s own token, bare', later.token]);
    for (const [what, presented] of intruders) {
      await expectRejects(fences[kind](resource, presented), SequencerMismatchError).catch((e: unknown) => {
        throw new Error(`${what}: ${(e as Error).message}`);
      });
    }
    expect(await markOf(kind, resource)).toBe(mark);
    const written = kind === 'fencedPutObject' ? await bucket.raw(resource) : null;
    expect(written?.body ?? null).toBe(kind === 'fencedPutObject' ? 'bound' : null);
    // The guarding lock's later grant, with its larger token: advances.
    expect(later.token > mark).toBe(true);
    await fences[kind](resource, later);
    await expectMark(kind, resource, later.token);
  });
});
