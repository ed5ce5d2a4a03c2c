// One test file's use of the standalone ZooKeeper: its address, an admin
// client connected before the file's tests and closed after them, and a
// pool of clients closed after each test.
import { afterAll, afterEach, beforeAll } from 'vitest';
import { ZooKeeperClient } from '../../src/zookeeper/client.js';
import { testServers } from './servers.js';
import { ClientPool } from './zookeeper.js';

export class StandaloneFile {
  readonly server = testServers().zkStandalone;
  readonly clients = new ClientPool();
  #admin: ZooKeeperClient | undefined;

  /** Registers the file's hooks: call once, at the top of a test file. */
  constructor(sessionTimeoutMs = 4000) {
    beforeAll(async () => {
      this.#admin = await ZooKeeperClient.connect({ connectString: this.server, sessionTimeoutMs });
    });
    afterEach(() => this.clients.closeAll());
    afterAll(() => this.#admin?.close());
  }

  /** The file's admin client (from its beforeAll on). */
  get admin(): ZooKeeperClient {
    if (this.#admin === undefined) throw new Error('StandaloneFile.admin is connected in beforeAll: read it inside a test or hook');
    return this.#admin;
  }
}
