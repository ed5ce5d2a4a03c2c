// Shared by the ZooKeeper integration tests: clients that are closed after
// each test, a per-file namespace, and a wait that polls without timing.
import { ZooKeeperError } from '../../src/errors.js';
import { ZooKeeperClient, type ConnectOptions } from '../../src/zookeeper/client.js';
import { uniqueZnodePath } from '../helpers/unique.js';

export class ClientPool {
  readonly #clients: ZooKeeperClient[] = [];

  async connect(options: ConnectOptions): Promise<ZooKeeperClient> {
    const zk = await ZooKeeperClient.connect(options);
    this.#clients.push(zk);
    return zk;
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.#clients.splice(0).map((zk) => zk.close()));
  }
}

/** Create `path` and its missing ancestors (persistent), tolerating NODEEXISTS. */
export async function mkdirp(zk: ZooKeeperClient, path: string): Promise<void> {
  const parts = path.split('/').filter(Boolean);
  let at = '';
  for (const part of parts) {
    at += `/${part}`;
    try {
      await zk.create(at);
    } catch (error) {
      if (!(error instanceof ZooKeeperError && error.code === 'ZK_NODEEXISTS')) throw error;
    }
  }
}

/** Delete `path` and everything under it (test cleanup), ignoring what is already gone. */
export async function rmrf(zk: ZooKeeperClient, path: string): Promise<void> {
  let children: string[];
  try {
    children = await zk.getChildren(path);
  } catch (error) {
    if (error instanceof ZooKeeperError && (error.code === 'ZK_NONODE' || error.code === 'ZK_NOAUTH')) return;
    throw error;
  }
  await Promise.all(children.map((c) => rmrf(zk, `${path}/${c}`)));
  try {
    await zk.delete(path);
  } catch (error) {
    if (!(error instanceof ZooKeeperError && (error.code === 'ZK_NONODE' || error.code === 'ZK_NOTEMPTY'))) throw error;
  }
}

/** A fresh namespace for one test file, e.g. /fencekeeper-test/zkclient_3fa9... */
export function namespace(prefix: string): string {
  return uniqueZnodePath(prefix);
}

/** Resolve when `predicate` holds; reject with `what` after `limitMs` (a hang guard, not a timing assertion). */
export async function until(predicate: () => boolean | Promise<boolean>, what: string, limitMs = 30_000): Promise<void> {
  const start = Date.now();
  for (;;) {
    if (await predicate()) return;
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A promise for the next call of a watcher, and the count of its calls. */
export function watcherSpy<T>(): { fn: (event: T) => void; events: T[]; next: Promise<T> } {
  const events: T[] = [];
  let resolve!: (e: T) => void;
  const next = new Promise<T>((r) => (resolve = r));
  return {
    fn: (event: T) => {
      events.push(event);
      resolve(event);
    },
    events,
    next,
  };
}
