// Shared by the ZooKeeper integration tests: clients that are closed after
// each test, a per-file namespace, a wait that polls without timing, and a
// count of the requests on a client's socket.
import { ZooKeeperError } from '../../../src/errors.js';
import { ZooKeeperClient, type ConnectOptions, type Connector } from '../../../src/sources/zookeeper/client.js';
import { connectTcp } from '../../../src/sources/zookeeper/connection.js';
import { FrameParser } from '../../../src/sources/zookeeper/frame-parser.js';
import { afterAll, beforeAll } from 'vitest';
import { uniqueZnodePath } from '../../helpers/unique.js';
import type { StandaloneFile } from '../../helpers/zookeeper-file.js';

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

/**
 * A fresh namespace for the test file of `file`, created by its admin client
 * before the file's tests and removed with everything under it after them.
 */
export function fileNamespace(file: StandaloneFile, prefix: string): string {
  const root = namespace(prefix);
  beforeAll(() => mkdirp(file.admin, root));
  afterAll(() => rmrf(file.admin, root));
  return root;
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

/**
 * A connector (plain TCP) that watches the bytes on the client's socket,
 * per connection: `writes` counts socket writes, `sent` the request frames
 * written, `answered` the replies read to them (the handshake, pings, auth,
 * setWatches and notifications use reserved xids and are not counted).
 * sent - answered is what the client has in flight, as the wire sees it.
 */
export class RequestCounter {
  writes = 0;
  sent = 0;
  answered = 0;

  get inFlight(): number {
    return this.sent - this.answered;
  }

  readonly connector: Connector = async (address, options) => {
    const socket = await connectTcp(address, options);
    this.writes = this.sent = this.answered = 0;
    const count = (field: 'sent' | 'answered'): ((chunk: Buffer) => void) => {
      const parser = new FrameParser(16 * 1024 * 1024);
      let first = true; // ConnectRequest / ConnectResponse: no xid
      return (chunk) =>
        parser.parse(chunk, (frame) => {
          if (first) first = false;
          else if (frame.readInt32BE(0) > 0) this[field]++;
        });
    };
    const countSent = count('sent');
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((chunk: unknown, ...rest: unknown[]) => {
      this.writes++;
      if (Buffer.isBuffer(chunk)) countSent(chunk);
      return write(chunk, ...rest);
    }) as typeof socket.write;
    socket.on('data', count('answered'));
    return socket;
  };
}
