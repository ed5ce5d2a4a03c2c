// The protocol floor of the lock recipe, for the lock benchmarks: a ZooKeeper
// session reduced to exactly the requests a fair queue needs, written by hand.
import net from 'node:net';

/**
 * A ZooKeeper session reduced to this recipe: handshake, then frames built
 * by hand into one reused buffer; replies matched by order (the server
 * answers a session in order). Pings keep the session up between blocks.
 */
export class RawSession {
  readonly #socket: net.Socket;
  readonly #waiting: ((err: number, body: Buffer, at: number) => void)[] = [];
  #head = 0;
  #xid = 1;
  #tail: Buffer | null = null;
  #out = Buffer.allocUnsafe(64 * 1024);
  #outAt = 0;
  #flushQueued = false;
  #ping: NodeJS.Timeout;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    this.#ping = setInterval(() => {
      this.#frame(-2, 11, 0);
    }, 3000);
    this.#ping.unref();
  }

  static async connect(server: string): Promise<RawSession> {
    const colon = server.lastIndexOf(':');
    const socket = net.connect({ host: server.slice(0, colon), port: Number(server.slice(colon + 1)), noDelay: true });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    // ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd(16), readOnly.
    const hello = Buffer.alloc(4 + 4 + 8 + 4 + 8 + 4 + 16 + 1);
    hello.writeInt32BE(hello.length - 4, 0);
    hello.writeInt32BE(10_000, 16);
    hello.writeInt32BE(16, 28);
    socket.write(hello);
    await new Promise<void>((resolve) => {
      let got = Buffer.alloc(0);
      const onData = (chunk: Buffer): void => {
        got = Buffer.concat([got, chunk]);
        if (got.length >= 4 && got.length >= 4 + got.readInt32BE(0)) {
          socket.off('data', onData);
          resolve();
        }
      };
      socket.on('data', onData);
    });
    const session = new RawSession(socket);
    socket.on('data', (chunk: Buffer) => session.#onData(chunk));
    return session;
  }

  #frame(xid: number, op: number, bodyBytes: number): number {
    if (this.#outAt + 8 + 4 + bodyBytes > this.#out.length) throw new Error('raw: out buffer full');
    const at = this.#outAt;
    this.#out.writeInt32BE(8 + bodyBytes, at);
    this.#out.writeInt32BE(xid, at + 4);
    this.#out.writeInt32BE(op, at + 8);
    this.#outAt = at + 12 + bodyBytes;
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      queueMicrotask(this.#flush);
    }
    return at + 12;
  }

  readonly #flush = (): void => {
    this.#flushQueued = false;
    // The socket keeps a reference until written: copy out of the reused buffer.
    this.#socket.write(Buffer.from(this.#out.subarray(0, this.#outAt)));
    this.#outAt = 0;
  };

  #string(at: number, s: string): number {
    const n = this.#out.write(s, at + 4, 'latin1');
    this.#out.writeInt32BE(n, at);
    return at + 4 + n;
  }

  #request(op: number, body: number, fill: (at: number) => void, done: (err: number, body: Buffer, at: number) => void): void {
    const at = this.#frame(this.#xid++, op, body);
    fill(at);
    this.#waiting.push(done);
  }

  /** create2 ephemeral-sequential `prefix` with the open ACL; the reply's path. */
  create(prefix: string, done: (err: number, path: string) => void): void {
    const acl = 4 + 4 + (4 + 5) + (4 + 6);
    this.#request(15, 4 + prefix.length + 4 + acl + 4, (at) => {
      at = this.#string(at, prefix);
      this.#out.writeInt32BE(-1, at); // data: null
      at += 4;
      this.#out.writeInt32BE(1, at); // one ACL entry
      this.#out.writeInt32BE(31, at + 4); // Perms.ALL
      at = this.#string(at + 8, 'world');
      at = this.#string(at, 'anyone');
      this.#out.writeInt32BE(3, at); // EPHEMERAL_SEQUENTIAL
    }, (err, body, at) => done(err, err === 0 ? body.toString('latin1', at + 4, at + 4 + body.readInt32BE(at)) : ''));
  }

  getChildren(parent: string, done: (err: number, children: string[]) => void): void {
    this.#request(8, 4 + parent.length + 1, (at) => {
      at = this.#string(at, parent);
      this.#out[at] = 0;
    }, (err, body, at) => {
      const children: string[] = [];
      if (err === 0) {
        const n = body.readInt32BE(at);
        at += 4;
        for (let i = 0; i < n; i++) {
          const len = body.readInt32BE(at);
          children.push(body.toString('latin1', at + 4, at + 4 + len));
          at += 4 + len;
        }
      }
      done(err, children);
    });
  }

  delete(path: string, done: (err: number) => void): void {
    this.#request(2, 4 + path.length + 4, (at) => {
      at = this.#string(at, path);
      this.#out.writeInt32BE(-1, at);
    }, (err) => done(err));
  }

  #onData(chunk: Buffer): void {
    let buf = chunk;
    if (this.#tail !== null) {
      buf = Buffer.concat([this.#tail, chunk]);
      this.#tail = null;
    }
    let at = 0;
    while (buf.length - at >= 4) {
      const len = buf.readInt32BE(at);
      if (buf.length - at - 4 < len) break;
      const xid = buf.readInt32BE(at + 4);
      const err = buf.readInt32BE(at + 16);
      if (xid >= 0) {
        const done = this.#waiting[this.#head++]!;
        if (this.#head === this.#waiting.length) this.#waiting.length = this.#head = 0;
        done(err, buf, at + 20);
      }
      at += 4 + len;
    }
    if (at < buf.length) this.#tail = Buffer.from(buf.subarray(at));
  }

  close(): void {
    clearInterval(this.#ping);
    this.#socket.destroy();
  }
}

/** The floor's cycle: create2 + getChildren in one write, check we are first, delete. */
export function rawCycle(s: RawSession, parent: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let path = '';
    s.create(`${parent}/x-lock-`, (err, p) => {
      if (err !== 0) reject(new Error(`raw create: ${err}`));
      path = p;
    });
    s.getChildren(parent, (err, children) => {
      if (err !== 0) return reject(new Error(`raw getChildren: ${err}`));
      const mine = path.slice(parent.length + 1);
      // Each loop owns its lock: the listing holds our node alone.
      if (children.length !== 1 || children[0] !== mine) return reject(new Error(`raw: not first in ${children.join(',')}`));
      s.delete(path, (e) => (e === 0 ? resolve() : reject(new Error(`raw delete: ${e}`))));
    });
  });
}

