// fencing() with sequencers in its header, over real HTTP, in front of
// MemoryFenceStore and PostgresFenceStore: on a bound fence another lock's
// sequencer (another name, kind or source) and a bare token answer 409
// SEQUENCER_MISMATCH and change nothing (the handler never runs, the mark
// stays); the guarding lock's larger token advances; a malformed sequencer
// is a 400; unbound fences take bare tokens and sequencers as before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatSequencer, sequencer, type FenceBinding, type FenceStore, type Sequencer } from '../../../src/index.js';
import { MemoryFenceStore, fencing } from '../../../adapters/express/index.js';
import { verifyWithZooKeeper } from '../../../src/sources/zookeeper/index.js';
import { PostgresFenceStore, bindFence } from '../../../adapters/postgres/index.js';
import { post, serve, type Served } from './helpers.js';
import { until } from '../../helpers/wait.js';
import { recordRefusals } from '../../helpers/sequencers.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { acquireLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import { express } from './variants.js';
import { adminPool, migratedSchema, uniqueName } from '../postgres/helpers.js';

const H = 'fencing-token';
const SOURCE = { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-0000000000aa' };
const guard = (lock: string): FenceBinding => ({ kind: 'lock', lock, source: SOURCE });
const seq = (name: string, token: bigint, over: Partial<Sequencer> = {}): string => formatSequencer(sequencer({ kind: 'lock', name, source: SOURCE, token, ...over }));

const { pool } = migratedSchema(adminPool(), 'fk_seq_express', { max: 6 });

type Bound = { store: FenceStore<unknown>; bind: (resource: string, binding: FenceBinding) => Promise<unknown> };
const stores: [string, () => Bound][] = [
  ['MemoryFenceStore', () => { const store = new MemoryFenceStore(); return { store, bind: (r, b) => store.bind(r, b) }; }],
  ['PostgresFenceStore', () => ({ store: new PostgresFenceStore(pool) as FenceStore<unknown>, bind: (r, b) => bindFence(pool, r, b) })],
];

describe.each(stores)('fencing() with sequencers, %s', (_, make) => {
  let served: Served;
  let bound: Bound;
  const ran: string[] = [];

  beforeAll(async () => {
    bound = make();
    const app = express();
    app.post('/doc/:id', fencing({ store: bound.store, resource: (req) => `doc:${String(req.params['id'])}` }), (req, res) => {
      const token = req.fencing?.token;
      ran.push(`${String(req.params['id'])} ${String(token)}`);
      res.json({ token: String(token) });
    });
    served = await serve(app);
  });
  afterAll(() => served.close());

  it('an unbound fence takes bare tokens and sequencers of any lock', async () => {
    const id = uniqueName('open');
    expect((await post(served.port, `/doc/${id}`, { [H]: '5' })).status).toBe(200);
    expect((await post(served.port, `/doc/${id}`, { [H]: seq('any/lock', 6n) })).status).toBe(200);
    expect((await post(served.port, `/doc/${id}`, { [H]: seq('other/lock', 7n, { kind: 'election' }) })).status).toBe(200);
    // The admission commits once the response has gone out.
    await until(async () => (await bound.store.current(`doc:${id}`)) === 7n, 'the mark to reach 7');
  });

  it('a bound fence: another lock, kind or source and a bare token get 409 SEQUENCER_MISMATCH and change nothing; its own lock advances', async () => {
    const id = uniqueName('bound');
    const resource = `doc:${id}`;
    const lock = `locks/${id}`;
    expect((await post(served.port, `/doc/${id}`, { [H]: '10' })).status).toBe(200);
    await until(async () => (await bound.store.current(resource)) === 10n, 'the mark to reach 10');
    await bound.bind(resource, guard(lock));
    ran.length = 0;
    const { published, stop } = recordRefusals();
    const headers = [
      seq(`${lock}-other`, 100n),
      seq(lock, 101n, { kind: 'election' }),
      seq(lock, 102n, { source: { kind: 'zookeeper', id: 'another-ensemble' } }),
      seq(lock, 103n, { source: { kind: 'redis', id: SOURCE.id } }),
      '104',
    ];
    for (const header of headers) {
      const answer = await post(served.port, `/doc/${id}`, { [H]: header });
      expect(answer.status, header).toBe(409);
      expect(answer.body, header).toMatchObject({ code: 'SEQUENCER_MISMATCH', resource, bound: guard(lock) });
    }
    stop();
    // Each refusal on fencekeeper:fence:refused, once, by fencing() whichever store decided it.
    const mine = published.filter((m) => m.resource === resource);
    expect(mine.map((m) => [m.adapter, m.code, m.presented, m.current])).toEqual(
      [100n, 101n, 102n, 103n, 104n].map((t) => ['express', 'SEQUENCER_MISMATCH', t, null]),
    );
    expect(mine.map((m) => m.presentedLock?.kind ?? null)).toEqual(['lock', 'election', 'lock', 'lock', null]);
    expect(ran).toEqual([]);
    expect(await bound.store.current(resource)).toBe(10n);
    const own = await post(served.port, `/doc/${id}`, { [H]: seq(lock, 11n) });
    expect(own.status).toBe(200);
    expect(ran).toEqual([`${id} 11`]);
    await until(async () => (await bound.store.current(resource)) === 11n, 'the mark to reach 11');
    // Its own smaller token is stale as ever.
    expect((await post(served.port, `/doc/${id}`, { [H]: seq(lock, 9n) })).status).toBe(409);
  });

  it('a malformed sequencer is a 400 INVALID_TOKEN', async () => {
    const id = uniqueName('bad');
    const good = seq('a/b', 5n);
    for (const header of [good.replace('fk1:', 'fk2:'), `${good}:extra`, good.replace('a%2Fb', 'a%2fb'), good.replace(':5:', ':05:'), good.replace('lock:', 'mutex:'), 'fk1:lock']) {
      const answer = await post(served.port, `/doc/${id}`, { [H]: header });
      expect(answer.status, header).toBe(400);
      expect(answer.body, header).toMatchObject({ code: 'INVALID_TOKEN' });
    }
    expect(await bound.store.current(`doc:${id}`)).toBeNull();
  });
});

describe('verifyWithZooKeeper checks the sequencer\'s lock as well as its token', () => {
  const clients = new ClientPool();
  afterAll(() => clients.closeAll());

  it('the holder\'s sequencer passes; a sequencer naming another lock, kind or source with the holder\'s token is refused (403)', async () => {
    const zk = await clients.connect(testServers().zkStandalone);
    const lockName = uniqueLockName('verify_seq');
    const verify = verifyWithZooKeeper(zk, lockName, { sourceId: SOURCE.id });
    const app = express();
    const ran: string[] = [];
    app.post('/r', fencing({ store: new MemoryFenceStore(), resource: 'r', verify }), (req, res) => {
      ran.push(String(req.fencing?.token));
      res.end();
    });
    const served = await serve(app);
    const lock = await acquireLock(zk, lockName);
    try {
      const ok = (over: Partial<Sequencer> = {}) => post(served.port, '/r', { [H]: seq(lockName, lock.token, over) });
      expect((await ok()).status).toBe(200);
      expect((await post(served.port, '/r', { [H]: lock.token.toString() })).status).toBe(200);
      for (const over of [{ name: `${lockName}-other` }, { kind: 'election' as const }, { source: { kind: 'zookeeper', id: 'another-ensemble' } }, { source: { kind: 'etcd', id: SOURCE.id } }]) {
        const answer = await ok(over);
        expect(answer.status, JSON.stringify(over)).toBe(403);
        expect(answer.body).toMatchObject({ code: 'TOKEN_REFUSED' });
      }
      expect(ran).toEqual([lock.token.toString(), lock.token.toString()]);
    } finally {
      await lock.release();
      verify.close();
      await served.close();
    }
  });

  it('without a sourceId option, the ensemble\'s own identity: the lock\'s real sequencer passes, the same claim with another source id is refused', async () => {
    const zk = await clients.connect(testServers().zkStandalone);
    const lockName = uniqueLockName('verify_own');
    const verify = verifyWithZooKeeper(zk, lockName);
    const app = express();
    app.post('/r', fencing({ store: new MemoryFenceStore(), resource: 'r', verify }), (_req, res) => void res.end());
    const served = await serve(app);
    // The holder on another client of the same ensemble: the identity is the ensemble's, not the client's.
    const lock = await acquireLock(await clients.connect(testServers().zkStandalone), lockName);
    try {
      expect((await post(served.port, '/r', { [H]: formatSequencer(lock.sequencer) })).status).toBe(200);
      const forged = formatSequencer(sequencer({ ...lock.sequencer, source: { kind: 'zookeeper', id: SOURCE.id } }));
      expect((await post(served.port, '/r', { [H]: forged })).status).toBe(403);
    } finally {
      await lock.release();
      verify.close();
      await served.close();
    }
  });
});
