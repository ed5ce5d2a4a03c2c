// node-zookeeper-client 1.1.3 and the textbook lock recipe on it, for the lock benchmarks:
// create ephemeral-sequential, getChildren, exists(predecessor, watch) when not first, remove.
import { createRequire } from 'node:module';

export interface NzcClient {
  connect(): void;
  close(): void;
  once(event: 'connected', listener: () => void): void;
  create(path: string, data: Buffer | null, mode: number, cb: (err: Error | null, path: string) => void): void;
  create(path: string, cb: (err: (Error & { getCode?: () => number }) | null, path: string) => void): void;
  getChildren(path: string, cb: (err: Error | null, children: string[]) => void): void;
  exists(path: string, watcher: (event: unknown) => void, cb: (err: Error | null, stat: unknown) => void): void;
  remove(path: string, version: number, cb: (err: Error | null) => void): void;
}
interface NzcModule {
  createClient(connectString: string, options: { sessionTimeout: number }): NzcClient;
  CreateMode: { EPHEMERAL_SEQUENTIAL: number };
  Exception: { NODE_EXISTS: number };
}
export const nzc = createRequire(import.meta.url)('node-zookeeper-client') as NzcModule;

export async function nzcConnect(connectString: string): Promise<NzcClient> {
  const client = nzc.createClient(connectString, { sessionTimeout: 10_000 });
  await new Promise<void>((resolve) => {
    client.once('connected', resolve);
    client.connect();
  });
  return client;
}

/** A callback API as a promise. */
export const call = <T>(fn: (cb: (err: Error | null, value: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))));

const seqOf = (child: string): number => Number(child.slice(child.lastIndexOf('-') + 1));

/** The textbook recipe: returns the release function. */
export async function nzcAcquire(client: NzcClient, parent: string): Promise<() => Promise<void>> {
  const path = await call<string>((cb) => client.create(`${parent}/lock-`, null, nzc.CreateMode.EPHEMERAL_SEQUENTIAL, cb));
  const mine = path.slice(parent.length + 1);
  for (;;) {
    const children = (await call<string[]>((cb) => client.getChildren(parent, cb))).sort((a, b) => seqOf(a) - seqOf(b));
    const index = children.indexOf(mine);
    if (index === 0) break;
    const predecessor = children[index - 1] as string;
    let fired!: () => void;
    const gone = new Promise<void>((r) => (fired = r));
    const stat = await call<unknown>((cb) => client.exists(`${parent}/${predecessor}`, () => fired(), cb));
    if (stat) await gone;
  }
  return () => call<undefined>((cb) => client.remove(path, -1, (err) => cb(err, undefined)));
}
