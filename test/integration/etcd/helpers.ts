// etcd clients for the etcd source's tests: a pool closed after each test
// (their sessions first, so no lease outlives its test), a client that
// counts what the source asks of etcd and what etcd's watches deliver to it,
// and raw reads of a queue behind the source's back.
import { Etcd3 } from 'etcd3';
import { afterEach } from 'vitest';
import type { EtcdClient, EtcdKeyValue, EtcdRangeRequest, EtcdTxnResponse, EtcdWatchBuilder, EtcdWatcher } from '../../../src/sources/etcd/client.js';
import { etcdSession } from '../../../src/sources/etcd/index.js';
import { prefixEnd, queuePrefix, LOCKS_ROOT } from '../../../src/sources/etcd/queue.js';
import { WATCH_ANCHOR_KEY } from '../../../src/sources/etcd/watch-anchor.js';
import { testServers } from '../../helpers/servers.js';

/** host:port list of the single node, as etcd3 takes it. */
export function singleHosts(): string[] {
  return [new URL(testServers().etcd).host];
}

export function clusterHosts(): string[] {
  return testServers().etcdCluster.map((url) => new URL(url).host);
}

/** Clients made in a test, closed after it (sessions revoked first). */
export class EtcdPool {
  readonly #clients = new Set<Etcd3>();

  constructor() {
    afterEach(() => this.closeAll());
  }

  client(hosts: string[] = singleHosts()): Etcd3 {
    const etcd = new Etcd3({ hosts });
    this.#clients.add(etcd);
    return etcd;
  }

  many(n: number, hosts?: string[]): Etcd3[] {
    return Array.from({ length: n }, () => this.client(hosts));
  }

  async closeAll(): Promise<void> {
    const clients = [...this.#clients];
    this.#clients.clear();
    await Promise.all(clients.map((etcd) => etcdSession(etcd).close().catch(() => undefined)));
    for (const etcd of clients) etcd.close();
  }
}

export interface Counts {
  txn: number;
  range: number;
  deleteRange: number;
  watchesMade: number;
  /** Creation replies etcd sent for them (and again after a reconnect). */
  watchesCreated: number;
  /** Delete events etcd delivered to this client's watches. */
  deletesDelivered: number;
}

/**
 * `etcd` as the source sees it, counting: requests, watches made, and delete
 * events delivered. `afterTxn` lets a test lose a reply; `beforeRange` change
 * the store just before a read.
 */
export function counting(
  etcd: EtcdClient,
  hooks: { afterTxn?: (attempt: number, response: EtcdTxnResponse) => void | Promise<void>; beforeRange?: (request: EtcdRangeRequest) => Promise<void> } = {},
): { client: EtcdClient; counts: Counts } {
  const counts: Counts = { txn: 0, range: 0, deleteRange: 0, watchesMade: 0, watchesCreated: 0, deletesDelivered: 0 };
  // The client's anchor watch (../../../src/sources/etcd/watch-anchor.ts) is no wait's: neither counted nor wrapped.
  const wrapBuilder = (builder: EtcdWatchBuilder, key?: string | Buffer): EtcdWatchBuilder => ({
    key: (k) => wrapBuilder(builder.key(k), k),
    prefix: (p) => wrapBuilder(builder.prefix(p)),
    startRevision: (r) => wrapBuilder(builder.startRevision(r), key),
    watcher: () => {
      if (key !== undefined && key.toString() === WATCH_ANCHOR_KEY) return builder.watcher();
      counts.watchesMade++;
      const watcher = builder.watcher();
      // Counted before any listener of the source's runs (it registers after this).
      watcher.on('connected', () => void counts.watchesCreated++);
      const wrapped: EtcdWatcher = {
        on: ((event: string, listener: (...args: unknown[]) => void) => {
          if (event === 'delete') {
            return watcher.on('delete', (kv: EtcdKeyValue) => {
              counts.deletesDelivered++;
              listener(kv);
            });
          }
          return (watcher.on as (e: string, l: (...args: unknown[]) => void) => unknown)(event, listener);
        }) as EtcdWatcher['on'],
        cancel: () => watcher.cancel(),
      };
      return wrapped;
    },
  });
  const client: EtcdClient = {
    kv: {
      range: async (r) => {
        counts.range++;
        await hooks.beforeRange?.(r);
        return etcd.kv.range(r);
      },
      txn: async (r) => {
        const attempt = ++counts.txn;
        const response = await etcd.kv.txn(r);
        await hooks.afterTxn?.(attempt, response);
        return response;
      },
      deleteRange: (r) => {
        counts.deleteRange++;
        return etcd.kv.deleteRange(r);
      },
    },
    leaseClient: etcd.leaseClient,
    watch: () => wrapBuilder(etcd.watch()),
  };
  return { client, counts };
}

/** An error as etcd3 throws it for a request whose reply did not come back. */
export function lostReply(): Error {
  const error = new Error('14 UNAVAILABLE: the reply was lost (test)');
  Object.defineProperty(error, Symbol('RecoverableError'), { value: true, enumerable: false });
  return error;
}

/** Every key in a lock's queue, read directly (create revision order). */
export async function queueKeys(etcd: Etcd3, name: string): Promise<{ key: string; createRevision: bigint; lease: bigint }[]> {
  const prefix = queuePrefix(LOCKS_ROOT, name);
  const response = await etcd.kv.range({ key: Buffer.from(prefix), range_end: prefixEnd(prefix), sort_target: 'Create', sort_order: 'Ascend' });
  return response.kvs.map((kv) => ({ key: kv.key.toString(), createRevision: BigInt(kv.create_revision), lease: BigInt(kv.lease) }));
}
