/**
 * A getChildren2 reply kept as its bytes: the names are decoded only when
 * asked for. A waiter joining a deep lock queue reads one name of its
 * listing (its predecessor's) and the sequences of the others, which can be
 * read off the bytes: a string per child (1,001 of them at 1,000 waiters)
 * is most of the listing's cost on the client.
 */
import { ProtocolError } from '../../errors.js';

/** The children of a node as the server listed them (unordered), decoded on demand. */
export class ChildListing {
  /** The vector's elements as on the wire: int32 byte length, then the UTF-8 name; a copy (the frame's memory is reused). */
  readonly bytes: Buffer;
  /** How many children. */
  readonly count: number;
  /** The parent's czxid (from the reply's Stat). */
  readonly czxid: bigint;
  #names: string[] | null = null;

  /** `bytes` must hold `count` well-formed elements (the reader checked them). */
  constructor(bytes: Buffer, count: number, czxid: bigint) {
    this.bytes = bytes;
    this.count = count;
    this.czxid = czxid;
  }

  /** Every name, decoded once and kept. */
  names(): string[] {
    if (this.#names !== null) return this.#names;
    const out = new Array<string>(this.count);
    const bytes = this.bytes;
    let at = 0;
    for (let i = 0; i < this.count; i++) {
      const length = bytes.readInt32BE(at);
      out[i] = bytes.toString('utf8', at + 4, at + 4 + length);
      at += 4 + length;
    }
    return (this.#names = out);
  }

  /** The name whose element starts at byte `at` (as forEach reports it). */
  nameAt(at: number): string {
    const length = this.bytes.readInt32BE(at);
    return this.bytes.toString('utf8', at + 4, at + 4 + length);
  }

  /**
   * Call `visit(start, end, at)` for each child: its name is bytes[start, end),
   * its element begins at `at` (for nameAt). No string is made.
   */
  forEach(visit: (start: number, end: number, at: number) => void): void {
    const bytes = this.bytes;
    let at = 0;
    for (let i = 0; i < this.count; i++) {
      const length = bytes.readInt32BE(at);
      visit(at + 4, at + 4 + length, at);
      at += 4 + length;
    }
  }

  /** Whether bytes[start, end) spell `name` (ASCII names compared in place; others decoded). */
  equals(start: number, end: number, name: string): boolean {
    const bytes = this.bytes;
    if (end - start === name.length) {
      let ascii = true;
      for (let i = 0; i < name.length; i++) {
        const c = name.charCodeAt(i);
        if (c >= 0x80) {
          ascii = false;
          break;
        }
        if (bytes[start + i] !== c) return false;
      }
      if (ascii) return true;
    }
    // A name with a non-ASCII character: its UTF-8 length differs from its length in UTF-16 units.
    return Buffer.byteLength(name, 'utf8') === end - start && bytes.toString('utf8', start, end) === name;
  }
}

/**
 * Read a jute vector<ustring> at the reader's position as a ChildListing's
 * bytes: each element's length checked against the frame, then the region
 * copied once.
 */
export function readListingBytes(frame: Buffer, offset: number, end: number): { bytes: Buffer; count: number; next: number } {
  if (end - offset < 4) throw new ProtocolError(`frame too short reading vector (4 bytes at ${offset} of ${end})`);
  const count = frame.readInt32BE(offset);
  let at = offset + 4;
  if (count === -1) return { bytes: Buffer.alloc(0), count: 0, next: at };
  if (count < 0 || count > (end - at) / 4) throw new ProtocolError(`bad vector length ${count}`);
  const start = at;
  for (let i = 0; i < count; i++) {
    if (end - at < 4) throw new ProtocolError(`frame too short reading int (4 bytes at ${at} of ${end})`);
    const length = frame.readInt32BE(at);
    // A -1 (null) name is not something getChildren sends: refuse it rather than guess.
    if (length < 0) throw new ProtocolError(`negative string length ${length}`);
    if (at + 4 + length > end) throw new ProtocolError(`frame too short reading ustring (${length} bytes at ${at + 4} of ${end})`);
    at += 4 + length;
  }
  return { bytes: Buffer.from(frame.subarray(start, at)), count, next: at };
}
