// Fences bound to their lock, in PostgreSQL (withFence and PostgresFenceStore,
// on a pg.Pool and on Kysely): once bindFence has recorded which lock guards a
// fence, a sequencer of another lock, kind or source is refused with
// SEQUENCER_MISMATCH and changes nothing (the work never runs, the mark stays,
// a row written in the work is not there), even with a larger token; a bare
// token is refused the same way; the guarding lock's larger token advances.
// Fences never bound keep accepting bare tokens and sequencers.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import {
  CURRENT_LOCK, FenceAlreadyBoundError, InvalidArgumentError, SequencerMismatchError, StaleTokenError, withLock, type Sequencer,
} from '../../../src/index.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import { PostgresFenceStore, bindFence, fenceBindingOf, withFence } from '../../../adapters/postgres/index.js';
import { recordRefusals, testSource } from '../../helpers/sequencers.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { DATABASE_URL, FLAVORS, exec, migratedSchema, uniqueName, waitForLockWaiters } from './helpers.js';

const { SOURCE, guard, seq, intruders: intrudersOf } = testSource('c0ffee00-0000-4000-8000-000000000001');

const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
const clients = new ClientPool();
afterEach(() => clients.closeAll());
afterAll(() => admin.end());

describe.each(FLAVORS)('bound fences with %s', (flavor) => {
  const application = uniqueName('fk_seq');
  const { pool, db } = migratedSchema(admin, `fk_seq_${flavor}`, { flavor, max: 6, applicationName: application });

  beforeAll(async () => {
    await pool.query('CREATE TABLE writes (resource text, token bigint)');
  });

  async function mark(resource: string): Promise<bigint | null> {
    const { rows } = await pool.query<{ token: string }>('SELECT token::text AS token FROM fencekeeper_fences WHERE resource = $1', [resource]);
    return rows[0] === undefined ? null : BigInt(rows[0].token);
  }
  async function writes(resource: string): Promise<bigint[]> {
    const { rows } = await pool.query<{ token: string }>('SELECT token::text AS token FROM writes WHERE resource = $1 ORDER BY token', [resource]);
    return rows.map((row) => BigInt(row.token));
  }
  /** withFence writing one row in its work: the row is there only if the work committed. */
  const fencedWrite = (resource: string, presented: bigint | Sequencer) =>
    withFence(db, resource, presented, (trx) => exec(trx, 'INSERT INTO writes VALUES ($1, $2)', [resource, typeof presented === 'bigint' ? presented.toString() : presented.token.toString()]));
  /** The store's admission, committed after one write. */
  const admitted = async (resource: string, presented: bigint | Sequencer) => {
    const admission = await new PostgresFenceStore(db).admit(resource, presented);
    await exec(admission.transaction as never, 'INSERT INTO writes VALUES ($1, $2)', [resource, admission.token.toString()]);
    await admission.commit();
  };
  const entries = [['withFence', fencedWrite], ['PostgresFenceStore', admitted]] as const;

  it.each(entries)('%s: an unbound fence accepts bare tokens and sequencers of any lock', async (_, write) => {
    const resource = uniqueName('unbound');
    await write(resource, 5n);
    await write(resource, seq('some/lock', 6n));
    await write(resource, seq('another/lock', 7n, { kind: 'election' }));
    expect(await mark(resource)).toBe(7n);
    expect(await writes(resource)).toEqual([5n, 6n, 7n]);
    expect(await fenceBindingOf(db, resource)).toBeNull();
  });

  it.each(entries)('%s: a bound fence refuses another lock, kind or source and a bare token, and changes nothing; its own lock advances', async (_, write) => {
    const resource = uniqueName('bound');
    const name = uniqueLockName('guard');
    // Written before it was bound, with a bare token: the mark is kept.
    await write(resource, 10n);
    expect(await bindFence(db, resource, guard(name))).toEqual(guard(name));
    const intruders = intrudersOf(name);
    const { published, stop } = recordRefusals();
    for (const [what, presented] of intruders) {
      const error = await write(resource, presented).then(() => undefined, (e: unknown) => e);
      expect(error, what).toBeInstanceOf(SequencerMismatchError);
      expect((error as SequencerMismatchError).code).toBe('SEQUENCER_MISMATCH');
      expect((error as SequencerMismatchError).bound).toEqual(guard(name));
      expect((error as SequencerMismatchError).presented === null, what).toBe(typeof presented === 'bigint');
    }
    stop();
    // withFence publishes its refusals; the store leaves that to fencing(), its consumer.
    const mine = published.filter((m) => m.resource === resource);
    if (write === fencedWrite) {
      expect(mine.map((m) => [m.code, m.presented, m.presentedLock?.lock ?? null])).toEqual(
        intruders.map(([, p]) => ['SEQUENCER_MISMATCH', typeof p === 'bigint' ? p : p.token, typeof p === 'bigint' ? null : p.name]),
      );
      expect(mine.every((m) => m.adapter === 'postgres' && m.current === null)).toBe(true);
      expect(mine[0]?.bound).toEqual(guard(name));
    } else {
      expect(mine).toEqual([]);
    }
    expect(await mark(resource)).toBe(10n);
    expect(await writes(resource)).toEqual([10n]);
    // The guarding lock's token, larger than the mark: advances and writes.
    await write(resource, seq(name, 11n));
    expect(await mark(resource)).toBe(11n);
    // Its own smaller token is still stale.
    await expect(write(resource, seq(name, 9n))).rejects.toBeInstanceOf(StaleTokenError);
    expect(await writes(resource)).toEqual([10n, 11n]);
  });

  it('binding a fence that has no row yet: the first admission is checked too', async () => {
    const resource = uniqueName('fresh');
    const name = uniqueLockName('fresh');
    await bindFence(db, resource, guard(name));
    // Binding leaves no mark behind.
    expect(await mark(resource)).toBeNull();
    await expect(fencedWrite(resource, 3n)).rejects.toBeInstanceOf(SequencerMismatchError);
    await expect(admitted(resource, seq('other', 3n))).rejects.toBeInstanceOf(SequencerMismatchError);
    expect(await mark(resource)).toBeNull();
    await admitted(resource, seq(name, 3n));
    expect(await mark(resource)).toBe(3n);
  });

  it('bindFence waits for an admission that holds the fence; once bound, a bare token is refused', async () => {
    const resource = uniqueName('inflight');
    const name = uniqueLockName('inflight');
    // The resource's very first admission: its fence row is inserted and not yet committed.
    const admission = await new PostgresFenceStore(db).admit(resource, 4n);
    let binding: Promise<unknown> | undefined;
    try {
      binding = bindFence(db, resource, guard(name));
      // The race: bindFence is blocked on the fence row the open admission holds.
      await waitForLockWaiters(admin, application, 1);
      let bound = false;
      void binding.then(() => { bound = true; }, () => undefined);
      expect(bound).toBe(false);
      await exec(admission.transaction as never, 'INSERT INTO writes VALUES ($1, $2)', [resource, '4']);
    } finally {
      await admission.commit();
    }
    await binding;
    expect(await writes(resource)).toEqual([4n]);
    await expect(fencedWrite(resource, 5n)).rejects.toBeInstanceOf(SequencerMismatchError);
    await fencedWrite(resource, seq(name, 5n));
    expect(await mark(resource)).toBe(5n);
  });

  it('binding is recorded once: the same binding again is a no-op, another is refused and changes nothing', async () => {
    const resource = uniqueName('once');
    const name = uniqueLockName('once');
    await bindFence(db, resource, guard(name));
    await bindFence(db, resource, guard(name));
    const error = await bindFence(db, resource, guard(`${name}-other`)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FenceAlreadyBoundError);
    expect((error as FenceAlreadyBoundError).code).toBe('FENCE_ALREADY_BOUND');
    expect(await fenceBindingOf(db, resource)).toEqual(guard(name));
  });

  it.each(['read', 'write', 'permit'] as const)('a fence bound to a %s lock takes its sequencers and refuses the plain lock of the same name', async (kind) => {
    const resource = uniqueName(`kind-${kind}`);
    const name = kind === 'permit' ? `${uniqueLockName('kind')}#2` : uniqueLockName('kind');
    const bound = { ...guard(name), kind };
    expect(await bindFence(db, resource, bound)).toEqual(bound);
    expect(await fenceBindingOf(db, resource)).toEqual(bound);
    await expect(fencedWrite(resource, seq(name, 7n))).rejects.toBeInstanceOf(SequencerMismatchError);
    await fencedWrite(resource, seq(name, 7n, { kind }));
    expect(await mark(resource)).toBe(7n);
    expect(await writes(resource)).toEqual([7n]);
  });

  it('bad bindings are refused and bind nothing', async () => {
    for (const bad of [null, {}, { kind: 'mutex', lock: 'a', source: SOURCE }, { kind: 'lock', lock: '', source: SOURCE }, { kind: 'lock', lock: 'a', source: { kind: 'zookeeper', id: 'no spaces' } }]) {
      await expect(bindFence(db, 'r', bad as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(await fenceBindingOf(db, 'r')).toBeNull();
  });

  it('a real ZooKeeper lock, through withLock and CURRENT_LOCK: its sequencer passes its bound fence, another lock or a bare token does not', async () => {
    const zk = zookeeperSource(await clients.connect(testServers().zkStandalone));
    const name = uniqueLockName('real');
    const resource = uniqueName('real');
    // The binding is the sequencer's fields without its token: taken here from a first grant.
    const first = await zk.acquireLock(name);
    await first.release();
    const { kind, name: lock, source } = first.sequencer;
    await bindFence(db, resource, { kind, lock, source });
    const token = await withLock(zk, name, async (held) => {
      await withFence(db, resource, CURRENT_LOCK, async () => undefined);
      return held.token;
    });
    expect(await mark(resource)).toBe(token);
    // A larger token of another lock of the same ensemble: refused.
    await expect(withLock(zk, `${name}-other`, () => withFence(db, resource, CURRENT_LOCK, async () => undefined))).rejects.toBeInstanceOf(SequencerMismatchError);
    // An election of the same name (another kind, a larger epoch): refused.
    const leader = await zk.campaign(name);
    await expect(withFence(db, resource, leader.sequencer, async () => undefined)).rejects.toBeInstanceOf(SequencerMismatchError);
    await leader.resign();
    // The lock's own larger token, bare: refused.
    const again = await zk.acquireLock(name);
    await expect(withFence(db, resource, again.token, async () => undefined)).rejects.toBeInstanceOf(SequencerMismatchError);
    expect(await mark(resource)).toBe(token);
    await withFence(db, resource, again.sequencer, async () => undefined);
    expect(await mark(resource)).toBe(again.token);
    await again.release();
  });
});
