// fencing() with verifyHolder, the source-generic CheckSequencer, against a
// real ZooKeeper and a real etcd: the holder's token (bare or as its
// sequencer) passes, a forged one (the holder's plus one), a replaced
// holder's and another lock's sequencer are refused with 403 and move
// nothing; a source without a queue to observe is refused when the verifier
// is made.
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { express } from './variants.js';
import { fencing, fencingHeaders, MemoryFenceStore, verifyHolder, type HolderVerifier } from '../../../adapters/express/index.js';
import { InvalidArgumentError, sequencer, type LockSource } from '../../../src/index.js';
import { ZooKeeperClient, zookeeperSource } from '../../../src/sources/zookeeper/index.js';
import { etcdSession, etcdSource } from '../../../src/sources/etcd/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until } from '../../helpers/wait.js';
import { post, serve, type Served } from './helpers.js';

interface Harness {
  readonly source: LockSource;
  readonly close: () => Promise<void>;
}

const harnesses: Record<string, () => Promise<Harness>> = {
  zookeeper: async () => {
    const zk = await ZooKeeperClient.connect({ connectString: testServers().zkStandalone });
    return { source: zookeeperSource(zk), close: () => zk.close() };
  },
  etcd: async () => {
    const etcd = new Etcd3({ hosts: [new URL(testServers().etcd).host] });
    return {
      source: etcdSource(etcd, { ttlSeconds: 10 }),
      close: async () => {
        await etcdSession(etcd).close();
        etcd.close();
      },
    };
  },
};

describe.each(Object.keys(harnesses))('verifyHolder over %s', (kind) => {
  let harness: Harness;
  let served: Served;
  let verifier: HolderVerifier;
  const lockName = uniqueLockName(`verify-holder-${kind}`);
  const store = new MemoryFenceStore();

  beforeAll(async () => {
    harness = await harnesses[kind]!();
    verifier = verifyHolder(harness.source, lockName);
    const app = express();
    app.post('/r', fencing({ store, resource: 'r', verify: verifier }), (_req, res) => void res.status(204).end());
    served = await serve(app);
  });

  afterAll(async () => {
    verifier?.close();
    await served?.close();
    await harness?.close();
  });

  it('admits the holder\'s token and sequencer; refuses a forged token, its token claimed for another lock or source, and a replaced holder', async () => {
    const first = await harness.source.acquireLock(lockName);
    expect((await post(served.port, '/r', fencingHeaders(first.token))).status).toBe(204);
    expect((await post(served.port, '/r', fencingHeaders(first))).status).toBe(204);
    expect((await post(served.port, '/r', fencingHeaders(first.token + 1n))).status).toBe(403);
    // The holder's own token, claimed for another lock of the same source: the claim is wrong, so it is refused.
    const mine = first.sequencer;
    expect((await post(served.port, '/r', fencingHeaders(sequencer({ ...mine, name: `${lockName}-other` })))).status).toBe(403);
    // ... and for this lock of another source.
    expect((await post(served.port, '/r', fencingHeaders(sequencer({ ...mine, source: { kind: mine.source.kind, id: 'another-cluster' } })))).status).toBe(403);

    await first.release();
    const second = await harness.source.acquireLock(lockName);
    // The watch reports the new holder; from then on the old token is refused.
    await until(async () => (await verifier(first.token)) === false, 'the verifier sees the new holder');
    expect((await post(served.port, '/r', fencingHeaders(first.token))).status).toBe(403);
    expect((await post(served.port, '/r', fencingHeaders(second))).status).toBe(204);
    await second.release();
  });
});

it('a source without a queue to observe is refused when the verifier is made', () => {
  const noQueue: LockSource = {
    kind: 'plain',
    description: 'no queue',
    acquireLock: () => Promise.reject(new Error('unused')),
    tryAcquireLock: () => Promise.resolve(null),
  };
  expect(() => verifyHolder(noQueue, 'x')).toThrow(InvalidArgumentError);
});
