// Grant order when the parent's sequence counter wraps. ZooKeeper names a
// sequential child with the parent's cversion formatted by Java's %010d; the
// cversion is a signed int that grows by 2 per acquire+release, so a lock that
// is never idle (its container never reaped) wraps after ~10^9 grants. Too many
// to reach on a real server in a test: these check the ordering on the names
// ZooKeeper produces at the wrap (what the server does there is documented in
// the ZooKeeper Programmer's Guide, "Sequence Nodes -- Unique Naming").
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TURN, position, sequenceOf, sortQueue } from '../../../src/sources/zookeeper/recipes/queue-order.js';

const node = (guid: string, seq: string): string => `${guid}-lock-${seq}`;

describe('queue order across the sequence wrap', () => {
  it('reads the names ZooKeeper makes on both sides of the wrap', () => {
    expect(sequenceOf(node('a', '0000000042'))).toBe(42);
    expect(sequenceOf(node('a', '2147483647'))).toBe(2147483647);
    expect(sequenceOf(node('a', '-2147483648'))).toBe(-2147483648);
    expect(sequenceOf(node('a', '-000000001'))).toBe(-1);
    expect(sequenceOf(node('a', '42'))).toBeNull();
    expect(sequenceOf('keep')).toBeNull();
  });

  it('a node created just after the counter wrapped waits behind the older ones (it was granted at once: two holders)', () => {
    const holder = node('h', '2147483646');
    const waiter = node('w', '2147483647');
    const wrapped = node('n', '-2147483648');
    const next = node('m', '-2147483647');
    expect(sortQueue([next, wrapped, waiter, holder])).toEqual([holder, waiter, wrapped, next]);
    expect(position([holder, waiter, wrapped], wrapped)).toEqual({ turn: false, predecessor: waiter, ahead: 2 });
    // ...and from -1 to 0
    expect(sortQueue([node('b', '0000000000'), node('a', '-000000001')])).toEqual([node('a', '-000000001'), node('b', '0000000000')]);
  });
});

describe('position() in one pass', () => {
  // The definition: where our node stands in the queue sorted by sequence.
  const bySort = (children: readonly string[], child: string): unknown => {
    const sorted = sortQueue(children);
    const index = sorted.indexOf(child);
    if (index === -1) return null;
    return index === 0 ? TURN : { turn: false, predecessor: sorted[index - 1], ahead: index };
  };
  // Sequences of live nodes span far fewer than 2^31 parent changes: a window
  // that may straddle the wrap, in ZooKeeper's %010d text.
  const text = (seq: number): string => (seq < 0 ? `-${String(-seq).padStart(9, '0')}` : String(seq).padStart(10, '0'));

  it('answers as the sorted queue does: our turn, the predecessor and how many are ahead, foreign children ignored, null when our node is gone', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -2147483648, max: 2147483647 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 5000 }), { minLength: 1, maxLength: 60 }),
        fc.nat(59),
        fc.array(fc.constantFrom('keep', 'x-lock-42', 'x-lock-abcdefghij', 'lock-', '-lock--12345678901'), { maxLength: 3 }),
        fc.boolean(),
        (base, offsets, pick, foreign, present) => {
          const names = offsets.map((o, i) => node(`g${i}`, text((base + o) | 0)));
          const child = names[pick % names.length]!;
          const listing = [...(present ? names : names.filter((n) => n !== child)), ...foreign];
          expect(position(listing, child)).toEqual(bySort(listing, child));
        },
      ),
      { numRuns: 2000 },
    );
  });
});

