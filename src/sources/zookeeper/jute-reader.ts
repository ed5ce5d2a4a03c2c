import { ProtocolError } from '../../errors.js';
import { readListingBytes } from './child-listing.js';

/**
 * Reads jute records from one frame. Every read is bounds-checked: a server
 * (or anything pretending to be one) that sends a short or lying frame gets a
 * ProtocolError, never an out-of-range read or a huge allocation.
 */
export class JuteReader {
  #buf: Buffer;
  #offset: number;
  #end: number;

  constructor(frame: Buffer, offset = 0, end = frame.length) {
    this.#buf = frame;
    this.#offset = offset;
    this.#end = end;
  }

  /** Read `frame` from its start: one reader serves every frame of a connection (frames are read one at a time). */
  reset(frame: Buffer): this {
    this.#buf = frame;
    this.#offset = 0;
    this.#end = frame.length;
    return this;
  }

  get remaining(): number {
    return this.#end - this.#offset;
  }

  int(): number {
    this.#need(4, 'int');
    const v = this.#buf.readInt32BE(this.#offset);
    this.#offset += 4;
    return v;
  }

  long(): bigint {
    this.#need(8, 'long');
    const v = this.#buf.readBigInt64BE(this.#offset);
    this.#offset += 8;
    return v;
  }

  bool(): boolean {
    this.#need(1, 'bool');
    return this.#buf[this.#offset++] !== 0;
  }

  /** A copy of the bytes: the frame's memory is reused by the parser. */
  buffer(): Uint8Array {
    const length = this.int();
    if (length === -1) return new Uint8Array(0);
    if (length < 0) throw new ProtocolError(`negative buffer length ${length}`);
    this.#need(length, 'buffer');
    const out = new Uint8Array(length);
    out.set(this.#buf.subarray(this.#offset, this.#offset + length));
    this.#offset += length;
    return out;
  }

  ustring(): string {
    const length = this.int();
    if (length === -1) return '';
    if (length < 0) throw new ProtocolError(`negative string length ${length}`);
    this.#need(length, 'ustring');
    const s = this.#buf.toString('utf8', this.#offset, this.#offset + length);
    this.#offset += length;
    return s;
  }

  vector<T>(read: (reader: this) => T): T[] {
    const count = this.int();
    if (count === -1) return [];
    // Each element takes at least 4 bytes on the wire, so a count larger than
    // that bound is a lie: refuse it before allocating.
    if (count < 0 || count > this.remaining / 4) throw new ProtocolError(`bad vector length ${count}`);
    const out: T[] = new Array<T>(count);
    for (let i = 0; i < count; i++) out[i] = read(this);
    return out;
  }

  /** A vector<ustring> kept as its bytes (./child-listing.ts): every element checked, the region copied once, no string made. */
  listingBytes(): { bytes: Buffer; count: number } {
    const { bytes, count, next } = readListingBytes(this.#buf, this.#offset, this.#end);
    this.#offset = next;
    return { bytes, count };
  }

  #need(n: number, what: string): void {
    if (this.#offset + n > this.#end) {
      throw new ProtocolError(`frame too short reading ${what} (${n} bytes at ${this.#offset} of ${this.#end})`);
    }
  }
}
