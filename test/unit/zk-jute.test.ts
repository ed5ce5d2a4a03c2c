// Jute round trips (fast-check), the reader's refusals, and the writer's
// promise never to overwrite bytes it has handed out.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ProtocolError } from '../../src/errors.js';
import { JuteReader } from '../../src/sources/zookeeper/jute-reader.js';
import { JuteWriter } from '../../src/sources/zookeeper/jute-writer.js';
import { readAcl, readStat, writeAcl, type ACL, type Stat } from '../../src/sources/zookeeper/protocol.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Write one frame with `write`, take it, and read its payload back with `read`. */
function roundTrip<T>(write: (w: JuteWriter) => void, read: (r: JuteReader) => T): { value: T; remaining: number } {
  const w = new JuteWriter();
  w.beginFrame();
  write(w);
  const length = w.endFrame();
  const bytes = w.take();
  expect(bytes.readInt32BE(0)).toBe(length);
  expect(bytes.length).toBe(length + 4);
  const r = new JuteReader(bytes, 4);
  const value = read(r);
  return { value, remaining: r.remaining };
}

function writeStat(w: JuteWriter, s: Stat): void {
  w.long(s.czxid).long(s.mzxid).long(BigInt(s.ctime)).long(BigInt(s.mtime)).int(s.version).int(s.cversion).int(s.aversion)
    .long(s.ephemeralOwner).int(s.dataLength).int(s.numChildren).long(s.pzxid);
}

const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
const int64 = fc.oneof(fc.bigInt({ min: INT64_MIN, max: INT64_MAX }), fc.constantFrom(INT64_MIN, INT64_MAX, 0n, -1n, 2n ** 53n + 1n));
const statArb: fc.Arbitrary<Stat> = fc.record({
  czxid: int64,
  mzxid: int64,
  ctime: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
  mtime: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
  version: int32,
  cversion: int32,
  aversion: int32,
  ephemeralOwner: int64,
  dataLength: int32,
  numChildren: int32,
  pzxid: int64,
});
const aclArb: fc.Arbitrary<ACL> = fc.record({
  perms: fc.integer({ min: 0, max: 31 }),
  id: fc.record({ scheme: fc.string(), id: fc.string({ unit: 'binary' }) }),
});

describe('jute round trips (property)', () => {
  it('int', () => {
    fc.assert(fc.property(int32, (v) => { expect(roundTrip((w) => w.int(v), (r) => r.int())).toEqual({ value: v, remaining: 0 }); }));
  });

  it('long as bigint, extremes included', () => {
    fc.assert(fc.property(int64, (v) => { expect(roundTrip((w) => w.long(v), (r) => r.long())).toEqual({ value: v, remaining: 0 }); }));
  });

  it('bool', () => {
    fc.assert(fc.property(fc.boolean(), (v) => { expect(roundTrip((w) => w.bool(v), (r) => r.bool()).value).toBe(v); }));
  });

  it('buffer, empty included', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 5000 }), (v) => {
        const { value, remaining } = roundTrip((w) => w.buffer(v), (r) => r.buffer());
        expect(Buffer.from(value).equals(Buffer.from(v))).toBe(true);
        expect(remaining).toBe(0);
      }),
    );
  });

  it('ustring, unicode included', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'binary' }), fc.constantFrom('', 'é', '日本語', '🔒🎟️')), (v) => {
        expect(roundTrip((w) => w.ustring(v), (r) => r.ustring())).toEqual({ value: v, remaining: 0 });
      }),
    );
  });

  it('vectors of strings and of ints', () => {
    fc.assert(
      fc.property(fc.array(fc.string({ unit: 'grapheme' })), fc.array(int32), (strings, ints) => {
        const { value } = roundTrip(
          (w) => w.vector(strings, (x, s) => void x.ustring(s)).vector(ints, (x, n) => void x.int(n)),
          (r) => [r.vector((x) => x.ustring()), r.vector((x) => x.int())],
        );
        expect(value).toEqual([strings, ints]);
      }),
    );
  });

  it('Stat', () => {
    fc.assert(fc.property(statArb, (s) => { expect(roundTrip((w) => writeStat(w, s), readStat)).toEqual({ value: s, remaining: 0 }); }));
  });

  it('ACL vectors', () => {
    fc.assert(
      fc.property(fc.array(aclArb, { maxLength: 8 }), (acl) => {
        expect(roundTrip((w) => w.vector(acl, writeAcl), (r) => r.vector(readAcl))).toEqual({ value: acl, remaining: 0 });
      }),
    );
  });

  it('a mixed record crossing the writer\'s buffer growth', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(int32, int64, fc.uint8Array({ maxLength: 3000 }), fc.string()), { maxLength: 30 }), (items) => {
        const { value } = roundTrip(
          (w) => w.vector(items, (x, [a, b, c, d]) => void x.int(a).long(b).buffer(c).ustring(d)),
          (r) => r.vector((x) => [x.int(), x.long(), Buffer.from(x.buffer()), x.ustring()] as const),
        );
        expect(value).toEqual(items.map(([a, b, c, d]) => [a, b, Buffer.from(c), d]));
      }),
      { numRuns: 50 },
    );
  });

  it('null buffer and null string are written as length -1', () => {
    const w = new JuteWriter();
    w.buffer(null).ustring(null);
    const bytes = w.take();
    expect([bytes.readInt32BE(0), bytes.readInt32BE(4)]).toEqual([-1, -1]);
  });
});

describe('JuteReader refuses short and lying frames', () => {
  const bytes = (...ints: number[]): Buffer => {
    const b = Buffer.alloc(ints.length * 4);
    ints.forEach((v, i) => b.writeInt32BE(v, i * 4));
    return b;
  };

  it('short int, long, bool', () => {
    expect(() => new JuteReader(Buffer.alloc(3)).int()).toThrow(ProtocolError);
    expect(() => new JuteReader(Buffer.alloc(7)).long()).toThrow(ProtocolError);
    expect(() => new JuteReader(Buffer.alloc(0)).bool()).toThrow(ProtocolError);
  });

  it('respects the end it was given, not the underlying buffer', () => {
    const r = new JuteReader(Buffer.alloc(16), 0, 6);
    r.int();
    expect(() => r.int()).toThrow(ProtocolError);
  });

  it('a buffer or string whose length runs past the frame', () => {
    expect(() => new JuteReader(bytes(10, 0)).buffer()).toThrow(ProtocolError);
    expect(() => new JuteReader(bytes(10, 0)).ustring()).toThrow(ProtocolError);
  });

  it('huge and negative lengths, without allocating them', () => {
    expect(() => new JuteReader(bytes(0x7fffffff)).buffer()).toThrow(ProtocolError);
    expect(() => new JuteReader(bytes(0x7fffffff)).ustring()).toThrow(ProtocolError);
    expect(() => new JuteReader(bytes(-5)).buffer()).toThrow(ProtocolError);
    expect(() => new JuteReader(bytes(-5)).ustring()).toThrow(ProtocolError);
  });

  it('a vector count larger than the bytes left', () => {
    expect(() => new JuteReader(bytes(0x7fffffff, 1)).vector((r) => r.int())).toThrow(ProtocolError);
    expect(() => new JuteReader(bytes(3, 1, 2)).vector((r) => r.int())).toThrow(ProtocolError);
    expect(() => new JuteReader(bytes(-2)).vector((r) => r.int())).toThrow(ProtocolError);
  });

  it('a Stat cut short', () => {
    expect(() => readStat(new JuteReader(Buffer.alloc(67)))).toThrow(ProtocolError);
    expect(readStat(new JuteReader(Buffer.alloc(68))).czxid).toBe(0n);
  });

  it('every truncation of a valid record (property)', () => {
    fc.assert(
      fc.property(statArb, fc.array(aclArb, { minLength: 1, maxLength: 3 }), (s, acl) => {
        const w = new JuteWriter();
        w.vector(acl, writeAcl);
        writeStat(w, s);
        const full = Buffer.from(w.take());
        const read = (b: Buffer): unknown => {
          const r = new JuteReader(b);
          return [r.vector(readAcl), readStat(r)];
        };
        expect(read(full)).toEqual([acl, s]);
        for (let cut = 0; cut < full.length; cut++) expect(() => read(full.subarray(0, cut))).toThrow(ProtocolError);
      }),
      { numRuns: 30 },
    );
  });
});

describe('JuteWriter buffering', () => {
  it('frames written between two takes come out as one buffer', () => {
    const w = new JuteWriter();
    for (let i = 0; i < 3; i++) {
      w.beginFrame();
      w.int(i).ustring(`frame ${i}`);
      w.endFrame();
    }
    const taken = w.take();
    const r = new JuteReader(taken);
    const frames: [number, string][] = [];
    while (r.remaining > 0) {
      r.int(); // length
      frames.push([r.int(), r.ustring()]);
    }
    expect(frames).toEqual([[0, 'frame 0'], [1, 'frame 1'], [2, 'frame 2']]);
    expect(w.pending).toBe(0);
  });

  it('taken views stay intact after more writes, growth and buffer switches (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.array(fc.uint8Array({ maxLength: 9000 }), { maxLength: 4 }), { minLength: 1, maxLength: 40 }), (batches) => {
        const w = new JuteWriter();
        const taken: { view: Buffer; copy: Buffer }[] = [];
        for (const batch of batches) {
          for (const payload of batch) {
            w.beginFrame();
            w.buffer(payload);
            w.endFrame();
          }
          const view = w.take();
          taken.push({ view, copy: Buffer.from(view) });
        }
        for (const { view, copy } of taken) expect(view.equals(copy)).toBe(true);
      }),
      { numRuns: 100 },
    );
  });

  it('an aborted frame leaves no bytes behind and earlier frames intact', () => {
    const w = new JuteWriter();
    w.beginFrame();
    w.int(7);
    w.endFrame();
    w.beginFrame();
    w.buffer(new Uint8Array(40_000));
    w.abortFrame();
    const out = w.take();
    expect(out.length).toBe(8);
    expect([out.readInt32BE(0), out.readInt32BE(4)]).toEqual([4, 7]);
  });

  it('the frame in progress survives the buffer growing under it', () => {
    const w = new JuteWriter();
    w.beginFrame();
    w.int(1);
    w.endFrame();
    const first = w.take();
    const firstCopy = Buffer.from(first);
    w.beginFrame();
    w.int(2).buffer(new Uint8Array(100_000).fill(9));
    const length = w.endFrame();
    const second = w.take();
    expect(second.readInt32BE(0)).toBe(length);
    expect(second.readInt32BE(4)).toBe(2);
    expect(first.equals(firstCopy)).toBe(true);
  });
});
