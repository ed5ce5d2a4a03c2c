// memorySource(): exclusion and sharing counted with 8 clients x 25 grants
// (plain locks alone, readers together, writers alone, never more than N
// permits), the token rules (larger than every conflicting grant before;
// per permit slot, strictly increasing), FIFO with no writer starvation,
// timeouts and aborts leaving nothing, expire() and advance(), elections,
// PermitsMismatchError, and the scoped forms on a source with read-write locks.
import { describe, expect, it } from 'vitest';
import { LockLostError, LockTimeoutError, LockUpgradeError, PermitsMismatchError, InvalidArgumentError, acquireLocks, withLock, withLocks, withReadLock, withWriteLock } from '../../src/index.js';
import type { Lock } from '../../src/lock.js';
import { memorySource, type MemorySource } from '../../src/testing/memory-source.js';

const CLIENTS = 8;
const GRANTS = 25;
const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** `CLIENTS` callers, each taking `GRANTS` grants one after the other. */
async function clients(take: (client: number, round: number) => Promise<void>): Promise<void> {
  await Promise.all(Array.from({ length: CLIENTS }, async (_, client) => {
    for (let round = 0; round < GRANTS; round++) await take(client, round);
  }));
}

describe('memorySource: counted', () => {
  it('plain locks: one holder at a time, tokens increasing in grant order', async () => {
    const source = memorySource();
    let inside = 0;
    let most = 0;
    const tokens: bigint[] = [];
    await clients(async () => {
      const lock = await source.acquireLock('kinds/plain');
      most = Math.max(most, ++inside);
      tokens.push(lock.token);
      await tick();
      inside--;
      await lock.release();
    });
    expect(most).toBe(1);
    expect(tokens).toHaveLength(CLIENTS * GRANTS);
    expect(tokens.every((t, i) => i === 0 || t > (tokens[i - 1] as bigint))).toBe(true);
    expect(await source.lockStatus('kinds/plain')).toEqual({ name: 'kinds/plain', holder: null, waiters: [] });
  });

  it('read-write: readers overlap, a writer is alone, and the token rule holds', async () => {
    const source = memorySource();
    const live = new Set<{ kind: 'read' | 'write'; token: bigint }>();
    let mostReaders = 0;
    let writerWithOthers = 0;
    let maxReleased = 0n;
    let maxWriterGranted = 0n;
    let maxGranted = 0n;
    const violations: string[] = [];
    await clients(async (client, round) => {
      const kind = (client + round) % 4 === 0 ? 'write' : 'read';
      const lock = kind === 'write' ? await source.acquireWriteLock('kinds/rw') : await source.acquireReadLock('kinds/rw');
      expect(lock.sequencer.kind).toBe(kind);
      // Larger than every grant already released and every conflicting grant before it.
      if (lock.token <= maxReleased) violations.push(`${kind} ${lock.token} <= released ${maxReleased}`);
      if (kind === 'write' && lock.token <= maxGranted) violations.push(`write ${lock.token} <= granted ${maxGranted}`);
      if (kind === 'read' && lock.token <= maxWriterGranted) violations.push(`read ${lock.token} <= writer ${maxWriterGranted}`);
      if (lock.token > maxGranted) maxGranted = lock.token;
      if (kind === 'write' && lock.token > maxWriterGranted) maxWriterGranted = lock.token;
      const me = { kind, token: lock.token } as const;
      live.add(me);
      const kinds = [...live].map((g) => g.kind);
      if (kinds.includes('write') && live.size > 1) writerWithOthers++;
      mostReaders = Math.max(mostReaders, kinds.filter((k) => k === 'read').length);
      await tick();
      await tick();
      live.delete(me);
      if (lock.token > maxReleased) maxReleased = lock.token;
      await lock.release();
    });
    expect(violations).toEqual([]);
    expect(writerWithOthers).toBe(0);
    expect(mostReaders).toBeGreaterThan(1);
  });

  it('permits: never more than N held, one holder per slot, per-slot tokens strictly increasing', async () => {
    const source = memorySource();
    const N = 3;
    const slots = new Map<number, bigint>();
    const bySlot = new Map<number, bigint[]>();
    let most = 0;
    const problems: string[] = [];
    await clients(async () => {
      const permit = await source.acquirePermit('kinds/pool', { permits: N });
      if (permit.slot < 0 || permit.slot >= N || permit.permits !== N) problems.push(`slot ${permit.slot} of ${permit.permits}`);
      if (slots.has(permit.slot)) problems.push(`slot ${permit.slot} held twice`);
      slots.set(permit.slot, permit.token);
      most = Math.max(most, slots.size);
      expect(permit.sequencer).toMatchObject({ kind: 'permit', name: `kinds/pool#${permit.slot}`, token: permit.token });
      const history = bySlot.get(permit.slot) ?? [];
      if (history.length > 0 && permit.token <= (history.at(-1) as bigint)) problems.push(`slot ${permit.slot}: ${permit.token} after ${history.at(-1)}`);
      bySlot.set(permit.slot, [...history, permit.token]);
      // Holders leave out of order: a short and a long hold.
      for (let i = 0; i < 1 + (Number(permit.token) % 3); i++) await tick();
      slots.delete(permit.slot);
      await permit.release();
    });
    expect(problems).toEqual([]);
    expect(most).toBe(N);
  });
});

describe('memorySource: order, timeouts, aborts', () => {
  it('FIFO with no writer starvation: a waiting writer holds back a reader that arrives after it', async () => {
    const source = memorySource();
    const order: string[] = [];
    const r1 = await source.acquireReadLock('kinds/fifo');
    const w = source.acquireWriteLock('kinds/fifo').then((lock) => (order.push('w'), lock));
    await tick();
    expect(await source.tryAcquireReadLock('kinds/fifo')).toBeNull();
    const r2 = source.acquireReadLock('kinds/fifo').then((lock) => (order.push('r2'), lock));
    await tick();
    expect(order).toEqual([]);
    await r1.release();
    const writer = await w;
    await tick();
    expect(order).toEqual(['w']);
    expect(writer.token > r1.token).toBe(true);
    await writer.release();
    const reader = await r2;
    expect(order).toEqual(['w', 'r2']);
    expect(reader.token > writer.token).toBe(true);
    await reader.release();
  });

  it('a timeout or an abort leaves nothing behind; a writer timing out lets the readers behind it in', async () => {
    const source = memorySource();
    const holder = await source.acquireLock('kinds/to');
    await expect(source.acquireLock('kinds/to', { timeoutMs: 20 })).rejects.toBeInstanceOf(LockTimeoutError);
    const controller = new AbortController();
    const aborted = source.acquireLock('kinds/to', { signal: controller.signal });
    controller.abort(new Error('gave up'));
    await expect(aborted).rejects.toThrow('gave up');
    expect((await source.lockStatus('kinds/to')).waiters).toEqual([]);
    await holder.release();

    const reader = await source.acquireReadLock('kinds/rw-to');
    const writer = source.acquireWriteLock('kinds/rw-to', { timeoutMs: 30 });
    const behind = source.acquireReadLock('kinds/rw-to');
    await expect(writer).rejects.toBeInstanceOf(LockTimeoutError);
    const second = await behind;
    expect(second.held && reader.held).toBe(true);
    await Promise.all([reader.release(), second.release()]);
    expect(await source.tryAcquireWriteLock('kinds/rw-to')).not.toBeNull();
  });

  it('a permit waiter timing out or aborted leaves nothing: once the holders leave, the name takes any size', async () => {
    const source = memorySource();
    const [a, b] = await Promise.all([source.acquirePermit('kinds/p-to', { permits: 2 }), source.acquirePermit('kinds/p-to', { permits: 2 })]);
    expect(await source.tryAcquirePermit('kinds/p-to', { permits: 2 })).toBeNull();
    await expect(source.acquirePermit('kinds/p-to', { permits: 2, timeoutMs: 10 })).rejects.toBeInstanceOf(LockTimeoutError);
    const controller = new AbortController();
    const aborted = source.acquirePermit('kinds/p-to', { permits: 2, signal: controller.signal });
    controller.abort(new Error('gave up'));
    await expect(aborted).rejects.toThrow('gave up');
    await a.release();
    const c = await source.acquirePermit('kinds/p-to', { permits: 2, timeoutMs: 10 });
    expect(c.slot).toBe(a.slot);
    expect(c.token > a.token).toBe(true);
    await Promise.all([b.release(), c.release()]);
    // Nothing left behind (no waiter, no holder): a new size is taken.
    const d = await source.tryAcquirePermit('kinds/p-to', { permits: 5 });
    expect(d?.permits).toBe(5);
  });

  it('multi-lock: two callers in opposite orders, many rounds, never inside together; a timeout leaves nothing', async () => {
    const source = memorySource();
    const names = ['kinds/m/a', 'kinds/m/b', 'kinds/m/c'];
    let inside = 0;
    let overlap = 0;
    const caller = async (order: string[]) => {
      for (let i = 0; i < 50; i++) {
        await withLocks(source, order, async () => {
          if (++inside > 1) overlap++;
          await tick();
          inside--;
        }, { timeoutMs: 5000 });
      }
    };
    await Promise.all([caller(names), caller([...names].reverse())]);
    expect(overlap).toBe(0);
    const c = await source.acquireLock('kinds/m/c');
    await expect(acquireLocks(source, names, { timeoutMs: 20 })).rejects.toBeInstanceOf(LockTimeoutError);
    for (const name of names) expect((await source.lockStatus(name)).waiters).toEqual([]);
    expect((await source.lockStatus('kinds/m/a')).holder).toBeNull();
    await c.release();
  });

  it('another permits for a name in use is PermitsMismatchError; once free, any size', async () => {
    const source = memorySource();
    const p = await source.acquirePermit('kinds/size', { permits: 2 });
    await expect(source.acquirePermit('kinds/size', { permits: 3 })).rejects.toBeInstanceOf(PermitsMismatchError);
    await expect(source.tryAcquirePermit('kinds/size', { permits: 1 })).rejects.toMatchObject({ code: 'PERMITS_MISMATCH', permits: 1, inUse: 2 });
    await p.release();
    const q = await source.tryAcquirePermit('kinds/size', { permits: 3 });
    expect(q?.permits).toBe(3);
    await expect(source.acquirePermit('kinds/size', { permits: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('elections: one leader, the next elected on resign with a larger epoch', async () => {
    const source = memorySource();
    const first = await source.campaign('kinds/election');
    let second: Awaited<ReturnType<MemorySource['campaign']>> | null = null;
    const next = source.campaign('kinds/election').then((l) => (second = l));
    await tick();
    expect(second).toBeNull();
    await first.resign();
    await next;
    expect(second!.epoch > first.epoch).toBe(true);
    expect(second!.sequencer.kind).toBe('election');
  });
});

describe('memorySource: expire() and advance()', () => {
  it('expire(name) ends every current grant as a session expiry would; the next waiter gets a larger token', async () => {
    const source = memorySource();
    const held = await source.acquireLock('kinds/expire');
    const readers = await Promise.all([source.acquireReadLock('kinds/expire'), source.acquireReadLock('kinds/expire')]);
    const waiting = source.acquireLock('kinds/expire');
    source.expire('kinds/expire');
    for (const lock of [held, ...readers]) {
      expect(lock.held).toBe(false);
      expect(lock.signal.reason).toBeInstanceOf(LockLostError);
      expect((lock.signal.reason as LockLostError).reason).toBe('session_expired');
    }
    const next = await waiting;
    expect(next.token > held.token).toBe(true);
    expect(next.held).toBe(true);
  });

  it('advance(ms): a grant steps down at its TTL less the margin, ends at its TTL; waiters time out on its clock', async () => {
    const source = memorySource({ ttlMs: 10_000 });
    const lock = await source.acquireLock('kinds/advance', { safetyMarginMs: 2000 });
    const waiter = source.acquireLock('kinds/advance');
    const deadline = lock.deadline;
    source.advance(7999);
    expect(lock.held).toBe(true);
    expect(lock.deadline).toBeLessThan(deadline);
    source.advance(1);
    expect(lock.held).toBe(false);
    expect((lock.signal.reason as LockLostError).reason).toBe('deadline');
    // Stepped down, not yet ended by the source: nobody else has it.
    expect((await source.lockStatus('kinds/advance')).holder?.token).toBe(lock.token);
    source.advance(2000);
    const next = await waiter;
    expect(next.token > lock.token).toBe(true);
    // Its holder lives on (5 s is within its TTL less margin): the waiter's own timeout passes.
    const late = source.acquireLock('kinds/advance', { timeoutMs: 5000 });
    source.advance(5000);
    expect(next.held).toBe(true);
    await expect(late).rejects.toBeInstanceOf(LockTimeoutError);
    expect((await source.lockStatus('kinds/advance')).waiters).toEqual([]);
  });

  it('observeLock tells of changes; every instance is its own world', async () => {
    const a = memorySource();
    const b = memorySource();
    const observer = a.observeLock('kinds/obs');
    let changes = 0;
    observer.onChange(() => changes++);
    const lock = await a.acquireLock('kinds/obs');
    expect((await observer.holder())?.token).toBe(lock.token);
    expect(await b.tryAcquireLock('kinds/obs')).not.toBeNull();
    await lock.release();
    expect(changes).toBeGreaterThan(0);
    expect(await observer.holder()).toBeNull();
    observer.close();
    expect((await a.identity()).id).not.toBe((await b.identity()).id);
  });
});

describe('scoped forms on memorySource', () => {
  it('withReadLock / withWriteLock: shared, exclusive, LOCK_UPGRADE, 3 levels re-entered with one grant', async () => {
    const source = memorySource();
    let grants = 0;
    const counted = { ...source, acquireWriteLock: (name: string) => (grants++, source.acquireWriteLock(name)) };
    const seen: Lock[] = [];
    await withWriteLock(counted, 'kinds/scoped', async (w) => {
      seen.push(w);
      await withWriteLock(counted, 'kinds/scoped', async (w2) => {
        seen.push(w2);
        await withReadLock(counted, 'kinds/scoped', async (r) => void seen.push(r));
      });
      expect(await source.tryAcquireReadLock('kinds/scoped')).toBeNull();
    });
    expect(grants).toBe(1);
    expect(new Set(seen).size).toBe(1);
    await withReadLock(source, 'kinds/scoped', async () => {
      const other = await source.tryAcquireReadLock('kinds/scoped');
      expect(other).not.toBeNull();
      await other?.release();
      await expect(withWriteLock(source, 'kinds/scoped', async () => 1)).rejects.toBeInstanceOf(LockUpgradeError);
    });
    await withLock(source, 'kinds/scoped', async (lock) => expect(lock.sequencer.kind).toBe('lock'));
  });
});
