// The address of "the Redis primary" in the fault run on the single-instance
// source: what a virtual IP or a Sentinel-aware client gives an application.
// Every worker's own proxy (the one the nemesis cuts) leads here, and this
// forwards each new connection to whichever node is the primary now. The
// nemesis moves it after promoting the replica; the workers' clients just
// reconnect, as they would to a moved virtual IP, and never learn that a
// failover happened.
import net from 'node:net';

export class FloatingAddress {
  readonly #server: net.Server;
  readonly #links = new Set<{ client: net.Socket; upstream: net.Socket }>();
  #target: { host: string; port: number };

  private constructor(server: net.Server, target: { host: string; port: number }) {
    this.#server = server;
    this.#target = target;
    server.on('connection', (client) => this.#accept(client));
  }

  static async start(hostPort: string): Promise<FloatingAddress> {
    const floating = new FloatingAddress(net.createServer({ noDelay: true }), parse(hostPort));
    await new Promise<void>((resolve, reject) => {
      floating.#server.once('error', reject);
      floating.#server.listen(0, '127.0.0.1', () => resolve());
    });
    return floating;
  }

  /** '127.0.0.1:port' to connect to. */
  get address(): string {
    const address = this.#server.address();
    if (address === null || typeof address === 'string') throw new Error('the floating address is not listening');
    return `127.0.0.1:${address.port}`;
  }

  get target(): string {
    return `${this.#target.host}:${this.#target.port}`;
  }

  /** From now on connect to `hostPort`; connections to the old target are reset (it is dead or demoted). */
  moveTo(hostPort: string): void {
    this.#target = parse(hostPort);
    for (const link of [...this.#links]) {
      link.client.resetAndDestroy();
      link.upstream.resetAndDestroy();
    }
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const link of [...this.#links]) {
      link.client.resetAndDestroy();
      link.upstream.resetAndDestroy();
    }
    await closed;
  }

  #accept(client: net.Socket): void {
    const upstream = net.connect({ ...this.#target, noDelay: true });
    const link = { client, upstream };
    this.#links.add(link);
    const end = (): void => {
      this.#links.delete(link);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

function parse(hostPort: string): { host: string; port: number } {
  const at = hostPort.lastIndexOf(':');
  const port = Number(hostPort.slice(at + 1));
  if (at <= 0 || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`expected 'host:port', got ${JSON.stringify(hostPort)}`);
  return { host: hostPort.slice(0, at), port };
}
