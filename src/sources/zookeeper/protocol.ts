/**
 * ZooKeeper's wire vocabulary: opcodes, reserved xids, error numbers, create
 * flags, event types, and the record layouts of
 * zookeeper-jute/src/main/resources/zookeeper.jute that this client uses.
 * Everything here is data and pure encode/decode; no I/O.
 */
import type { ZooKeeperErrorCode } from '../../errors.js';
import type { JuteReader } from './jute-reader.js';
import type { JuteWriter } from './jute-writer.js';

/** ZooDefs.OpCode */
export const OpCode = {
  notification: 0,
  create: 1,
  delete: 2,
  exists: 3,
  getData: 4,
  setData: 5,
  getACL: 6,
  setACL: 7,
  getChildren: 8,
  sync: 9,
  ping: 11,
  getChildren2: 12,
  check: 13,
  multi: 14,
  create2: 15,
  createContainer: 19,
  createTTL: 21,
  auth: 100,
  setWatches: 101,
  getEphemerals: 103,
  closeSession: -11,
  error: -1,
} as const;

/** Reserved xids (ClientCnxn): replies with these are not matched to a request queue entry by number. */
export const Xid = {
  notification: -1,
  ping: -2,
  auth: -4,
  setWatches: -8,
} as const;

/** KeeperException.Code numbers -> our stable string codes. */
const ERROR_CODES: ReadonlyMap<number, ZooKeeperErrorCode> = new Map([
  [-1, 'ZK_SYSTEMERROR'], [-2, 'ZK_RUNTIMEINCONSISTENCY'], [-3, 'ZK_DATAINCONSISTENCY'],
  [-4, 'ZK_CONNECTIONLOSS'], [-5, 'ZK_MARSHALLINGERROR'], [-6, 'ZK_UNIMPLEMENTED'],
  [-7, 'ZK_OPERATIONTIMEOUT'], [-8, 'ZK_BADARGUMENTS'], [-12, 'ZK_UNKNOWNSESSION'],
  [-13, 'ZK_NEWCONFIGNOQUORUM'], [-14, 'ZK_RECONFIGINPROGRESS'], [-100, 'ZK_APIERROR'],
  [-101, 'ZK_NONODE'], [-102, 'ZK_NOAUTH'], [-103, 'ZK_BADVERSION'],
  [-108, 'ZK_NOCHILDRENFOREPHEMERALS'], [-110, 'ZK_NODEEXISTS'], [-111, 'ZK_NOTEMPTY'],
  [-112, 'ZK_SESSIONEXPIRED'], [-113, 'ZK_INVALIDCALLBACK'], [-114, 'ZK_INVALIDACL'],
  [-115, 'ZK_AUTHFAILED'], [-118, 'ZK_SESSIONMOVED'], [-119, 'ZK_NOTREADONLY'],
  [-120, 'ZK_EPHEMERALONLOCALSESSION'], [-121, 'ZK_NOWATCHER'], [-122, 'ZK_REQUESTTIMEOUT'],
  [-123, 'ZK_RECONFIGDISABLED'], [-124, 'ZK_SESSIONCLOSEDREQUIRESASLAUTH'],
  [-125, 'ZK_QUOTAEXCEEDED'], [-127, 'ZK_THROTTLEDOP'],
]);

export const Err = {
  ok: 0,
  runtimeInconsistency: -2,
  noNode: -101,
  nodeExists: -110,
  sessionExpired: -112,
  authFailed: -115,
} as const;

export function errorCodeName(zkCode: number): ZooKeeperErrorCode {
  return ERROR_CODES.get(zkCode) ?? 'ZK_UNKNOWN';
}

/** How a znode is created: persistent or ephemeral, sequential or not, a container, or persistent with a TTL. */
export type CreateMode =
  | 'persistent'
  | 'persistent_sequential'
  | 'ephemeral'
  | 'ephemeral_sequential'
  | 'container'
  | 'persistent_with_ttl'
  | 'persistent_sequential_with_ttl';

/** CreateMode flag values (CreateMode.java). */
export const CREATE_FLAGS: Readonly<Record<CreateMode, number>> = {
  persistent: 0,
  ephemeral: 1,
  persistent_sequential: 2,
  ephemeral_sequential: 3,
  container: 4,
  persistent_with_ttl: 5,
  persistent_sequential_with_ttl: 6,
};

/** EphemeralType.TTL's bound: the TTL shares the ephemeralOwner long with a 0xFF marker byte. */
export const MAX_TTL_MS = 0xff_ffff_ffff;

/** Watcher.Event.EventType */
export const EventType = {
  none: -1,
  nodeCreated: 1,
  nodeDeleted: 2,
  nodeDataChanged: 3,
  nodeChildrenChanged: 4,
} as const;

/** ZooDefs.Perms */
export const Perms = {
  READ: 1,
  WRITE: 2,
  CREATE: 4,
  DELETE: 8,
  ADMIN: 16,
  ALL: 31,
} as const;

/** An ACL identity: a scheme ('world', 'auth', 'digest', 'ip') and its id. */
export interface Id { readonly scheme: string; readonly id: string }
/** One ACL entry of a znode: the permissions (Perms bits) granted to an identity. */
export interface ACL { readonly perms: number; readonly id: Id }

/** Anyone may do anything (ZooDefs.Ids.OPEN_ACL_UNSAFE). */
export const OPEN_ACL_UNSAFE: readonly ACL[] = Object.freeze([{ perms: Perms.ALL, id: { scheme: 'world', id: 'anyone' } }]);
/** Only the identities authenticated on the creating session (ZooDefs.Ids.CREATOR_ALL_ACL). */
export const CREATOR_ALL_ACL: readonly ACL[] = Object.freeze([{ perms: Perms.ALL, id: { scheme: 'auth', id: '' } }]);
/** Anyone may read (ZooDefs.Ids.READ_ACL_UNSAFE). */
export const READ_ACL_UNSAFE: readonly ACL[] = Object.freeze([{ perms: Perms.READ, id: { scheme: 'world', id: 'anyone' } }]);

/** data.Stat, with the two timestamps as milliseconds since the epoch. */
export interface Stat {
  readonly czxid: bigint;
  readonly mzxid: bigint;
  readonly ctime: number;
  readonly mtime: number;
  readonly version: number;
  readonly cversion: number;
  readonly aversion: number;
  readonly ephemeralOwner: bigint;
  readonly dataLength: number;
  readonly numChildren: number;
  readonly pzxid: bigint;
}

export function readStat(r: JuteReader): Stat {
  return {
    czxid: r.long(),
    mzxid: r.long(),
    ctime: Number(r.long()),
    mtime: Number(r.long()),
    version: r.int(),
    cversion: r.int(),
    aversion: r.int(),
    ephemeralOwner: r.long(),
    dataLength: r.int(),
    numChildren: r.int(),
    pzxid: r.long(),
  };
}

export function writeAcl(w: JuteWriter, acl: ACL): void {
  w.int(acl.perms).ustring(acl.id.scheme).ustring(acl.id.id);
}

export function readAcl(r: JuteReader): ACL {
  return { perms: r.int(), id: { scheme: r.ustring(), id: r.ustring() } };
}

/** proto.ConnectRequest, plus the readOnly flag ClientCnxn appends after it. */
export interface ConnectRequest {
  readonly lastZxidSeen: bigint;
  readonly timeOut: number;
  readonly sessionId: bigint;
  readonly passwd: Uint8Array;
}

export function writeConnectRequest(w: JuteWriter, req: ConnectRequest): void {
  w.int(0).long(req.lastZxidSeen).int(req.timeOut).long(req.sessionId).buffer(req.passwd).bool(false);
}

/** proto.ConnectResponse. timeOut <= 0 means the session we asked to resume has expired. */
export interface ConnectResponse {
  readonly protocolVersion: number;
  readonly timeOut: number;
  readonly sessionId: bigint;
  readonly passwd: Uint8Array;
}

export function readConnectResponse(r: JuteReader): ConnectResponse {
  const res = { protocolVersion: r.int(), timeOut: r.int(), sessionId: r.long(), passwd: r.buffer() };
  // A 3.x server appends a readOnly byte; older ones do not. Either is fine.
  if (r.remaining >= 1) r.bool();
  return res;
}

/** proto.ReplyHeader */
export interface ReplyHeader { readonly xid: number; readonly zxid: bigint; readonly err: number }

export function readReplyHeader(r: JuteReader): ReplyHeader {
  return { xid: r.int(), zxid: r.long(), err: r.int() };
}

/** proto.WatcherEvent */
export interface WatcherEvent { readonly type: number; readonly state: number; readonly path: string }

export function readWatcherEvent(r: JuteReader): WatcherEvent {
  return { type: r.int(), state: r.int(), path: r.ustring() };
}

/** proto.MultiHeader: precedes each op of a multi request and each result of its response. */
export interface MultiHeader { readonly type: number; readonly done: boolean; readonly err: number }

export function writeMultiHeader(w: JuteWriter, h: MultiHeader): void {
  w.int(h.type).bool(h.done).int(h.err);
}

export function readMultiHeader(r: JuteReader): MultiHeader {
  return { type: r.int(), done: r.bool(), err: r.int() };
}

/**
 * ZooKeeper's largest packet (jute.maxbuffer, 0xfffff by default). A server
 * that receives a longer frame closes the connection, failing every request
 * in flight on it, so the client refuses such a request before sending.
 */
export const MAX_PACKET_BYTES = 0xfffff;
