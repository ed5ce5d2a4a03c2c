// A getChildren2 reply kept as its bytes (src/sources/zookeeper/child-listing.ts)
// and a lock waiter's place read off them (queue-order.ts positionInListing,
// sequenceInBytes): the same answers as the string versions on any listing
// (foreign children, non-ASCII names, names that only look like ours,
// sequences across the 32-bit wrap), and a malformed reply refused.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProtocolError } from '../../src/errors.js';
import { ChildListing, readListingBytes } from '../../src/sources/zookeeper/child-listing.js';
import { position, positionInListing, sequenceInBytes, sequenceOf } from '../../src/sources/zookeeper/recipes/queue-order.js';

/** The vector<ustring> elements of `names` as the server sends them. */
function wire(names: readonly string[]): Buffer {
  return Buffer.concat(
    names.map((n) => {
      const utf8 = Buffer.from(n, 'utf8');
      const length = Buffer.alloc(4);
      length.writeInt32BE(utf8.length);
      return Buffer.concat([length, utf8]);
    }),
  );
}
const listingOf = (names: readonly string[]): ChildListing => new ChildListing(wire(names), names.length, 7n);

/** ZooKeeper's %010d of a sequence. */
const seqText = (seq: number): string => (seq < 0 ? `-${String(-seq).padStart(9, '0')}` : String(seq).padStart(10, '0'));

// Names: ours (guid-lock-seq near the wrap), and others that only look like them.
const ours = fc.tuple(fc.stringMatching(/^[0-9a-f]{1,8}$/), fc.integer({ min: -2147483648, max: 2147483647 })).map(([g, s]) => `${g}-lock-${seqText(s)}`);
const nearWrap = fc.tuple(fc.stringMatching(/^[0-9a-f]{1,4}$/), fc.integer({ min: 2147483647 - 5, max: 2147483647 + 5 })).map(([g, s]) => `${g}-lock-${seqText(s | 0)}`);
const foreign = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme', maxLength: 12 }),
  fc.constantFrom('keep', '-lock-', 'a-lock-', 'a-lock-42', 'a-lock--lock-0000000001', 'é-lock-0000000003', 'a-lock-0000000003-lock-', 'a-lock-00000000x3', 'a-lock--00000001'),
  fc.tuple(fc.string({ unit: 'grapheme', maxLength: 4 }), fc.integer()).map(([p, s]) => `${p}-lock-${seqText(s | 0)}`),
);
const names = fc.uniqueArray(fc.oneof(ours, nearWrap, foreign), { minLength: 1, maxLength: 30 });

describe('ChildListing', () => {
  it('decodes the names it was given, and spells them in place', () => {
    fc.assert(
      fc.property(names, (ns) => {
        const listing = listingOf(ns);
        expect(listing.names()).toEqual(ns);
        let i = 0;
        listing.forEach((start, end, at) => {
          expect(listing.nameAt(at)).toBe(ns[i]);
          expect(listing.equals(start, end, ns[i]!)).toBe(true);
          expect(listing.equals(start, end, `${ns[i]!}x`)).toBe(false);
          i++;
        });
      }),
    );
  });

  it('reads a sequence off the bytes as sequenceOf reads the string', () => {
    fc.assert(
      fc.property(fc.oneof(ours, nearWrap, foreign), (name) => {
        const bytes = Buffer.from(name, 'utf8');
        expect(sequenceInBytes(bytes, 0, bytes.length)).toBe(sequenceOf(name));
      }),
      { numRuns: 2000 },
    );
  });

  it('places a waiter as position() does, for every node of the listing and for one not in it', () => {
    fc.assert(
      fc.property(names, ours, (ns, absent) => {
        const listing = listingOf(ns);
        for (const child of [...ns, absent]) expect(positionInListing(listing, child)).toEqual(position(ns, child));
      }),
      { numRuns: 500 },
    );
  });

  it('refuses a reply whose vector lies about its lengths', () => {
    const frame = wire(['a-lock-0000000001', 'b']);
    const count = Buffer.alloc(4);
    count.writeInt32BE(2);
    const good = Buffer.concat([count, frame]);
    expect(readListingBytes(good, 0, good.length).count).toBe(2);
    // One byte short of the last name.
    expect(() => readListingBytes(good, 0, good.length - 1)).toThrow(ProtocolError);
    // A count the frame cannot hold.
    const many = Buffer.from(good);
    many.writeInt32BE(1000);
    expect(() => readListingBytes(many, 0, many.length)).toThrow(ProtocolError);
    // A negative name length.
    const negative = Buffer.from(good);
    negative.writeInt32BE(-5, 4);
    expect(() => readListingBytes(negative, 0, negative.length)).toThrow(ProtocolError);
  });
});
