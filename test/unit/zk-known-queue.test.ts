// The process's knowledge of a deep ZooKeeper lock queue (src/sources/
// zookeeper/recipes/queue-known.ts), against a model of the queue: whatever
// mix of joins, releases, give-ups and listings, observed or not (a node of
// another process leaves unseen), with foreign children in the listings and
// sequences that cross the 32-bit wrap, the table never says "nothing ahead"
// to a waiter of ours that does not head the queue. The real-ensemble cases
// are in test/integration/zookeeper/lock-handoff-known.test.ts.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import type { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { ChildListing } from '../../src/sources/zookeeper/child-listing.js';
import { KnownQueue } from '../../src/sources/zookeeper/recipes/queue-known.js';

// The table reads the client's chroot and, if it has any, its servers: a bare object has neither.
const zk = { chroot: '' } as unknown as ZooKeeperClient;
const used: KnownQueue[] = [];
const table = (parent = '/fencekeeper/locks/t', czxid = 1n): KnownQueue => {
  const t = KnownQueue.use(zk, parent, czxid);
  used.push(t);
  return t;
};
afterEach(() => {
  for (const t of used.splice(0)) t.unuse();
});

/** ZooKeeper's name for sequence `seq` (Java's %010d of the int). */
const name = (guid: string, seq: number): string => `${guid}-lock-${seq < 0 ? `-${String(-seq).padStart(9, '0')}` : String(seq).padStart(10, '0')}`;

/** The names as a listing kept as bytes (what a join merges) or as strings (a waiter's later listing). */
function asListing(names: readonly string[], bytes: boolean): readonly string[] | ChildListing {
  if (!bytes) return names;
  const wire = Buffer.concat(
    names.map((n) => {
      const utf8 = Buffer.from(n, 'utf8');
      const length = Buffer.alloc(4);
      length.writeInt32BE(utf8.length);
      return Buffer.concat([length, utf8]);
    }),
  );
  return new ChildListing(wire, names.length, 1n);
}

type Op =
  | { readonly op: 'join'; readonly local: boolean }
  | { readonly op: 'release'; readonly seen: boolean }
  | { readonly op: 'quit'; readonly at: number; readonly seen: boolean }
  | { readonly op: 'list'; readonly at: number }
  | { readonly op: 'grant' };

const ops = fc.array(
  fc.oneof(
    fc.record({ op: fc.constant('join' as const), local: fc.boolean() }),
    fc.record({ op: fc.constant('release' as const), seen: fc.boolean() }),
    fc.record({ op: fc.constant('quit' as const), at: fc.nat(40), seen: fc.boolean() }),
    fc.record({ op: fc.constant('list' as const), at: fc.nat(40) }),
    fc.record({ op: fc.constant('grant' as const) }),
  ),
  { maxLength: 120 },
);

describe('KnownQueue', () => {
  it('never tells a waiter of ours it heads the queue when a node is still ahead of it (model, across the wrap, with foreign children)', () => {
    fc.assert(
      fc.property(ops, fc.integer({ min: 2147483647 - 60, max: 2147483647 }), (steps: Op[], start: number) => {
        const t = KnownQueue.use(zk, '/fencekeeper/locks/model', BigInt(start));
        try {
          // The parent's cversion: +1 per child created or deleted, an int that wraps.
          let cversion = start;
          let guids = 0;
          const live: { name: string; seq: number; local: boolean }[] = [];
          const listing = (): string[] => [...live.map((n) => n.name), 'keep', 'x-lock-12', 'lock-'];
          const bump = (): void => void (cversion = (cversion + 1) | 0);
          for (const step of steps) {
            if (step.op === 'join') {
              const node = { name: name(`g${guids++}`, cversion), seq: cversion, local: step.local };
              bump();
              live.push(node);
              // A waiter of ours takes in its join's listing (its own session: our node is in it).
              if (node.local) t.merge(asListing(listing(), guids % 2 === 0), node.seq);
            } else if (step.op === 'release' || step.op === 'quit') {
              const at = step.op === 'release' ? 0 : step.at % Math.max(1, live.length);
              const [gone] = live.splice(at, 1);
              if (gone === undefined) continue;
              bump();
              // Seen: the deletion event reached a waiter of ours (else another process's waiter had it).
              if (step.seen) t.gone(gone.name);
            } else if (step.op === 'list') {
              const waiter = live.filter((n) => n.local)[step.at % Math.max(1, live.length)];
              if (waiter !== undefined) t.merge(asListing(listing(), step.at % 2 === 0), waiter.seq);
            } else if (live[0]?.local === true) {
              t.headed(live[0].seq);
            }
            for (const [i, node] of live.entries()) {
              if (node.local && t.nothingBelow(node.seq)) expect(i, `${node.name} told it heads the queue behind ${live[0]?.name}`).toBe(0);
            }
          }
        } finally {
          t.unuse();
        }
      }),
      { numRuns: 500 },
    );
  });

  it('orders across the wrap: a node made just after it is behind the older ones', () => {
    const t = table();
    const before = name('a', 2147483647);
    const after = name('b', -2147483648);
    t.merge([after, before], -2147483648);
    expect(t.nothingBelow(-2147483648)).toBe(false);
    t.gone(before);
    expect(t.nothingBelow(-2147483648)).toBe(true);
  });

  it('ignores foreign children: a child without a sequence is never ahead', () => {
    const t = table();
    const own = name('a', 7);
    t.merge(['keep', 'a-lock-7', 'config', own], 7);
    expect(t.nothingBelow(7)).toBe(true);
  });

  it('a name forgotten and listed again comes back as present (only a reason to list)', () => {
    const t = table();
    const [h, w] = [name('h', 1), name('w', 3)];
    t.merge([h, w], 3);
    t.gone(h);
    expect(t.nothingBelow(3)).toBe(true);
    // Another session's listing that has not seen the deletion yet.
    t.merge([h], 5);
    expect(t.nothingBelow(3)).toBe(false);
  });

  it('a listing still naming a node below one of ours that was granted does not bring it back', () => {
    const t = table();
    const [h, w1, w2] = [name('h', 1), name('w', 3), name('v', 5)];
    t.merge([h, w1, w2], 5);
    t.gone(h);
    t.headed(3);
    t.gone(w1);
    expect(t.nothingBelow(5)).toBe(true);
    // A join's listing read before h and w1 went, merged after.
    t.merge([h, w1, w2, name('u', 7)], 7);
    expect(t.nothingBelow(5)).toBe(false); // w1 was forgotten: it comes back (only a reason to list)
    const u = table('/fencekeeper/locks/t2');
    u.merge([h, w1, w2], 5);
    u.gone(h);
    u.headed(3);
    u.merge([h, w1, w2, name('u', 7)], 7);
    // h is below the granted 3: it stays gone.
    u.gone(w1);
    expect(u.nothingBelow(5)).toBe(true);
  });

  it('a foreign child named like ours, with a sequence one of ours has: the table no longer answers (as strings and as bytes)', () => {
    for (const bytes of [false, true]) {
      const t = KnownQueue.use(zk, `/fencekeeper/locks/foreign-${bytes}`, 1n);
      const [h, w] = [name('h', 1), name('w', 3)];
      t.merge(asListing([h, w], bytes), 3);
      t.merge(asListing([h, w, 'foreign-lock-0000000001'], bytes), 3);
      t.gone(h);
      expect(t.nothingBelow(3)).toBe(false);
      t.unuse();
    }
  });

  it('one table per queue incarnation (the parent czxid) and per servers; dropped with its last user', () => {
    const before = KnownQueue.count;
    const a = KnownQueue.use(zk, '/p', 1n);
    const b = KnownQueue.use(zk, '/p', 2n);
    const c = KnownQueue.use(zk, '/p', 1n);
    expect(c).toBe(a);
    expect(b).not.toBe(a);
    expect(KnownQueue.find(zk, '/p', 1n)).toBe(a);
    expect(KnownQueue.count).toBe(before + 2);
    a.unuse();
    c.unuse();
    b.unuse();
    expect(KnownQueue.find(zk, '/p', 1n)).toBeNull();
    expect(KnownQueue.count).toBe(before);
  });
});
