// One test file's use of the standalone ZooKeeper: its address, an admin
// client connected before the file's tests and closed after them, a pool of
// clients closed after each test, and TCP proxies to the server closed after
// each test (before the clients).
import { afterAll, afterEach, beforeAll } from 'vitest';
import { ZooKeeperClient } from '../../src/sources/zookeeper/client.js';
import { testServers } from './servers.js';
import { TcpProxy } from './tcp-proxy.js';
import { ClientPool } from './zookeeper.js';

export class StandaloneFile {
  readonly server = testServers().zkStandalone;
  readonly clients = new ClientPool();
  #admin: ZooKeeperClient | undefined;
  readonly #proxies: TcpProxy[] = [];

  /** Registers the file's hooks: call once, at the top of a test file. */
  constructor(sessionTimeoutMs = 4000) {
    beforeAll(async () => {
      this.#admin = await ZooKeeperClient.connect({ connectString: this.server, sessionTimeoutMs });
    });
    afterEach(() => this.clients.closeAll());
    // registered after the clients' hook, so it runs before it
    afterEach(async () => {
      for (const proxy of this.#proxies.splice(0)) await proxy.close();
    });
    afterAll(() => this.#admin?.close());
  }

  /** A TCP proxy to the server for one test: closed when the test ends. */
  async proxy(): Promise<TcpProxy> {
    const proxy = await TcpProxy.to(this.server);
    this.#proxies.push(proxy);
    return proxy;
  }

  /** A client (of the pool) whose connection runs through a proxy of its own (proxy()). */
  async proxied(sessionTimeoutMs = 4000): Promise<{ proxy: TcpProxy; zk: ZooKeeperClient }> {
    const proxy = await this.proxy();
    return { proxy, zk: await this.clients.connect(proxy.address, sessionTimeoutMs) };
  }

  /** The file's admin client (from its beforeAll on). */
  get admin(): ZooKeeperClient {
    if (this.#admin === undefined) throw new Error('StandaloneFile.admin is connected in beforeAll: read it inside a test or hook');
    return this.#admin;
  }
}
