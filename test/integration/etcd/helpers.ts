// etcd clients for the etcd source's tests: a pool closed after each test
// (their sessions first, so no lease outlives its test), a client that
// counts what the source asks of etcd and what etcd's watches deliver to it,
// raw reads of a queue behind the source's back, and the cluster's fault
// turn for a file that breaks it (etcdCtl drives test/servers/etcd.sh).
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { EtcdClient, EtcdDuplexStream, EtcdRangeRequest, EtcdTxnResponse, EtcdWatchRequest, EtcdWatchResponse } from '../../../src/sources/etcd/client.js';
import { etcdSession } from '../../../src/sources/etcd/index.js';
import { prefixEnd, queuePrefix, LOCKS_ROOT } from '../../../src/sources/etcd/queue.js';
import { etcdCtl } from '../../compare/control.js';
import { healedTurn, scriptTurn } from '../../helpers/fault-turn.js';
import { testServers } from '../../helpers/servers.js';

export { etcdCtl };

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
  /** Watch creates written to the client's Watch stream (again after a reconnect). */
  watchesMade: number;
  /** Creation replies etcd sent for them (and again after a reconnect). */
  watchesCreated: number;
  /** Delete events etcd sent to this client's watches. */
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
  // What goes over the client's Watch stream (../../../src/sources/etcd/watches.ts): the creates it
  // writes, the creations etcd answers, the delete events etcd sends. Seen before the source sees them.
  const counted = (stream: EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>): EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse> => {
    const write = stream.write.bind(stream);
    stream.write = (item) => {
      if (item.create_request !== undefined) counts.watchesMade++;
      return write(item);
    };
    stream.on('data', (response) => {
      if (response.created && !response.canceled) counts.watchesCreated++;
      for (const event of response.events ?? []) if (event.type === 'Delete') counts.deletesDelivered++;
    });
    return stream;
  };
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
    watchClient: { watch: () => etcd.watchClient.watch().then(counted) },
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

/** What went over a client's Watch stream(s), in order. */
export interface WatchLog {
  /** Create requests written: the id each named and its start revision (null: from the present). */
  readonly creates: { readonly id: number; readonly from: bigint | null; readonly key: string }[];
  /** Cancel requests written, by id. */
  readonly cancels: number[];
  /** Replies etcd sent, as they came. */
  readonly replies: { readonly id: number; readonly created: boolean; readonly canceled: boolean; readonly compactRevision: bigint; readonly member: string; readonly deleted: string[] }[];
  /** Watch streams opened. */
  streams: number;
}

/** `etcd` as an EtcdClient whose Watch streams are logged (requests written, replies received), seen before the source sees them. */
export function observedWatches(etcd: Etcd3): { client: EtcdClient; log: WatchLog } {
  const log: WatchLog = { creates: [], cancels: [], replies: [], streams: 0 };
  const client: EtcdClient = {
    kv: etcd.kv,
    leaseClient: etcd.leaseClient,
    watchClient: {
      watch: () =>
        etcd.watchClient.watch().then((stream) => {
          log.streams++;
          const write = stream.write.bind(stream);
          (stream as EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>).write = (item) => {
            const create = item.create_request;
            if (create !== undefined) log.creates.push({ id: create.watch_id ?? 0, from: create.start_revision === undefined ? null : BigInt(create.start_revision), key: create.key.toString() });
            if (item.cancel_request !== undefined) log.cancels.push(item.cancel_request.watch_id);
            return write(item as never);
          };
          stream.on('data', (r) =>
            log.replies.push({
              id: Number(r.watch_id),
              created: r.created,
              canceled: r.canceled,
              compactRevision: BigInt(r.compact_revision || '0'),
              member: r.header.member_id,
              deleted: r.events.filter((e) => (e.type as string) === 'Delete').map((e) => e.kv.key.toString()),
            }),
          );
          return stream as unknown as EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>;
        }),
    },
  };
  return { client, log };
}

/**
 * The etcd cluster's fault turn for the whole of the calling file: taken in
 * its beforeAll once the cluster is healthy (waiting up to 10 minutes for
 * the turn), given back healed and healthy in its afterAll.
 */
export function holdEtcdFaultsForFile(): void {
  let giveBack: (() => Promise<void>) | undefined;
  beforeAll(async () => {
    giveBack = await healedTurn(scriptTurn(etcdCtl, 600), () => etcdCtl('wait-healthy', '60'), async () => {
      await etcdCtl('heal');
      await etcdCtl('wait-healthy', '60');
    });
  }, 700_000);
  afterAll(() => giveBack?.(), 120_000);
}
