/**
 * Serializes jute records (ZooKeeper's wire encoding: big-endian ints, longs,
 * length-prefixed buffers and UTF-8 strings, -1 for null) into length-prefixed
 * frames, appended to one growing buffer.
 *
 * Frames written between two `take()` calls leave in one socket write: the
 * client takes the bytes once per tick, so a create2 and a getChildren issued
 * together cost one syscall and arrive at the server in one segment.
 */
const INITIAL_SIZE = 16 * 1024;

export class JuteWriter {
  #buf: Buffer = Buffer.allocUnsafe(INITIAL_SIZE);
  /** Start of the bytes not yet taken. */
  #start = 0;
  /** Write cursor. */
  #offset = 0;
  /** Start of the frame being written (its reserved length prefix), or -1. */
  #frame = -1;

  /** Reserve the int32 length prefix of a new frame; `endFrame` fills it. */
  beginFrame(): void {
    this.#ensure(4);
    this.#frame = this.#offset;
    this.#offset += 4;
  }

  /** Fill the reserved prefix; returns the frame's payload length. */
  endFrame(): number {
    const length = this.#offset - this.#frame - 4;
    this.#buf.writeInt32BE(length, this.#frame);
    this.#frame = -1;
    return length;
  }

  /** Drop the frame being written (it turned out invalid, e.g. too large). */
  abortFrame(): void {
    if (this.#frame >= 0) this.#offset = this.#frame;
    this.#frame = -1;
  }

  /** Bytes written (payload so far) in the current frame. */
  get frameLength(): number {
    return this.#frame < 0 ? 0 : this.#offset - this.#frame - 4;
  }

  get pending(): number {
    return this.#offset - this.#start;
  }

  /**
   * The bytes written since the last take. The returned view stays valid: the
   * writer never writes over taken bytes (socket.write keeps a reference until
   * the kernel has them), it moves on or starts a new buffer.
   */
  take(): Buffer {
    const out = this.#buf.subarray(this.#start, this.#offset);
    this.#start = this.#offset;
    if (this.#buf.length - this.#offset < 1024) {
      this.#buf = Buffer.allocUnsafe(INITIAL_SIZE);
      this.#start = this.#offset = 0;
    }
    return out;
  }

  int(value: number): this {
    this.#ensure(4);
    this.#buf.writeInt32BE(value, this.#offset);
    this.#offset += 4;
    return this;
  }

  long(value: bigint): this {
    this.#ensure(8);
    this.#buf.writeBigInt64BE(value, this.#offset);
    this.#offset += 8;
    return this;
  }

  bool(value: boolean): this {
    this.#ensure(1);
    this.#buf[this.#offset++] = value ? 1 : 0;
    return this;
  }

  /** jute `buffer`: int32 length then bytes; null is length -1. */
  buffer(value: Uint8Array | null): this {
    if (value === null) return this.int(-1);
    this.int(value.byteLength);
    this.#ensure(value.byteLength);
    this.#buf.set(value, this.#offset);
    this.#offset += value.byteLength;
    return this;
  }

  /** jute `ustring`: int32 byte length then UTF-8; null is length -1. */
  ustring(value: string | null): this {
    if (value === null) return this.int(-1);
    const length = Buffer.byteLength(value, 'utf8');
    this.int(length);
    this.#ensure(length);
    this.#buf.write(value, this.#offset, length, 'utf8');
    this.#offset += length;
    return this;
  }

  /** jute `vector<T>`: int32 count then each element. */
  vector<T>(items: readonly T[], write: (writer: this, item: T) => void): this {
    this.int(items.length);
    for (const item of items) write(this, item);
    return this;
  }

  #ensure(n: number): void {
    if (this.#offset + n <= this.#buf.length) return;
    // Move the untaken bytes (whole frames and the frame in progress) to a new
    // buffer large enough; taken bytes may still be queued in the socket.
    const used = this.#offset - this.#start;
    const next = Buffer.allocUnsafe(Math.max(INITIAL_SIZE, 2 * (used + n)));
    this.#buf.copy(next, 0, this.#start, this.#offset);
    if (this.#frame >= 0) this.#frame -= this.#start;
    this.#buf = next;
    this.#offset = used;
    this.#start = 0;
  }
}
