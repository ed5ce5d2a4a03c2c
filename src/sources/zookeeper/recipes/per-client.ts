// State the recipes keep per ZooKeeper client (the session's holdings, the
// holders' node watches, the waits a state change ends): one object for each
// client, made on its first use, kept in a WeakMap so that a client nobody
// references any more takes its object with it.
import type { ZooKeeperClient } from '../client.js';

/** `of(zk)`: the object `make(zk)` made for zk on the first call, the same one on every later call (one lookup). */
export function perClient<T extends object>(make: (zk: ZooKeeperClient) => T): (zk: ZooKeeperClient) => T {
  const made = new WeakMap<ZooKeeperClient, T>();
  const remember = (zk: ZooKeeperClient): T => {
    const value = make(zk);
    made.set(zk, value);
    return value;
  };
  return (zk) => made.get(zk) ?? remember(zk);
}
