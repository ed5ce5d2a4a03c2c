/**
 * A TCP proxy a test owns, to put real network faults between a client and
 * its server: start it in front of the server, give the client its address
 * instead of the server's, and break the path when the test says so.
 *
 *   const proxy = await TcpProxy.start({ port: 2181 });
 *   const zk = await ZooKeeperClient.connect({ connectString: proxy.address });
 *   proxy.cut();        // reset every connection now (RST both ways), like a
 *                       // NAT or firewall dropping its state; new connections work
 *   proxy.blackhole();  // a partition without resets: nothing flows either way,
 *                       // new connections hang, no FIN or RST reaches anyone
 *   proxy.resume();     // heal: what was held back flows, held connections go through
 *   await proxy.close();
 *
 * Lost replies: holdReplies() keeps what the server sends instead of passing
 * it on (the server has answered, the client hears nothing) and
 * deliverHeld() passes it on later, even during a black hole, so a reply can
 * arrive long after its request reached the server; loseReplyTo(marker) lets
 * the next request containing `marker` reach the server and resets the
 * connection on its reply (a write whose outcome the client cannot know).
 *
 * `observe` sees every chunk in each direction as it is forwarded, to count
 * what a client sends (requests per second, no polling).
 *
 * It listens on 127.0.0.1 only, on a port of its own (port 0). Forwarding is
 * done by hand rather than with pipe(): pipe() resumes a source on 'drain',
 * which would undo a black hole's pause.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { InvalidArgumentError } from '../errors.js';

/** Where a TcpProxy forwards connections: the server's host and port. */
export interface ProxyTarget {
  /** Default '127.0.0.1'. */
  readonly host?: string;
  readonly port: number;
}

/** TcpProxy's options, such as an `observe` hook that sees every chunk passing in either direction. */
export interface ProxyOptions {
  /**
   * Called with every chunk as it is passed on: `from` is the side that sent
   * it, `connection` numbers the proxy's connections from 1 in the order they
   * were accepted. Chunks are as the sockets read them: a message may be split
   * across chunks or share one with the next. Not called for bytes the proxy
   * keeps back (holdReplies) until they are delivered, nor for bytes it drops.
   */
  readonly observe?: (chunk: Buffer, from: 'client' | 'server', connection: number) => void;
}

interface Link {
  readonly id: number;
  readonly client: net.Socket;
  upstream: net.Socket | null;
  /** Server bytes kept back by holdReplies(), in order. */
  readonly held: Buffer[];
  /** The client sent loseReplyTo's marker: reset on the server's next bytes. */
  loseNextReply: boolean;
}

/**
 * A TCP proxy to put between a client and its server in a test: cut() resets
 * every connection, blackhole() stops all traffic without closing anything,
 * resume() lets it flow again; holdReplies(), deliverHeld() and loseReplyTo()
 * lose or delay a reply after the server acted on the request.
 */
export class TcpProxy {
  readonly #server: net.Server;
  readonly #target: Required<ProxyTarget>;
  readonly #observe: ProxyOptions['observe'];
  readonly #links = new Set<Link>();
  #accepted = 0;
  #blackholed = false;
  #holding = false;
  #heldBytes = 0;
  #lastForwardedAt = -Infinity;
  readonly #heldWaiters = new Set<{ bytes: number; resolve: () => void }>();
  #loseMarker: Buffer | null = null;
  #repliesLost = 0;
  #closed = false;

  private constructor(server: net.Server, target: Required<ProxyTarget>, options: ProxyOptions) {
    this.#server = server;
    this.#target = target;
    this.#observe = options.observe;
  }

  /** Listen on 127.0.0.1, port 0 (any free port), forwarding to `target`. */
  static async start(target: ProxyTarget, options: ProxyOptions = {}): Promise<TcpProxy> {
    if (target === null || typeof target !== 'object' || !Number.isInteger(target.port) || target.port < 1 || target.port > 65535) {
      throw new InvalidArgumentError(`TcpProxy.start(): target.port must be a TCP port (1..65535), got ${String(target?.port)}`);
    }
    if (options.observe !== undefined && typeof options.observe !== 'function') {
      throw new InvalidArgumentError('TcpProxy.start(): options.observe must be a function');
    }
    const server = net.createServer({ pauseOnConnect: true, noDelay: true });
    const proxy = new TcpProxy(server, { host: target.host ?? '127.0.0.1', port: target.port }, { ...options });
    server.on('connection', (socket) => proxy.#accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    return proxy;
  }

  /** Start a proxy to a 'host:port' string (one entry of a ZooKeeper connect string, say). */
  static async to(hostPort: string, options: ProxyOptions = {}): Promise<TcpProxy> {
    const at = hostPort.lastIndexOf(':');
    if (at <= 0) throw new InvalidArgumentError(`TcpProxy.to(): expected 'host:port', got ${JSON.stringify(hostPort)}`);
    return TcpProxy.start({ host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)) }, options);
  }

  get port(): number {
    const address = this.#server.address();
    if (address === null || typeof address === 'string') throw new Error('proxy is not listening');
    return address.port;
  }

  /** '127.0.0.1:port', ready for a connect string. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Connections currently open through the proxy (held ones included). */
  get connectionCount(): number {
    return this.#links.size;
  }

  get blackholed(): boolean {
    return this.#blackholed;
  }

  /** Server bytes held back by holdReplies() and not yet delivered. */
  get heldBytes(): number {
    return this.#heldBytes;
  }

  /** Resolve once at least `bytes` server bytes are held back (the server has answered). */
  whenHeld(bytes = 1): Promise<void> {
    if (this.#heldBytes >= bytes) return Promise.resolve();
    return new Promise((resolve) => this.#heldWaiters.add({ bytes, resolve }));
  }

  /** performance.now() when bytes from a client were last passed on to the server. */
  get lastForwardedAt(): number {
    return this.#lastForwardedAt;
  }

  /**
   * From now on keep what the server sends on every connection instead of
   * passing it on: the requests reach the server and it answers, but the
   * client hears nothing until deliverHeld().
   */
  holdReplies(): void {
    this.#holding = true;
  }

  /**
   * Pass on what holdReplies() kept, in order, and stop holding. During a
   * black hole only these bytes go through: a reply arrives late, and
   * nothing after it.
   */
  deliverHeld(): void {
    this.#holding = false;
    for (const link of this.#links) {
      for (const chunk of link.held.splice(0)) {
        if (link.client.destroyed) continue;
        this.#observe?.(chunk, 'server', link.id);
        link.client.write(chunk);
      }
    }
    this.#heldBytes = 0;
  }

  /**
   * Lose the reply to the next request whose bytes contain `marker`: those
   * bytes reach the server, and the first bytes the server sends back on
   * that connection reset it (both sides) instead of reaching the client.
   */
  loseReplyTo(marker: string): void {
    this.#loseMarker = Buffer.from(marker, 'utf8');
  }

  /** Replies lost by loseReplyTo(). */
  get repliesLost(): number {
    return this.#repliesLost;
  }

  /** Reset every current connection, both sides, with a TCP RST. */
  cut(): void {
    for (const link of [...this.#links]) this.#reset(link);
  }

  /**
   * Stop forwarding in both directions and stop letting new connections
   * through, without closing or resetting anything. Bytes already sent wait
   * in the proxy and the kernel's buffers, as they would in a partition.
   */
  blackhole(): void {
    this.#blackholed = true;
    for (const link of this.#links) {
      link.client.pause();
      link.upstream?.pause();
    }
  }

  /** End a black hole: deliver what was held and connect the waiting clients. */
  resume(): void {
    if (!this.#blackholed) return;
    this.#blackholed = false;
    for (const link of [...this.#links]) {
      if (link.upstream === null) this.#connectUpstream(link);
      else {
        link.client.resume();
        link.upstream.resume();
      }
    }
  }

  /** Stop listening and reset every connection. */
  /** `await using proxy = await TcpProxy.start(...)`: closes it (as close()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Stop listening and destroy every connection through the proxy (both sides). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.cut();
    await closed;
  }

  #accept(client: net.Socket): void {
    if (this.#closed) {
      client.resetAndDestroy();
      return;
    }
    const link: Link = { id: ++this.#accepted, client, upstream: null, held: [], loseNextReply: false };
    this.#links.add(link);
    client.setNoDelay(true);
    client.on('error', () => this.#reset(link));
    client.on('close', () => this.#onClose(link, client));
    // During a black hole the connection is accepted and held silent, which
    // is what a client sees when the kernel completes the handshake but the
    // server never reads: connected, then nothing.
    if (!this.#blackholed) this.#connectUpstream(link);
  }

  #connectUpstream(link: Link): void {
    const { client } = link;
    const upstream = net.connect({ host: this.#target.host, port: this.#target.port, noDelay: true });
    link.upstream = upstream;
    upstream.pause();
    upstream.on('error', () => this.#reset(link));
    upstream.on('close', () => this.#onClose(link, upstream));
    upstream.once('connect', () => {
      this.#forward(link, 'client', client, upstream, (chunk) => {
        this.#lastForwardedAt = performance.now();
        if (this.#loseMarker !== null && chunk.includes(this.#loseMarker)) {
          this.#loseMarker = null;
          link.loseNextReply = true;
        }
        return false;
      });
      this.#forward(link, 'server', upstream, client, (chunk) => {
        if (link.loseNextReply) {
          this.#repliesLost++;
          this.#reset(link);
          return true;
        }
        if (!this.#holding) return false;
        link.held.push(chunk);
        this.#heldBytes += chunk.length;
        for (const waiter of [...this.#heldWaiters]) {
          if (this.#heldBytes < waiter.bytes) continue;
          this.#heldWaiters.delete(waiter);
          waiter.resolve();
        }
        return true;
      });
      if (!this.#blackholed) {
        client.resume();
        upstream.resume();
      }
    });
  }

  /** `keep(chunk)`: true when the proxy keeps the chunk instead of writing it on. */
  #forward(link: Link, side: 'client' | 'server', from: net.Socket, to: net.Socket, keep: (chunk: Buffer) => boolean): void {
    from.on('data', (chunk: Buffer) => {
      if (keep(chunk)) return;
      this.#observe?.(chunk, side, link.id);
      if (!to.write(chunk)) from.pause();
    });
    to.on('drain', () => {
      if (!this.#blackholed) from.resume();
    });
    // half-close travels too (allowHalfOpen is off, so the side that got
    // the FIN closes once it has written what it had)
    from.on('end', () => to.end());
  }

  #reset(link: Link): void {
    this.#links.delete(link);
    for (const chunk of link.held.splice(0)) this.#heldBytes -= chunk.length;
    if (!link.client.destroyed) link.client.resetAndDestroy();
    if (link.upstream !== null && !link.upstream.destroyed) link.upstream.resetAndDestroy();
  }

  #onClose(link: Link, side: net.Socket): void {
    if (!this.#links.has(link)) return;
    const other = side === link.client ? link.upstream : link.client;
    // A clean close of one side ends the other once its writes are flushed.
    if (other === null || other.destroyed) this.#links.delete(link);
    else other.end();
    if (link.client.destroyed && (link.upstream === null || link.upstream.destroyed)) this.#links.delete(link);
  }
}
