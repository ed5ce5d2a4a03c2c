/**
 * Every request this client sends, as a record encoder and a reply decoder
 * (the layouts of zookeeper.jute's proto.*Request / *Response), with the
 * argument checks that let a bad call fail before anything is sent. Pure:
 * no socket, no session state; the chroot is passed in.
 */
import { createHash } from 'node:crypto';
import { InvalidArgumentError, ProtocolError, ZooKeeperError } from '../../errors.js';
import { ChildListing } from './child-listing.js';
import type { JuteReader } from './jute-reader.js';
import type { JuteWriter } from './jute-writer.js';
import { validatePath, type Chroot } from './paths.js';
import {
  CREATE_FLAGS,
  Err,
  MAX_PACKET_BYTES,
  MAX_TTL_MS,
  OPEN_ACL_UNSAFE,
  OpCode,
  errorCodeName,
  readAcl,
  readMultiHeader,
  readStat,
  writeAcl,
  writeMultiHeader,
  type ACL,
  type CreateMode,
  type Stat,
} from './protocol.js';
import type { WatchKind, Watcher } from './watches.js';

/** Credentials sent when the session starts: a scheme ('digest') and its credentials ('user:password'). */
export interface AuthInfo {
  readonly scheme: 'digest';
  /** 'user:password' */
  readonly credentials: string;
}

/** How ZooKeeperClient.create makes a node: its data, ACL and mode. */
export interface CreateOptions {
  readonly mode?: CreateMode;
  readonly acl?: readonly ACL[];
  /** Required for the *_with_ttl modes: the node is removed this long after its last change once it has no children. */
  readonly ttlMs?: number;
}

/** One operation of ZooKeeperClient.multi (create, delete, setData, check). */
export type MultiOp =
  | { readonly op: 'create'; readonly path: string; readonly data?: Uint8Array | string; readonly mode?: CreateMode; readonly acl?: readonly ACL[]; readonly ttlMs?: number }
  | { readonly op: 'delete'; readonly path: string; readonly version?: number }
  | { readonly op: 'setData'; readonly path: string; readonly data: Uint8Array | string; readonly version?: number }
  | { readonly op: 'check'; readonly path: string; readonly version: number };

/** The result of one operation of a successful multi, in order. */
export type MultiResult =
  /** stat: null when the server answers with a plain CreateResponse (ZooKeeper 3.8 does inside multi). */
  | { readonly op: 'create'; readonly path: string; readonly stat: Stat | null }
  | { readonly op: 'delete' }
  | { readonly op: 'setData'; readonly stat: Stat }
  | { readonly op: 'check' };

type Encode = (w: JuteWriter) => void;
type Recover<T> = (err: number) => { readonly value: T } | undefined;
type WatchKindFor = (err: number) => WatchKind | null;

/**
 * One request: its opcode, how to write its record (after the RequestHeader)
 * and how to read the record of its reply. A class, so every request has one
 * object shape and the send and reply paths stay monomorphic.
 */
export class Request<T> {
  constructor(
    readonly opcode: number,
    /** The caller's path (not chrooted), for error messages and watch registration. */
    readonly path: string | undefined,
    readonly encode: Encode,
    /**
     * Reads the reply record when the header says OK. A reply that is well
     * formed but reports a failure (a multi whose operation failed) throws
     * a ZooKeeperError; anything else thrown means the record did not parse.
     */
    readonly decode: (r: JuteReader) => T,
    /** Turns a server error into an answer (exists: NONODE -> null); undefined means reject. */
    readonly recover: Recover<T> | undefined = undefined,
    /** The one-shot watch this request sets, registered once the reply shows the server has set it. */
    readonly watcher: Watcher | undefined = undefined,
    /** Which watch table the reply's error number puts the watch in (null: none was set). */
    readonly watchKind: WatchKindFor | undefined = undefined,
  ) {}
}

const EMPTY = new Uint8Array(0);
const nothing = (): undefined => undefined;
const NOT_FOUND = Object.freeze({ value: null });
const recoverNoNode = (err: number): { readonly value: null } | undefined => (err === Err.noNode ? NOT_FOUND : undefined);
// exists sets a data watch on a node that exists and an exist watch on one that does not.
const existsWatchKind: WatchKindFor = (err) => (err === Err.ok ? 'data' : err === Err.noNode ? 'exist' : null);
const dataWatchKind: WatchKindFor = (err) => (err === Err.ok ? 'data' : null);
const childWatchKind: WatchKindFor = (err) => (err === Err.ok ? 'child' : null);
const readChildName = (r: JuteReader): string => r.ustring();

/** create2 (15), or createContainer (19) / createTTL (21) for those modes: every reply carries the new node's Stat. */
export function createRequest(chroot: Chroot, path: string, data: Uint8Array | string | null | undefined, options: CreateOptions): Request<{ path: string; stat: Stat }> {
  const { opcode, encode } = createRecord(chroot, path, data, options);
  return new Request(opcode, path, encode, (r) => ({ path: chroot.fromServer(r.ustring()), stat: readStat(r) }));
}

/** version -1 matches any version. */
export function deleteRequest(chroot: Chroot, path: string, version: number): Request<void> {
  validatePath(path);
  checkVersion(version);
  const serverPath = chroot.toServer(path);
  return new Request(OpCode.delete, path, (w) => void w.ustring(serverPath).int(version), nothing);
}

export function existsRequest(chroot: Chroot, path: string, watcher: Watcher | undefined): Request<Stat | null> {
  return watchedRead<Stat | null>(chroot, OpCode.exists, path, watcher, existsWatchKind, readStat, recoverNoNode);
}

export function getDataRequest(chroot: Chroot, path: string, watcher: Watcher | undefined): Request<{ data: Uint8Array; stat: Stat }> {
  return watchedRead(chroot, OpCode.getData, path, watcher, dataWatchKind, (r) => ({ data: r.buffer(), stat: readStat(r) }));
}

export function setDataRequest(chroot: Chroot, path: string, data: Uint8Array | string | null, version: number): Request<Stat> {
  const bytes = toBytes(data);
  validatePath(path);
  checkVersion(version);
  checkSize(bytes, path);
  const serverPath = chroot.toServer(path);
  return new Request(OpCode.setData, path, (w) => void w.ustring(serverPath).buffer(bytes).int(version), readStat);
}

/** getChildren2: the children and the parent's Stat in one reply. */
export function getChildrenRequest(chroot: Chroot, path: string, watcher: Watcher | undefined): Request<{ children: string[]; stat: Stat }> {
  return watchedRead(chroot, OpCode.getChildren2, path, watcher, childWatchKind, (r) => ({ children: r.vector(readChildName), stat: readStat(r) }));
}

/** getChildren2 for the names alone (the parent's Stat is read past, not kept). */
export function getChildrenNamesRequest(chroot: Chroot, path: string, watcher: Watcher | undefined): Request<string[]> {
  return watchedRead(chroot, OpCode.getChildren2, path, watcher, childWatchKind, readChildNames);
}

const readChildNames = (r: JuteReader): string[] => r.vector(readChildName);

/** getChildren2 with the names kept as their bytes (ChildListing) and the parent's czxid. */
export function getChildrenListingRequest(chroot: Chroot, path: string, watcher: Watcher | undefined): Request<ChildListing> {
  return watchedRead(chroot, OpCode.getChildren2, path, watcher, childWatchKind, readListing);
}

const readListing = (r: JuteReader): ChildListing => {
  const { bytes, count } = r.listingBytes();
  return new ChildListing(bytes, count, readStat(r).czxid);
};

/** A read that may set a watch: proto.ExistsRequest, GetDataRequest, GetChildren2Request (path, watch flag). */
function watchedRead<T>(
  chroot: Chroot,
  opcode: number,
  path: string,
  watcher: Watcher | undefined,
  watchKind: WatchKindFor,
  decode: (r: JuteReader) => T,
  recover?: Recover<T>,
): Request<T> {
  validatePath(path);
  const serverPath = chroot.toServer(path);
  const watch = watcher !== undefined;
  return new Request(opcode, path, (w) => void w.ustring(serverPath).bool(watch), decode, recover, watcher, watchKind);
}

export function getEphemeralsRequest(chroot: Chroot, prefix: string): Request<string[]> {
  validatePath(prefix);
  const serverPrefix = chroot.toServer(prefix);
  return new Request(OpCode.getEphemerals, prefix, (w) => void w.ustring(serverPrefix), (r) => r.vector(readChildName).map((p) => chroot.fromServer(p)));
}

export function getAclRequest(chroot: Chroot, path: string): Request<{ acl: ACL[]; stat: Stat }> {
  validatePath(path);
  const serverPath = chroot.toServer(path);
  return new Request(OpCode.getACL, path, (w) => void w.ustring(serverPath), (r) => ({ acl: r.vector(readAcl), stat: readStat(r) }));
}

export function setAclRequest(chroot: Chroot, path: string, acl: readonly ACL[], aclVersion: number): Request<Stat> {
  validatePath(path);
  validateAcl(acl);
  checkVersion(aclVersion);
  const serverPath = chroot.toServer(path);
  return new Request(OpCode.setACL, path, (w) => void w.ustring(serverPath).vector(acl, writeAcl).int(aclVersion), readStat);
}

export function syncRequest(chroot: Chroot, path: string): Request<void> {
  validatePath(path);
  const serverPath = chroot.toServer(path);
  return new Request(OpCode.sync, path, (w) => void w.ustring(serverPath), nothing);
}

/**
 * Several operations applied atomically. The reply header's error is 0 even
 * when an operation failed (ZooKeeper 3.8 does so); the per-operation
 * results say which, so the decoder throws the failing operation's
 * ZooKeeperError (opIndex set): none of the operations took effect.
 */
export function multiRequest(chroot: Chroot, ops: readonly MultiOp[]): Request<MultiResult[]> {
  if (!Array.isArray(ops) || ops.length === 0) throw new InvalidArgumentError('multi() needs a non-empty array of operations');
  const encoded = ops.map((op) => multiOpRecord(chroot, op));
  return new Request(
    OpCode.multi,
    undefined,
    (w) => {
      for (const write of encoded) write(w);
      writeMultiHeader(w, { type: -1, done: true, err: -1 });
    },
    (r) => readMultiResults(r, chroot, ops),
  );
}

/** No record: the server ends the session, deletes its ephemeral nodes, answers and closes the connection. */
export function closeSessionRequest(): Request<void> {
  return new Request(OpCode.closeSession, undefined, nothing, nothing);
}

/** proto.AuthPacket (type 0, then scheme and credentials). */
export function authRequest(auth: AuthInfo): Request<void> {
  const credentials = Buffer.from(auth.credentials, 'utf8');
  return new Request(OpCode.auth, undefined, (w) => void w.int(0).ustring(auth.scheme).buffer(credentials), nothing);
}

// ClientCnxn splits setWatches so one packet stays well under jute.maxbuffer.
const SET_WATCHES_MAX_BYTES = 128 * 1024;

/**
 * proto.SetWatches for every watch the client holds (client paths, by table),
 * relative to the last zxid seen: the server fires at once each watch whose
 * node changed after it. Split so no packet grows past SET_WATCHES_MAX_BYTES.
 */
export function setWatchesRequests(chroot: Chroot, relativeZxid: bigint, watches: Readonly<Record<WatchKind, readonly string[]>>): Request<void>[] {
  const requests: Request<void>[] = [];
  let batch: [string[], string[], string[]] = [[], [], []];
  let bytes = 0;
  const seal = (): void => {
    const [data, exist, child] = batch;
    requests.push(new Request(OpCode.setWatches, undefined, (w) => void w.long(relativeZxid).vector(data, writeString).vector(exist, writeString).vector(child, writeString), nothing));
    batch = [[], [], []];
    bytes = 0;
  };
  const lists = [watches.data, watches.exist, watches.child];
  lists.forEach((paths, i) => {
    for (const path of paths) {
      const serverPath = chroot.toServer(path);
      const size = Buffer.byteLength(serverPath) + 4;
      if (bytes + size > SET_WATCHES_MAX_BYTES) seal();
      batch[i]?.push(serverPath);
      bytes += size;
    }
  });
  if (bytes > 0) seal();
  return requests;
}

const writeString = (w: JuteWriter, s: string): void => void w.ustring(s);

/**
 * The id to put in a 'digest' ACL entry for user/password: user:base64(sha1(user:password)),
 * as DigestAuthenticationProvider.generateDigest computes it.
 */
export function digestAclId(user: string, password: string): string {
  return `${user}:${createHash('sha1').update(`${user}:${password}`).digest('base64')}`;
}

// ---------------------------------------------------------------- records shared by create and multi

/** Validates a create and returns its opcode and record writer (proto.CreateRequest, CreateTTLRequest). */
function createRecord(chroot: Chroot, path: string, data: Uint8Array | string | null | undefined, options: CreateOptions): { opcode: number; encode: Encode } {
  const mode = options.mode ?? 'persistent';
  // hasOwn: a mode like 'toString' must not find Object.prototype's member.
  if (!Object.hasOwn(CREATE_FLAGS, mode)) throw new InvalidArgumentError(`unknown create mode ${String(mode)}`);
  const flags = CREATE_FLAGS[mode];
  const acl = options.acl ?? OPEN_ACL_UNSAFE;
  const ttl = mode.endsWith('_with_ttl');
  const ttlMs = options.ttlMs;
  const bytes = toBytes(data);
  validatePath(path, mode.includes('sequential'));
  validateAcl(acl);
  if (ttl && (!Number.isInteger(ttlMs) || (ttlMs as number) < 1 || (ttlMs as number) > MAX_TTL_MS)) {
    throw new InvalidArgumentError(`mode ${mode} needs ttlMs, an integer in 1..${MAX_TTL_MS}`);
  }
  if (!ttl && ttlMs !== undefined) throw new InvalidArgumentError(`ttlMs is only for the *_with_ttl modes, not ${mode}`);
  checkSize(bytes, path);
  const opcode = mode === 'container' ? OpCode.createContainer : ttl ? OpCode.createTTL : OpCode.create2;
  const serverPath = chroot.toServer(path);
  return {
    opcode,
    encode: (w) => {
      w.ustring(serverPath).buffer(bytes).vector(acl, writeAcl).int(flags);
      if (ttl) w.long(BigInt(ttlMs as number));
    },
  };
}

/** One operation of a multi: its MultiHeader, then the same record as the request alone. */
function multiOpRecord(chroot: Chroot, op: MultiOp): Encode {
  switch (op?.op) {
    case 'create': {
      const { opcode, encode } = createRecord(chroot, op.path, op.data, {
        ...(op.mode !== undefined && { mode: op.mode }),
        ...(op.acl !== undefined && { acl: op.acl }),
        ...(op.ttlMs !== undefined && { ttlMs: op.ttlMs }),
      });
      return (w) => {
        writeMultiHeader(w, { type: opcode, done: false, err: -1 });
        encode(w);
      };
    }
    case 'delete': {
      validatePath(op.path);
      const version = op.version ?? -1;
      checkVersion(version);
      const path = chroot.toServer(op.path);
      return (w) => {
        writeMultiHeader(w, { type: OpCode.delete, done: false, err: -1 });
        w.ustring(path).int(version);
      };
    }
    case 'setData': {
      validatePath(op.path);
      const version = op.version ?? -1;
      checkVersion(version);
      const bytes = toBytes(op.data);
      const path = chroot.toServer(op.path);
      return (w) => {
        writeMultiHeader(w, { type: OpCode.setData, done: false, err: -1 });
        w.ustring(path).buffer(bytes).int(version);
      };
    }
    case 'check': {
      validatePath(op.path);
      checkVersion(op.version);
      const path = chroot.toServer(op.path);
      return (w) => {
        writeMultiHeader(w, { type: OpCode.check, done: false, err: -1 });
        w.ustring(path).int(op.version);
      };
    }
    default:
      throw new InvalidArgumentError(`unknown multi operation ${JSON.stringify((op as { op?: unknown })?.op)}`);
  }
}

/** proto.MultiResponse: a MultiHeader before each result, one result per operation, then a done header. */
function readMultiResults(r: JuteReader, chroot: Chroot, ops: readonly MultiOp[]): MultiResult[] {
  const results: MultiResult[] = [];
  const errors: number[] = [];
  for (;;) {
    const h = readMultiHeader(r);
    if (h.done) break;
    switch (h.type) {
      case OpCode.create:
        // 3.8 answers a create2 inside a multi with a plain CreateResponse (path only).
        results.push({ op: 'create', path: chroot.fromServer(r.ustring()), stat: null });
        break;
      case OpCode.create2:
      case OpCode.createContainer:
      case OpCode.createTTL:
        results.push({ op: 'create', path: chroot.fromServer(r.ustring()), stat: readStat(r) });
        break;
      case OpCode.delete:
        results.push({ op: 'delete' });
        break;
      case OpCode.setData:
        results.push({ op: 'setData', stat: readStat(r) });
        break;
      case OpCode.check:
        results.push({ op: 'check' });
        break;
      case OpCode.error:
        errors[results.length] = r.int();
        results.push({ op: 'check' });
        break;
      default:
        throw new ProtocolError(`unexpected multi result type ${h.type}`);
    }
  }
  if (results.length !== ops.length) throw new ProtocolError(`multi answered ${results.length} results for ${ops.length} operations`);
  // On failure every result is an error: the failing op carries its own
  // code, the others OK (before it) or RUNTIMEINCONSISTENCY (after it).
  const failed = errors.findIndex((e) => e !== undefined && e !== Err.ok && e !== Err.runtimeInconsistency);
  const index = failed !== -1 ? failed : errors.findIndex((e) => e !== undefined && e !== Err.ok);
  if (index !== -1) {
    const code = errors[index] as number;
    throw new ZooKeeperError(errorCodeName(code), code, ops[index]?.path, { opIndex: index });
  }
  return results;
}

// ---------------------------------------------------------------- argument checks

function toBytes(data: Uint8Array | string | null | undefined): Uint8Array {
  if (data === undefined || data === null) return EMPTY;
  if (typeof data === 'string') return Buffer.from(data, 'utf8');
  if (data instanceof Uint8Array) return data;
  throw new InvalidArgumentError(`data must be a Uint8Array or a string, got ${typeof data}`);
}

function checkSize(bytes: Uint8Array, path: string): void {
  if (bytes.byteLength + Buffer.byteLength(path) + 64 > MAX_PACKET_BYTES) {
    throw new InvalidArgumentError(
      `data of ${bytes.byteLength} bytes for ${path} exceeds ZooKeeper's packet limit (jute.maxbuffer, ${MAX_PACKET_BYTES} bytes)`,
    );
  }
}

function checkVersion(version: number): void {
  if (!Number.isInteger(version) || version < -1 || version > 0x7fffffff) {
    throw new InvalidArgumentError(`version must be an integer in -1..2^31-1, got ${String(version)}`);
  }
}

/**
 * Throws InvalidArgumentError unless `acl` is a non-empty list of well-formed
 * entries (ZooKeeper answers INVALIDACL to an empty one, and perms is a 5-bit
 * mask). The one ACL check: every create, setACL, ConnectOptions.defaultAcl
 * and the recipes' acl option go through it. `what` names the option in the message.
 */
export function validateAcl(acl: unknown, what = 'acl'): asserts acl is readonly ACL[] {
  if (!Array.isArray(acl) || acl.length === 0) throw new InvalidArgumentError(`${what} must be a non-empty array of ACL entries (ZooKeeper answers INVALIDACL otherwise)`);
  for (const entry of acl as unknown[]) {
    const e = entry as Partial<ACL> | null;
    if (
      e === null || typeof e !== 'object' || !Number.isInteger(e.perms) || (e.perms as number) < 0 || (e.perms as number) > 31
      || typeof e.id?.scheme !== 'string' || typeof e.id.id !== 'string'
    ) {
      throw new InvalidArgumentError(`each entry of ${what} needs { perms: 0..31, id: { scheme: string, id: string } }`);
    }
  }
}
