// The frame parser must find the same frames whatever the socket reads look
// like: every split point, several frames per chunk, one byte per chunk.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ProtocolError } from '../../src/errors.js';
import { FrameParser } from '../../src/sources/zookeeper/frame-parser.js';

function frame(payload: Uint8Array): Buffer {
  const out = Buffer.alloc(4 + payload.length);
  out.writeInt32BE(payload.length, 0);
  out.set(payload, 4);
  return out;
}

function payloads(): Buffer[] {
  return [
    Buffer.from('hello'),
    Buffer.alloc(0),
    Buffer.from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    Buffer.alloc(300, 0xab),
    Buffer.from('last frame'),
  ];
}

/** Feed `chunks` and collect copies of the frames (views are only valid during the callback). */
function collect(parser: FrameParser, chunks: readonly Buffer[]): string[] {
  const seen: string[] = [];
  for (const chunk of chunks) parser.parse(chunk, (f) => seen.push(Buffer.from(f).toString('hex')));
  return seen;
}

describe('FrameParser', () => {
  const expected = payloads().map((p) => p.toString('hex'));
  const stream = Buffer.concat(payloads().map(frame));

  it('finds every frame when the stream is split in two at every offset', () => {
    for (let at = 0; at <= stream.length; at++) {
      const parser = new FrameParser(1 << 20);
      expect(collect(parser, [stream.subarray(0, at), stream.subarray(at)]), `split at ${at}`).toEqual(expected);
      expect(parser.buffered).toBe(0);
    }
  });

  it('finds every frame when the stream is split in three at every pair of offsets', () => {
    for (let a = 0; a <= stream.length; a += 3) {
      for (let b = a; b <= stream.length; b += 7) {
        const parser = new FrameParser(1 << 20);
        const got = collect(parser, [stream.subarray(0, a), stream.subarray(a, b), stream.subarray(b)]);
        expect(got, `split at ${a},${b}`).toEqual(expected);
      }
    }
  });

  it('parses several frames in one chunk', () => {
    expect(collect(new FrameParser(1 << 20), [stream])).toEqual(expected);
  });

  it('reassembles frames fed one byte per chunk', () => {
    const chunks = [...stream].map((b) => Buffer.from([b]));
    const parser = new FrameParser(1 << 20);
    expect(collect(parser, chunks)).toEqual(expected);
    expect(parser.buffered).toBe(0);
  });

  it('does not change chunks it was handed, and views stay correct across many chunks (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 20 }),
        fc.array(fc.integer({ min: 1, max: 97 }), { minLength: 1, maxLength: 10 }),
        (frames, sizes) => {
          const bytes = Buffer.concat(frames.map((p) => frame(p)));
          const copy = Buffer.from(bytes);
          const chunks: Buffer[] = [];
          for (let at = 0, i = 0; at < bytes.length; i++) {
            const size = sizes[i % sizes.length] as number;
            chunks.push(bytes.subarray(at, at + size));
            at += size;
          }
          const parser = new FrameParser(1 << 20);
          expect(collect(parser, chunks)).toEqual(frames.map((p) => Buffer.from(p).toString('hex')));
          expect(parser.buffered).toBe(0);
          expect(bytes.equals(copy)).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('holds an incomplete frame back until the rest arrives', () => {
    const parser = new FrameParser(1 << 20);
    const one = frame(Buffer.from('abcdef'));
    expect(collect(parser, [one.subarray(0, 7)])).toEqual([]);
    expect(parser.buffered).toBe(7);
    expect(collect(parser, [one.subarray(7)])).toEqual([Buffer.from('abcdef').toString('hex')]);
  });

  it('throws ProtocolError for a frame longer than the maximum', () => {
    const parser = new FrameParser(1024);
    const header = Buffer.alloc(4);
    header.writeInt32BE(1025, 0);
    expect(() => parser.parse(header, () => undefined)).toThrow(ProtocolError);
  });

  it('throws ProtocolError for a huge length split across chunks', () => {
    const parser = new FrameParser(1024);
    const header = Buffer.from([0x7f, 0xff, 0xff, 0xff]);
    parser.parse(header.subarray(0, 2), () => undefined);
    expect(() => parser.parse(header.subarray(2), () => undefined)).toThrow(ProtocolError);
  });

  it('throws ProtocolError for a negative length', () => {
    const parser = new FrameParser(1024);
    const header = Buffer.alloc(4);
    header.writeInt32BE(-1, 0);
    expect(() => parser.parse(header, () => undefined)).toThrow(ProtocolError);
  });

  it('accepts a frame of exactly the maximum length', () => {
    const parser = new FrameParser(16);
    expect(collect(parser, [frame(Buffer.alloc(16, 1))])).toHaveLength(1);
  });
});
