import { ProtocolError } from '../../errors.js';

/**
 * Splits a byte stream into ZooKeeper frames (int32 length, then payload).
 * Push-based, like pg-protocol's parser: `parse(chunk, onFrame)` hands every
 * complete frame to the callback as a view (valid only during the call) and
 * keeps the incomplete tail with offset cursors. No Buffer.concat per chunk:
 * the tail is copied once into a reusable buffer, and a chunk that holds only
 * whole frames is parsed in place. Frames never need to line up with reads.
 */
export class FrameParser {
  #buf: Buffer = Buffer.alloc(0);
  #offset = 0;
  #end = 0;
  readonly #maxFrame: number;

  constructor(maxFrameBytes: number) {
    this.#maxFrame = maxFrameBytes;
  }

  /** Bytes held back waiting for the rest of a frame. */
  get buffered(): number {
    return this.#end - this.#offset;
  }

  parse(chunk: Buffer, onFrame: (frame: Buffer) => void): void {
    let buf: Buffer;
    let offset: number;
    let end: number;
    if (this.#end > this.#offset) {
      this.#append(chunk);
      buf = this.#buf;
      offset = this.#offset;
      end = this.#end;
    } else {
      buf = chunk;
      offset = 0;
      end = chunk.length;
    }

    while (end - offset >= 4) {
      const length = buf.readInt32BE(offset);
      if (length < 0 || length > this.#maxFrame) {
        this.#offset = this.#end = 0;
        throw new ProtocolError(`frame length ${length} outside 0..${this.#maxFrame}`);
      }
      if (end - offset - 4 < length) break;
      const start = offset + 4;
      offset = start + length;
      onFrame(buf.subarray(start, offset));
    }

    if (offset === end) {
      this.#offset = this.#end = 0;
    } else if (buf === chunk) {
      this.#offset = this.#end = 0;
      this.#append(chunk.subarray(offset, end));
    } else {
      this.#offset = offset;
    }
  }

  #append(bytes: Buffer): void {
    const held = this.#end - this.#offset;
    if (this.#end + bytes.length > this.#buf.length) {
      if (held + bytes.length <= this.#buf.length) {
        // Room at the front: slide the tail down instead of allocating.
        this.#buf.copy(this.#buf, 0, this.#offset, this.#end);
      } else {
        const next = Buffer.allocUnsafe(Math.max(held + bytes.length, 2 * this.#buf.length, 64 * 1024));
        this.#buf.copy(next, 0, this.#offset, this.#end);
        this.#buf = next;
      }
      this.#offset = 0;
      this.#end = held;
    }
    bytes.copy(this.#buf, this.#end);
    this.#end += bytes.length;
  }
}
