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
  /** grpc-js returns false once its buffer is full (then emits 'drain'); etcd3's declaration says void. */
  write(item: Request): unknown;
  /** Node's stream method, there at run time though etcd3 does not declare it. */
  once?(event: 'drain', listener: () => void): unknown;
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

/** A create request on a Watch stream (etcd's WatchCreateRequest, the fields the source sets). */
export interface EtcdWatchCreateRequest {
  key: Buffer;
  range_end?: Buffer;
  /** The first revision to report (none: the store's next one). */
  start_revision?: string;
  /** Chosen by the client (etcd 3.4 and later): replies and events carry it. */
  watch_id?: number;
}

/** One request on a Watch stream: create a watch, cancel one by its id, or ask for progress (etcd 3.4+: answered at once, watch id -1). */
export interface EtcdWatchRequest {
  create_request?: EtcdWatchCreateRequest;
  cancel_request?: { watch_id: number };
  progress_request?: Record<string, never>;
}

/** A change a watch reports: the key as written, or as deleted (its mod_revision the deletion's). */
export interface EtcdWatchEvent {
  readonly type: 'Put' | 'Delete';
  readonly kv: EtcdKeyValue;
}

/** One reply on a Watch stream (etcd's WatchResponse): a creation, a cancellation, or events of one watch. */
export interface EtcdWatchResponse {
  readonly header: EtcdResponseHeader;
  /** Decimal: the watch it is about (-1: a refused create, or progress for the whole stream). */
  readonly watch_id: string;
  readonly created: boolean;
  readonly canceled: boolean;
  /** Non-zero: the watch's start revision was compacted (the watch is cancelled). */
  readonly compact_revision?: string;
  readonly cancel_reason?: string;
  readonly events?: readonly EtcdWatchEvent[];
}

/** etcd3's WatchClient (client.watchClient): the raw Watch service, one bidirectional stream per call. */
export interface EtcdWatchService {
  watch(): Promise<EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>>;
}

/**
 * An etcd3 `Etcd3` client (not a namespace: its raw services, which the
 * source uses, bypass a namespace's prefix).
 */
export interface EtcdClient {
  readonly kv: EtcdKV;
  readonly leaseClient: EtcdLeaseService;
  /** etcd3's raw Watch service: the source keeps all its watches on one stream of it, resumed from the last revision it saw when the stream breaks. */
  readonly watchClient: EtcdWatchService;
}

const DECIMAL = /^-?[0-9]+$/;

/** A revision or lease id as etcd sends it (a decimal string), as a bigint. */
export function int64(text: string | undefined, what: string): bigint {
  if (typeof text !== 'string' || !DECIMAL.test(text)) throw new ProtocolError(`etcd sent a malformed ${what}: ${String(text)}`);
  return BigInt(text);
}
