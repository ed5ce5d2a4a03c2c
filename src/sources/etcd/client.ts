import { ProtocolError } from '../../index.js';

// The part of the `etcd3` client this entry calls, as structural interfaces:
// an `Etcd3` instance fits without this package importing etcd3 (an optional
// peer dependency of fencekeeper/etcd only). The raw gRPC services carry
// revisions and lease ids as decimal strings; they are read here as bigint,
// never through Number (revisions and lease ids pass 2^53).

/** What every etcd response starts with. */
export interface EtcdResponseHeader {
  readonly revision: string;
  readonly member_id?: string;
  /** The cluster's id, fixed at its bootstrap (decimal uint64): the source identity of sequencers. */
  readonly cluster_id?: string;
}

export interface EtcdKeyValue {
  readonly key: Buffer;
  readonly value: Buffer;
  readonly create_revision: string;
  readonly mod_revision: string;
  readonly lease: string;
}

export interface EtcdRangeRequest {
  key: Buffer;
  range_end?: Buffer;
  limit?: number;
  sort_order?: 'None' | 'Ascend' | 'Descend';
  sort_target?: 'Key' | 'Version' | 'Create' | 'Mod' | 'Value';
  max_create_revision?: string;
  keys_only?: boolean;
  serializable?: boolean;
}

export interface EtcdRangeResponse {
  readonly header: EtcdResponseHeader;
  readonly kvs: readonly EtcdKeyValue[];
}

export interface EtcdPutRequest {
  key: Buffer;
  value: Buffer;
  lease?: string;
}

export interface EtcdDeleteRequest {
  key: Buffer;
  range_end?: Buffer;
}

export interface EtcdCompare {
  key: Buffer;
  range_end?: Buffer;
  target: 'Version' | 'Create' | 'Mod' | 'Value' | 'Lease';
  result: 'Equal' | 'Greater' | 'Less' | 'NotEqual';
  create_revision?: string;
  mod_revision?: string;
}

/** One operation of an etcd txn, as ifHeld / ifLeader take it: a put, a delete range, a range or a nested txn. */
export interface EtcdRequestOp {
  request_range?: EtcdRangeRequest;
  request_put?: EtcdPutRequest;
  request_delete_range?: EtcdDeleteRequest;
  /** A transaction within a transaction's branch (etcd 3.3 and later). */
  request_txn?: EtcdTxnRequest;
}

export interface EtcdTxnRequest {
  compare: EtcdCompare[];
  success: EtcdRequestOp[];
  failure: EtcdRequestOp[];
}

/** The answer of an etcd txn: whether its compares succeeded, and each operation's response. */
export interface EtcdTxnResponse {
  readonly header: EtcdResponseHeader;
  readonly succeeded: boolean;
  readonly responses: readonly { readonly response_range?: EtcdRangeResponse; readonly response_txn?: Omit<EtcdTxnResponse, 'header'> }[];
}

/** etcd3's KVClient (client.kv). */
export interface EtcdKV {
  range(request: EtcdRangeRequest): Promise<EtcdRangeResponse>;
  txn(request: EtcdTxnRequest): Promise<EtcdTxnResponse>;
  deleteRange(request: EtcdDeleteRequest): Promise<{ readonly header: EtcdResponseHeader; readonly deleted: string }>;
}

/** A bidirectional gRPC stream as etcd3 hands it out. */
export interface EtcdDuplexStream<Request, Response> {
  write(item: Request): void;
  end(): void;
  cancel(): void;
  on(event: 'data', listener: (item: Response) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

export interface EtcdKeepAliveResponse {
  readonly ID: string;
  readonly TTL: string;
}

/** etcd3's LeaseClient (client.leaseClient): the raw lease service. */
export interface EtcdLeaseService {
  leaseGrant(request: { TTL: number }): Promise<{ readonly ID: string; readonly TTL: string; readonly error?: string }>;
  leaseRevoke(request: { ID: string }): Promise<unknown>;
  leaseKeepAlive(): Promise<EtcdDuplexStream<{ ID: string }, EtcdKeepAliveResponse>>;
}

/** etcd3's Watcher: events on the keys it watches, resumed by etcd3 across reconnects. */
export interface EtcdWatcher {
  on(event: 'delete', listener: (kv: EtcdKeyValue) => void): unknown;
  on(event: 'put', listener: (kv: EtcdKeyValue) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'disconnected', listener: (error: Error) => void): unknown;
  on(event: 'connected', listener: (response: unknown) => void): unknown;
  cancel(): Promise<void>;
}

/** etcd3's WatchBuilder (client.watch()). */
export interface EtcdWatchBuilder {
  key(key: string | Buffer): EtcdWatchBuilder;
  prefix(prefix: string | Buffer): EtcdWatchBuilder;
  startRevision(revision: string): EtcdWatchBuilder;
  watcher(): EtcdWatcher;
}

/**
 * An etcd3 `Etcd3` client (not a namespace: its raw services would bypass a
 * namespace's prefix while its watches apply it).
 */
export interface EtcdClient {
  readonly kv: EtcdKV;
  readonly leaseClient: EtcdLeaseService;
  /** etcd3's client.watch(): the watch builder the observers use. */
  watch(): EtcdWatchBuilder;
}

const DECIMAL = /^-?[0-9]+$/;

/** A revision or lease id as etcd sends it (a decimal string), as a bigint. */
export function int64(text: string | undefined, what: string): bigint {
  if (typeof text !== 'string' || !DECIMAL.test(text)) throw new ProtocolError(`etcd sent a malformed ${what}: ${String(text)}`);
  return BigInt(text);
}
