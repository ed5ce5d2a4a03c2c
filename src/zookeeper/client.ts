/**
 * The public ZooKeeper client: one session, kept alive across connections.
 *
 * The story of a session, as ClientCnxn tells it and as this file follows it:
 * connect to a server and send ConnectRequest (session id 0 the first time);
 * the ConnectResponse gives the session id, its password and the negotiated
 * timeout. Requests then go out as frames (RequestHeader + record) and their
 * replies come back in the same order (ReplyHeader + record), matched by xid;
 * watch notifications (xid -1) may arrive between them. When idle for a third
 * of the timeout the client pings (xid -2); when nothing arrives for two
 * thirds of it the connection is presumed dead. On a lost connection every
 * request in flight fails with ConnectionLossError (its outcome is unknown),
 * and the client reconnects to the next server with the same session id and
 * password, re-sends its auth, and re-arms its watches with setWatches so no
 * change made during the switch is missed. A server that answers a resumed
 * session with timeout 0 says it has expired: that is final.
 *
 * For fencing, the client keeps one more number: the monotonic send time of
 * the last request whose reply has arrived. The server heard from us no
 * earlier than that, so the session cannot expire before it + timeout; the
 * lock recipe steps down by that deadline (seed 000's "step down by your own
 * clock before the session can expire").
 */
import { createHash, randomBytes } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { debuglog } from 'node:util';
import {
  ClientClosedError,
  ConnectionLossError,
  FencekeeperError,
  InvalidArgumentError,
  ProtocolError,
  SessionExpiredError,
  ZooKeeperError,
} from '../errors.js';
import { FrameParser } from './frame-parser.js';
import { JuteReader } from './jute-reader.js';
import { JuteWriter } from './jute-writer.js';
import { parseConnectString, validatePath, type ConnectString, type ServerAddress } from './paths.js';
import {
  CREATE_FLAGS,
  Err,
  EventType,
  MAX_PACKET_BYTES,
  MAX_TTL_MS,
  OPEN_ACL_UNSAFE,
  OpCode,
  Xid,
  errorCodeName,
  readAcl,
  readConnectResponse,
  readMultiHeader,
  readReplyHeader,
  readStat,
  readWatcherEvent,
  writeAcl,
  writeConnectRequest,
  writeMultiHeader,
  type ACL,
  type CreateMode,
  type Stat,
} from './protocol.js';
import { WatchRegistry, type WatchKind, type Watcher } from './watches.js';

const debug = debuglog('fencekeeper');
/** Every watch notification delivered, for observers (tests count herd wake-ups with it). */
const watchChannel = diagnostics.channel('fencekeeper:zookeeper:watch');
const stateChannel = diagnostics.channel('fencekeeper:zookeeper:state');

export type ClientState = 'connecting' | 'connected' | 'suspended' | 'expired' | 'closed';

export interface AuthInfo {
  readonly scheme: 'digest';
  /** 'user:password' */
  readonly credentials: string;
}

export interface ConnectOptions {
  /** 'h1:2181,h2:2181[/chroot]' */
  readonly connectString: string;
  /** Requested session timeout; the server bounds it to [2, 20] x its tickTime. Default 10000. */
  readonly sessionTimeoutMs?: number;
  readonly auth?: readonly AuthInfo[];
  /** How long connect() keeps trying servers before it rejects. Default: the session timeout. */
  readonly connectTimeoutMs?: number;
}

export interface CreateOptions {
  readonly mode?: CreateMode;
  readonly acl?: readonly ACL[];
  /** Required for the *_with_ttl modes: the node is removed this long after its last change once it has no children. */
  readonly ttlMs?: number;
}

export interface WatchOptions {
  /** Called at most once, with the first event that triggers this watch (ZooKeeper's one-shot watches). */
  readonly watch?: Watcher;
}

export type MultiOp =
  | { readonly op: 'create'; readonly path: string; readonly data?: Uint8Array | string; readonly mode?: CreateMode; readonly acl?: readonly ACL[]; readonly ttlMs?: number }
  | { readonly op: 'delete'; readonly path: string; readonly version?: number }
  | { readonly op: 'setData'; readonly path: string; readonly data: Uint8Array | string; readonly version?: number }
  | { readonly op: 'check'; readonly path: string; readonly version: number };

export type MultiResult =
  /** stat: null when the server answers with a plain CreateResponse (ZooKeeper 3.8 does inside multi). */
  | { readonly op: 'create'; readonly path: string; readonly stat: Stat | null }
  | { readonly op: 'delete' }
  | { readonly op: 'setData'; readonly stat: Stat }
  | { readonly op: 'check' };

interface Request<T = unknown> {
  readonly opcode: number;
  /** Client-side path, for error messages and watch registration. */
  readonly path: string | undefined;
  readonly encode: (w: JuteWriter) => void;
  readonly decode: (r: JuteReader) => T;
  /** Turns a server error into a value (exists: NONODE -> null); undefined means reject. */
  readonly recover?: ((err: number) => { value: T } | undefined) | undefined;
  /** Registers the one-shot watch once the reply says the server has set it. */
  readonly watch?: { readonly watcher: Watcher; readonly kindFor: (err: number) => WatchKind | null } | undefined;
  readonly resolve: (value: T) => void;
  readonly reject: (error: Error) => void;
  xid: number;
  sentAt: number;
}

interface Ping { sentAt: number }

// 10 MiB: far above any reply a default server sends (jute.maxbuffer is
// 1 MiB), small enough that a stream of garbage cannot make us allocate much.
const MAX_REPLY_FRAME = 10 * 1024 * 1024;
// ClientCnxn splits setWatches so one packet stays well under jute.maxbuffer.
const SET_WATCHES_MAX_BYTES = 128 * 1024;
const EMPTY = new Uint8Array(0);
const NO_PASSWORD = new Uint8Array(16);

/** 'state': every state change. 'closing': close() was called (the session is ending). */
export class ZooKeeperClient extends EventEmitter<{ state: [ClientState]; closing: [] }> {
  readonly #servers: readonly ServerAddress[];
  readonly #chroot: string;
  readonly #requestedTimeoutMs: number;
  readonly #auth: readonly AuthInfo[];
  readonly #watches = new WatchRegistry();

  #state: ClientState = 'connecting';
  #sessionId = 0n;
  #password: Uint8Array = NO_PASSWORD;
  #timeoutMs: number;
  #lastZxid = 0n;

  #socket: net.Socket | null = null;
  #handshaking = false;
  #parser = new FrameParser(MAX_REPLY_FRAME);
  #writer = new JuteWriter();
  #nextXid = 1;
  #flushScheduled = false;
  #blocked = false;
  /** Requests waiting for a connection (issued while connecting or suspended). */
  #queued: Request[] = [];
  /** Requests written to the current socket, in reply order. */
  #inflight: Request[] = [];
  #inflightHead = 0;
  #pings: Ping[] = [];
  #auths: Request<void>[] = [];
  /** Entries encoded since the last flush: their send time is the flush's. */
  #unsent: { sentAt: number }[] = [];

  #hostIndex = 0;
  #attemptsThisRound = 0;
  #connectSentAt = 0;
  #lastSendAt = 0;
  #lastRecvAt = 0;
  #lastAckedSendAt = 0;
  #heartbeat: NodeJS.Timeout | null = null;
  #attemptTimer: NodeJS.Timeout | null = null;
  #retryTimer: NodeJS.Timeout | null = null;
  #expiryTimer: NodeJS.Timeout | null = null;
  #lastError: Error | null = null;
  #closing = false;

  private constructor(options: ConnectOptions, target: ConnectString) {
    super();
    this.#servers = target.servers;
    this.#chroot = target.chroot;
    this.#requestedTimeoutMs = options.sessionTimeoutMs ?? 10_000;
    this.#timeoutMs = this.#requestedTimeoutMs;
    this.#auth = Object.freeze([...(options.auth ?? [])]);
  }

  /**
   * Connect and establish a session. Resolves once the first server has
   * accepted the session (and any auth has been answered); rejects with
   * ConnectionLossError if no server did within connectTimeoutMs.
   */
  static async connect(options: ConnectOptions): Promise<ZooKeeperClient> {
    if (options === null || typeof options !== 'object') throw new InvalidArgumentError('connect() needs an options object');
    const target = parseConnectString(options.connectString);
    const timeout = options.sessionTimeoutMs ?? 10_000;
    if (!Number.isInteger(timeout) || timeout < 1 || timeout > 0x7fffffff) {
      throw new InvalidArgumentError(`sessionTimeoutMs must be a positive integer, got ${String(timeout)}`);
    }
    for (const a of options.auth ?? []) {
      if (a?.scheme !== 'digest' || typeof a.credentials !== 'string' || !a.credentials.includes(':')) {
        throw new InvalidArgumentError("auth entries must be { scheme: 'digest', credentials: 'user:password' }");
      }
    }
    const connectTimeout = options.connectTimeoutMs ?? timeout;
    const client = new ZooKeeperClient(options, target);
    await client.#start(connectTimeout);
    return client;
  }

  /** The session id the server assigned (0n before the first connection). */
  get sessionId(): bigint {
    return this.#sessionId;
  }

  /** The negotiated session timeout. */
  get sessionTimeoutMs(): number {
    return this.#timeoutMs;
  }

  get state(): ClientState {
    return this.#state;
  }

  /** True from the moment close() is called (the session may still be ending). */
  get closing(): boolean {
    return this.#closing;
  }

  /** The chroot this client's paths are relative to ('' for none). */
  get chroot(): string {
    return this.#chroot;
  }

  /**
   * performance.now() at which the last request whose reply has arrived was
   * sent. The server has heard from this session at or after that instant.
   */
  get lastAckedSendTime(): number {
    return this.#lastAckedSendAt;
  }

  /** The earliest instant (performance.now() timebase) the server may expire this session. */
  get sessionDeadline(): number {
    return this.#lastAckedSendAt + this.#timeoutMs;
  }

  /** The largest zxid this client has seen in a reply. */
  get lastZxid(): bigint {
    return this.#lastZxid;
  }

  // ---------------------------------------------------------------- operations

  /** Create a node (create2: the reply carries its Stat, so its czxid costs no extra round trip). */
  async create(path: string, data?: Uint8Array | string | null, options: CreateOptions = {}): Promise<{ path: string; stat: Stat }> {
    const { opcode, body } = this.#createBody(path, data, options);
    return this.#submit({
      opcode,
      path,
      encode: body,
      decode: (r) => ({ path: this.#fromServer(r.ustring()), stat: readStat(r) }),
    });
  }

  /** Delete a node; version -1 (the default) matches any version. */
  async delete(path: string, version = -1): Promise<void> {
    validatePath(path);
    checkVersion(version);
    const serverPath = this.#toServer(path);
    return this.#submit({
      opcode: OpCode.delete,
      path,
      encode: (w) => void w.ustring(serverPath).int(version),
      decode: () => undefined,
    });
  }

  /** The node's Stat, or null if it does not exist. A watch on a missing node fires when it is created. */
  async exists(path: string, options: WatchOptions = {}): Promise<Stat | null> {
    validatePath(path);
    const serverPath = this.#toServer(path);
    const watcher = options.watch;
    return this.#submit<Stat | null>({
      opcode: OpCode.exists,
      path,
      encode: (w) => void w.ustring(serverPath).bool(watcher !== undefined),
      decode: readStat,
      recover: (err) => (err === Err.noNode ? { value: null } : undefined),
      ...(watcher && { watch: { watcher, kindFor: (err) => (err === Err.ok ? 'data' : err === Err.noNode ? 'exist' : null) } }),
    });
  }

  async getData(path: string, options: WatchOptions = {}): Promise<{ data: Uint8Array; stat: Stat }> {
    validatePath(path);
    const serverPath = this.#toServer(path);
    const watcher = options.watch;
    return this.#submit({
      opcode: OpCode.getData,
      path,
      encode: (w) => void w.ustring(serverPath).bool(watcher !== undefined),
      decode: (r) => ({ data: r.buffer(), stat: readStat(r) }),
      ...(watcher && { watch: { watcher, kindFor: (err) => (err === Err.ok ? 'data' : null) } }),
    });
  }

  async setData(path: string, data: Uint8Array | string | null, version = -1): Promise<Stat> {
    const bytes = toBytes(data);
    validatePath(path);
    checkVersion(version);
    checkSize(bytes, path);
    const serverPath = this.#toServer(path);
    return this.#submit({
      opcode: OpCode.setData,
      path,
      encode: (w) => void w.ustring(serverPath).buffer(bytes).int(version),
      decode: readStat,
    });
  }

  /** The node's children (names, unordered). */
  async getChildren(path: string, options: WatchOptions = {}): Promise<string[]> {
    return (await this.getChildrenWithStat(path, options)).children;
  }

  /** getChildren2: the children and the parent's Stat in one reply. */
  async getChildrenWithStat(path: string, options: WatchOptions = {}): Promise<{ children: string[]; stat: Stat }> {
    validatePath(path);
    const serverPath = this.#toServer(path);
    const watcher = options.watch;
    return this.#submit({
      opcode: OpCode.getChildren2,
      path,
      encode: (w) => void w.ustring(serverPath).bool(watcher !== undefined),
      decode: (r) => ({ children: r.vector((x) => x.ustring()), stat: readStat(r) }),
      ...(watcher && { watch: { watcher, kindFor: (err) => (err === Err.ok ? 'child' : null) } }),
    });
  }

  /** The paths of this session's ephemeral nodes under `prefix` (default: all). */
  async getEphemerals(prefix = '/'): Promise<string[]> {
    validatePath(prefix);
    const serverPrefix = this.#toServer(prefix);
    return this.#submit({
      opcode: OpCode.getEphemerals,
      path: prefix,
      encode: (w) => void w.ustring(serverPrefix),
      decode: (r) => r.vector((x) => x.ustring()).map((p) => this.#fromServer(p)),
    });
  }

  async getACL(path: string): Promise<{ acl: ACL[]; stat: Stat }> {
    validatePath(path);
    const serverPath = this.#toServer(path);
    return this.#submit({
      opcode: OpCode.getACL,
      path,
      encode: (w) => void w.ustring(serverPath),
      decode: (r) => ({ acl: r.vector(readAcl), stat: readStat(r) }),
    });
  }

  async setACL(path: string, acl: readonly ACL[], aclVersion = -1): Promise<Stat> {
    validatePath(path);
    checkAcl(acl);
    checkVersion(aclVersion);
    const serverPath = this.#toServer(path);
    return this.#submit({
      opcode: OpCode.setACL,
      path,
      encode: (w) => void w.ustring(serverPath).vector(acl, writeAcl).int(aclVersion),
      decode: readStat,
    });
  }

  /** Wait until the server this client talks to has caught up with the leader (for read-after-write across clients). */
  async sync(path = '/'): Promise<void> {
    validatePath(path);
    const serverPath = this.#toServer(path);
    return this.#submit({
      opcode: OpCode.sync,
      path,
      encode: (w) => void w.ustring(serverPath),
      decode: () => undefined,
    });
  }

  /**
   * Apply several operations atomically. The reply header's error is 0 even
   * when an operation failed (SERVICES.md); the per-operation results say
   * which, so a failure rejects with the failing operation's ZooKeeperError
   * (opIndex set) and none of the operations took effect.
   */
  async multi(ops: readonly MultiOp[]): Promise<MultiResult[]> {
    if (!Array.isArray(ops) || ops.length === 0) throw new InvalidArgumentError('multi() needs a non-empty array of operations');
    const encoded: ((w: JuteWriter) => void)[] = [];
    for (const op of ops) encoded.push(this.#encodeMultiOp(op));
    return this.#submit({
      opcode: OpCode.multi,
      path: undefined,
      encode: (w) => {
        for (const write of encoded) write(w);
        writeMultiHeader(w, { type: -1, done: true, err: -1 });
      },
      decode: (r) => this.#decodeMultiResults(r, ops),
    });
  }

  /**
   * End the session: the server deletes its ephemeral nodes at once, and
   * other clients' watches on them fire. Requests issued before close() are
   * answered first; later ones reject with ClientClosedError.
   */
  async close(): Promise<void> {
    if (this.#closing || this.#state === 'closed' || this.#state === 'expired') {
      this.#closing = true;
      return;
    }
    this.#closing = true;
    this.emit('closing');
    // Suspended: the closeSession waits in the queue for the reconnect already
    // under way (one more attempt; a failed one ends the client), so a brief
    // disconnect does not leave our ephemeral nodes (our locks) blocking
    // others until the server expires the session.
    if (this.#state === 'connected' || this.#state === 'suspended') {
      const bye = new Promise<void>((resolve) => {
        this.#enqueue({
          opcode: OpCode.closeSession,
          path: undefined,
          encode: () => undefined,
          decode: () => undefined,
          resolve: () => resolve(),
          reject: () => resolve(),
          xid: 0,
          sentAt: 0,
        });
      });
      let timer: NodeJS.Timeout | undefined;
      const limit = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, Math.min(this.#timeoutMs, 5000));
        timer.unref();
      });
      await Promise.race([bye, limit]);
      clearTimeout(timer);
    }
    this.#terminate('closed', new ClientClosedError());
  }

  // ---------------------------------------------------------------- requests

  #submit<T>(spec: Omit<Request<T>, 'resolve' | 'reject' | 'xid' | 'sentAt'>): Promise<T> {
    if (this.#state === 'expired') return Promise.reject(new SessionExpiredError());
    if (this.#state === 'closed' || this.#closing) return Promise.reject(new ClientClosedError());
    return new Promise<T>((resolve, reject) => {
      // Every field spelled out, present or not: one object shape for every
      // request keeps the hot path monomorphic (an object spread of specs
      // with different optional fields cost ~20% of the client's CPU).
      const request: Request<T> = {
        opcode: spec.opcode,
        path: spec.path,
        encode: spec.encode,
        decode: spec.decode,
        recover: spec.recover,
        watch: spec.watch,
        resolve,
        reject,
        xid: 0,
        sentAt: 0,
      };
      this.#enqueue(request as Request);
    });
  }

  #enqueue(request: Request): void {
    if (this.#socket !== null && !this.#handshaking) {
      this.#write(request);
    } else {
      this.#queued.push(request);
    }
  }

  /** Serialize a request into the pending write; it leaves with everything else issued this tick. */
  #write(request: Request): void {
    const w = this.#writer;
    request.xid = request.opcode === OpCode.setWatches ? Xid.setWatches : request.opcode === OpCode.auth ? Xid.auth : this.#nextXid++;
    if (this.#nextXid > 0x7fffffff) this.#nextXid = 1;
    w.beginFrame();
    w.int(request.xid).int(request.opcode);
    try {
      request.encode(w);
    } catch (error) {
      w.abortFrame();
      request.reject(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    if (w.frameLength > MAX_PACKET_BYTES) {
      w.abortFrame();
      request.reject(new InvalidArgumentError(`request of ${w.frameLength} bytes exceeds ZooKeeper's packet limit (${MAX_PACKET_BYTES}, jute.maxbuffer)`));
      return;
    }
    w.endFrame();
    if (request.opcode === OpCode.auth) this.#auths.push(request as Request<void>);
    else this.#inflight.push(request);
    this.#unsent.push(request);
    this.#scheduleFlush();
  }

  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(this.#flush);
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const socket = this.#socket;
    if (socket === null || this.#blocked || this.#writer.pending === 0) return;
    const now = performance.now();
    for (const entry of this.#unsent) entry.sentAt = now;
    this.#unsent.length = 0;
    this.#lastSendAt = now;
    if (!socket.write(this.#writer.take())) {
      // Respect backpressure: keep serializing into our buffer, write again on drain.
      this.#blocked = true;
      socket.once('drain', () => {
        this.#blocked = false;
        if (socket === this.#socket) this.#flush();
      });
    }
  };

  #sendPing(): void {
    const w = this.#writer;
    w.beginFrame();
    w.int(Xid.ping).int(OpCode.ping);
    w.endFrame();
    const ping: Ping = { sentAt: 0 };
    this.#pings.push(ping);
    this.#unsent.push(ping);
    this.#scheduleFlush();
  }

  // ---------------------------------------------------------------- connection

  #start(connectTimeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onState = (state: ClientState): void => {
        if (state === 'connected') {
          cleanup();
          resolve();
        } else if (state === 'closed' || state === 'expired') {
          cleanup();
          reject(this.#lastError ?? new ClientClosedError());
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        const cause = this.#lastError;
        const where = this.#servers.map((s) => `${s.host}:${s.port}`).join(',');
        const error = new ConnectionLossError(
          `no ZooKeeper server at ${where} accepted a session within ${connectTimeoutMs} ms${cause ? `: ${cause.message}` : ''}`,
          cause ? { cause } : {},
        );
        this.#lastError = error;
        this.#terminate('closed', error);
        reject(error);
      }, connectTimeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.off('state', onState);
      };
      this.on('state', onState);
      this.#connectNext();
    });
  }

  #connectNext(): void {
    if (this.#state === 'closed' || this.#state === 'expired' || this.#socket !== null) return;
    if (this.#attemptsThisRound >= this.#servers.length) {
      // Tried every server once: wait a little before the next round, so a
      // refused port does not become a busy loop.
      this.#attemptsThisRound = 0;
      const delay = 50 + Math.floor(Math.random() * Math.min(1000, this.#timeoutMs / 10));
      this.#retryTimer = setTimeout(() => {
        this.#retryTimer = null;
        this.#connectNext();
      }, delay);
      return;
    }
    this.#attemptsThisRound++;
    const server = this.#servers[this.#hostIndex % this.#servers.length] as ServerAddress;
    this.#hostIndex++;
    debug('zookeeper: connecting to %s:%d (session 0x%s)', server.host, server.port, this.#sessionId.toString(16));

    const socket = net.connect({ host: server.host, port: server.port });
    socket.setNoDelay(true);
    this.#socket = socket;
    this.#handshaking = true;
    this.#parser = new FrameParser(MAX_REPLY_FRAME);
    this.#writer = new JuteWriter();
    this.#blocked = false;
    // ClientCnxn gives each server sessionTimeout / serverCount to answer.
    const attemptMs = Math.max(250, Math.floor(this.#timeoutMs / this.#servers.length));
    this.#attemptTimer = setTimeout(() => {
      this.#connectionLost(socket, new ConnectionLossError(`${server.host}:${server.port} did not answer the handshake within ${attemptMs} ms`));
    }, attemptMs);
    this.#attemptTimer.unref();

    socket.on('connect', () => {
      const w = this.#writer;
      w.beginFrame();
      writeConnectRequest(w, {
        lastZxidSeen: this.#lastZxid,
        timeOut: this.#requestedTimeoutMs,
        sessionId: this.#sessionId,
        passwd: this.#password,
      });
      w.endFrame();
      // Not #lastSendAt: a ConnectRequest nobody answers must not push the
      // local expiry back, or a client whose servers all accept TCP but never
      // answer (a proxy, a load balancer, a black hole) stays suspended forever.
      // An answered one counts, in #onConnectResponse.
      this.#connectSentAt = performance.now();
      socket.write(w.take());
    });
    // A frame handler can drop this connection and open the next one (a
    // resumed session that does not match): the frames still left in the
    // chunk belong to the old socket and must not reach the new one's state.
    const onFrame = (frame: Buffer): void => {
      if (socket === this.#socket) this.#onFrame(frame);
    };
    socket.on('data', (chunk: Buffer) => {
      if (socket !== this.#socket) return;
      this.#lastRecvAt = performance.now();
      try {
        this.#parser.parse(chunk, onFrame);
      } catch (error) {
        const cause = error instanceof Error ? error : new Error(String(error));
        const protocol = error instanceof FencekeeperError ? error : new ProtocolError(cause.message, { cause });
        this.#connectionLost(socket, protocol);
      }
    });
    socket.on('error', (error) => this.#connectionLost(socket, error));
    socket.on('close', () => this.#connectionLost(socket, new ConnectionLossError(`connection to ${server.host}:${server.port} closed`)));
  }

  readonly #onFrame = (frame: Buffer): void => {
    const r = new JuteReader(frame);
    if (this.#handshaking) {
      this.#onConnectResponse(readConnectResponse(r));
      return;
    }
    const header = readReplyHeader(r);
    if (header.xid === Xid.notification) {
      this.#onNotification(r);
      return;
    }
    if (header.zxid > this.#lastZxid) this.#lastZxid = header.zxid;
    if (header.xid === Xid.ping) {
      const ping = this.#pings.shift();
      if (ping === undefined) throw new ProtocolError('ping reply without a ping in flight');
      this.#acked(ping.sentAt);
      return;
    }
    if (header.xid === Xid.auth) {
      // The server answers auth outside the request pipeline, so auth replies
      // are matched among themselves, not against the request queue.
      const auth = this.#auths.shift();
      if (auth === undefined) throw new ProtocolError('auth reply without an auth in flight');
      if (header.err === Err.ok) auth.resolve();
      else auth.reject(new ZooKeeperError(errorCodeName(header.err), header.err, undefined));
      return;
    }
    const request = this.#inflight[this.#inflightHead];
    if (request === undefined || request.xid !== header.xid) {
      throw new ProtocolError(`reply xid ${header.xid} does not match the oldest request in flight (${request?.xid ?? 'none'})`);
    }
    this.#inflight[this.#inflightHead++] = undefined as unknown as Request;
    if (this.#inflightHead > 1024 && this.#inflightHead * 2 > this.#inflight.length) {
      this.#inflight = this.#inflight.slice(this.#inflightHead);
      this.#inflightHead = 0;
    }
    this.#acked(request.sentAt);
    this.#settle(request, header.err, r);
  };

  #acked(sentAt: number): void {
    if (sentAt > this.#lastAckedSendAt) this.#lastAckedSendAt = sentAt;
  }

  #settle(request: Request, err: number, r: JuteReader): void {
    if (request.watch !== undefined) {
      const kind = request.watch.kindFor(err);
      if (kind !== null && request.path !== undefined) this.#watches.add(kind, request.path, request.watch.watcher);
    }
    if (err !== Err.ok) {
      const recovered = request.recover?.(err);
      if (recovered !== undefined) request.resolve(recovered.value);
      else request.reject(new ZooKeeperError(errorCodeName(err), err, request.path));
      return;
    }
    // A reply whose record does not parse is a protocol violation: the
    // stream can no longer be trusted, so the request fails as a connection
    // loss (its outcome is unknown) and the connection is dropped.
    let value: unknown;
    try {
      value = request.decode(r);
    } catch (error) {
      if (error instanceof MultiFailure) {
        request.reject(error.error);
        return;
      }
      request.reject(new ConnectionLossError('malformed reply from server', { cause: error }));
      throw error;
    }
    request.resolve(value);
  }

  #onConnectResponse(res: ReturnType<typeof readConnectResponse>): void {
    const socket = this.#socket;
    if (socket === null) return;
    this.#handshaking = false;
    if (this.#attemptTimer) clearTimeout(this.#attemptTimer);
    this.#attemptTimer = null;
    if (res.timeOut <= 0) {
      // ClientCnxn.onConnected: a non-positive timeout is the server's word
      // that the session we asked to resume no longer exists.
      this.#terminate('expired', new SessionExpiredError(`session 0x${this.#sessionId.toString(16)} expired (server said so on reconnect)`));
      return;
    }
    const resumed = this.#sessionId !== 0n;
    if (resumed && res.sessionId !== this.#sessionId) {
      this.#connectionLost(socket, new ProtocolError(`server resumed session 0x${res.sessionId.toString(16)}, asked for 0x${this.#sessionId.toString(16)}`));
      return;
    }
    this.#sessionId = res.sessionId;
    this.#password = res.passwd;
    this.#timeoutMs = res.timeOut;
    this.#acked(this.#connectSentAt);
    if (this.#connectSentAt > this.#lastSendAt) this.#lastSendAt = this.#connectSentAt;
    this.#attemptsThisRound = 0;
    if (this.#expiryTimer) clearTimeout(this.#expiryTimer);
    this.#expiryTimer = null;
    debug('zookeeper: session 0x%s %s, timeout %d ms', res.sessionId.toString(16), resumed ? 'resumed' : 'established', res.timeOut);

    // Prime the connection as ClientCnxn does: watches first, then auth, then
    // whatever the application queued while we were away, in one write.
    this.#rearmWatches();
    const auths = this.#auth.map(
      (a) =>
        new Promise<void>((resolve, reject) => {
          this.#write({
            opcode: OpCode.auth,
            path: undefined,
            encode: (w) => void w.int(0).ustring(a.scheme).buffer(Buffer.from(a.credentials, 'utf8')),
            decode: () => undefined,
            resolve: () => resolve(),
            reject,
            xid: 0,
            sentAt: 0,
          });
        }),
    );
    const queued = this.#queued;
    this.#queued = [];
    for (const request of queued) this.#write(request);
    this.#armHeartbeat();

    const announce = (): void => {
      if (socket !== this.#socket) return;
      this.#setState('connected');
    };
    if (auths.length === 0) {
      announce();
    } else {
      Promise.all(auths).then(announce, (error: Error) => {
        // AUTHFAILED is final: the server closes the connection and would
        // refuse the same credentials on every server.
        this.#lastError = error;
        this.#terminate('closed', error);
      });
    }
  }

  #rearmWatches(): void {
    if (this.#watches.size === 0) return;
    const kinds: WatchKind[] = ['data', 'exist', 'child'];
    const lists = kinds.map((k) => this.#watches.paths(k).map((p) => this.#toServer(p)));
    // Split so no one setWatches packet grows past SET_WATCHES_MAX_BYTES.
    let batch: string[][] = [[], [], []];
    let bytes = 0;
    const send = (): void => {
      const [data, exist, child] = batch as [string[], string[], string[]];
      const relativeZxid = this.#lastZxid;
      this.#write({
        opcode: OpCode.setWatches,
        path: undefined,
        encode: (w) => {
          const str = (x: JuteWriter, s: string): void => void x.ustring(s);
          w.long(relativeZxid).vector(data, str).vector(exist, str).vector(child, str);
        },
        decode: () => undefined,
        resolve: () => undefined,
        reject: (error) => debug('zookeeper: setWatches failed: %s', error.message),
        xid: 0,
        sentAt: 0,
      });
      batch = [[], [], []];
      bytes = 0;
    };
    lists.forEach((paths, i) => {
      for (const p of paths) {
        const size = Buffer.byteLength(p) + 4;
        if (bytes + size > SET_WATCHES_MAX_BYTES) send();
        (batch[i] as string[]).push(p);
        bytes += size;
      }
    });
    if (bytes > 0) send();
  }

  #onNotification(r: JuteReader): void {
    const event = readWatcherEvent(r);
    if (event.type === EventType.none) return; // connection-state events; our states come from the socket
    const path = this.#fromServer(event.path);
    const taken = this.#watches.take(event.type, path);
    if (taken === null) return;
    if (watchChannel.hasSubscribers) {
      watchChannel.publish({ sessionId: this.#sessionId, type: taken.event.type, path, watchers: taken.watchers.length });
    }
    for (const watcher of taken.watchers) {
      try {
        watcher(taken.event);
      } catch (error) {
        // A throwing watcher is the application's bug; surface it the way Node
        // surfaces a throwing callback, without corrupting the client's state.
        process.nextTick(() => {
          throw error;
        });
      }
    }
  }

  #armHeartbeat(): void {
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    const pingEvery = this.#timeoutMs / 3;
    const readTimeout = (this.#timeoutMs * 2) / 3;
    const tick = (): void => {
      this.#heartbeat = null;
      const socket = this.#socket;
      if (socket === null || this.#handshaking) return;
      const now = performance.now();
      if (now - this.#lastRecvAt >= readTimeout) {
        this.#connectionLost(socket, new ConnectionLossError(`no reply from server for ${Math.round(now - this.#lastRecvAt)} ms`));
        return;
      }
      if (now - this.#lastSendAt >= pingEvery) this.#sendPing();
      const next = Math.min(this.#lastSendAt + pingEvery, this.#lastRecvAt + readTimeout);
      this.#heartbeat = setTimeout(tick, Math.max(10, next - performance.now()));
      this.#heartbeat.unref();
    };
    this.#heartbeat = setTimeout(tick, pingEvery);
    this.#heartbeat.unref();
  }

  /** The socket is gone (closed, errored, timed out, or spoke nonsense). */
  #connectionLost(socket: net.Socket, error: Error): void {
    if (socket !== this.#socket) return;
    this.#socket = null;
    this.#handshaking = false;
    socket.removeAllListeners('data');
    socket.on('error', () => undefined);
    socket.destroy();
    this.#lastError = error;
    if (this.#attemptTimer) clearTimeout(this.#attemptTimer);
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    this.#attemptTimer = this.#heartbeat = null;
    debug('zookeeper: connection lost: %s', error.message);

    this.#failInflight(error instanceof ConnectionLossError ? error : new ConnectionLossError(error.message, { cause: error }));
    if (this.#state === 'closed' || this.#state === 'expired') return;
    if (this.#closing) {
      this.#terminate('closed', new ClientClosedError());
      return;
    }
    if (this.#sessionId !== 0n) {
      if (this.#state === 'connected') this.#setState('suspended');
      this.#armLocalExpiry();
    }
    this.#connectNext();
  }

  /**
   * While no server can be reached the server side cannot tell us the
   * session expired, so we decide it by our clock: lastSendAt is our last
   * send on an established connection (or an answered handshake); past
   * lastSendAt + timeout the session is gone (Curator's "connection lost for
   * the whole session timeout" rule). Unanswered ConnectRequests do not count.
   */
  #armLocalExpiry(): void {
    if (this.#expiryTimer) return;
    const check = (): void => {
      this.#expiryTimer = null;
      if (this.#state !== 'suspended') return;
      const left = this.#lastSendAt + this.#timeoutMs - performance.now();
      if (left <= 0) {
        this.#terminate('expired', new SessionExpiredError(`session 0x${this.#sessionId.toString(16)} expired: no server reachable for the session timeout (${this.#timeoutMs} ms)`));
        return;
      }
      this.#expiryTimer = setTimeout(check, left + 1);
    };
    check();
  }

  #failInflight(error: Error): void {
    const inflight = this.#inflight.slice(this.#inflightHead);
    const auths = this.#auths;
    this.#inflight = [];
    this.#inflightHead = 0;
    this.#auths = [];
    this.#pings = [];
    this.#unsent = [];
    this.#flushScheduled = false;
    for (const request of inflight) {
      if (request.opcode === OpCode.closeSession) request.resolve(undefined);
      else request.reject(error);
    }
    for (const auth of auths) auth.reject(error);
  }

  /** Final states: every request waiting or in flight fails with `error`. */
  #terminate(state: 'closed' | 'expired', error: Error): void {
    if (this.#state === 'closed' || this.#state === 'expired') return;
    this.#closing = true;
    for (const t of [this.#heartbeat, this.#attemptTimer, this.#retryTimer, this.#expiryTimer]) if (t) clearTimeout(t);
    this.#heartbeat = this.#attemptTimer = this.#retryTimer = this.#expiryTimer = null;
    const socket = this.#socket;
    this.#socket = null;
    if (socket !== null) {
      socket.removeAllListeners('data');
      socket.on('error', () => undefined);
      socket.destroy();
    }
    this.#failInflight(error);
    const queued = this.#queued;
    this.#queued = [];
    for (const request of queued) {
      if (request.opcode === OpCode.closeSession) request.resolve(undefined);
      else request.reject(error);
    }
    this.#watches.clear();
    this.#setState(state);
  }

  #setState(state: ClientState): void {
    if (this.#state === state && state !== 'connected') return;
    const previous = this.#state;
    this.#state = state;
    if (stateChannel.hasSubscribers) stateChannel.publish({ sessionId: this.#sessionId, previous, state });
    if (previous !== state) this.emit('state', state);
  }

  // ---------------------------------------------------------------- helpers

  #toServer(path: string): string {
    if (this.#chroot === '') return path;
    return path === '/' ? this.#chroot : this.#chroot + path;
  }

  #fromServer(path: string): string {
    if (this.#chroot === '') return path;
    if (path === this.#chroot) return '/';
    return path.startsWith(`${this.#chroot}/`) ? path.slice(this.#chroot.length) : path;
  }

  /**
   * Validate a create and return its opcode and record writer, shared by
   * create() and multi(): create2 (15) so the reply carries the Stat,
   * createContainer (19) and createTTL (21) for those modes, whose replies
   * carry it too (Create2Response).
   */
  #createBody(
    path: string,
    data: Uint8Array | string | null | undefined,
    options: CreateOptions,
  ): { opcode: number; body: (w: JuteWriter) => void } {
    const mode = options.mode ?? 'persistent';
    // hasOwn: a mode like 'toString' must not find Object.prototype's member.
    if (!Object.hasOwn(CREATE_FLAGS, mode)) throw new InvalidArgumentError(`unknown create mode ${String(mode)}`);
    const flags = CREATE_FLAGS[mode];
    const acl = options.acl ?? OPEN_ACL_UNSAFE;
    const ttl = mode.endsWith('_with_ttl');
    const ttlMs = options.ttlMs;
    const bytes = toBytes(data);
    validatePath(path, mode.includes('sequential'));
    checkAcl(acl);
    if (ttl && (!Number.isInteger(ttlMs) || (ttlMs as number) < 1 || (ttlMs as number) > MAX_TTL_MS)) {
      throw new InvalidArgumentError(`mode ${mode} needs ttlMs, an integer in 1..${MAX_TTL_MS}`);
    }
    if (!ttl && ttlMs !== undefined) throw new InvalidArgumentError(`ttlMs is only for the *_with_ttl modes, not ${mode}`);
    checkSize(bytes, path);
    const opcode = mode === 'container' ? OpCode.createContainer : ttl ? OpCode.createTTL : OpCode.create2;
    const serverPath = this.#toServer(path);
    return {
      opcode,
      body: (w) => {
        w.ustring(serverPath).buffer(bytes).vector(acl, writeAcl).int(flags);
        if (ttl) w.long(BigInt(ttlMs as number));
      },
    };
  }

  #encodeMultiOp(op: MultiOp): (w: JuteWriter) => void {
    switch (op?.op) {
      case 'create': {
        const { opcode, body } = this.#createBody(op.path, op.data, {
          ...(op.mode !== undefined && { mode: op.mode }),
          ...(op.acl !== undefined && { acl: op.acl }),
          ...(op.ttlMs !== undefined && { ttlMs: op.ttlMs }),
        });
        return (w) => {
          writeMultiHeader(w, { type: opcode, done: false, err: -1 });
          body(w);
        };
      }
      case 'delete': {
        validatePath(op.path);
        const version = op.version ?? -1;
        checkVersion(version);
        const path = this.#toServer(op.path);
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
        const path = this.#toServer(op.path);
        return (w) => {
          writeMultiHeader(w, { type: OpCode.setData, done: false, err: -1 });
          w.ustring(path).buffer(bytes).int(version);
        };
      }
      case 'check': {
        validatePath(op.path);
        checkVersion(op.version);
        const path = this.#toServer(op.path);
        return (w) => {
          writeMultiHeader(w, { type: OpCode.check, done: false, err: -1 });
          w.ustring(path).int(op.version);
        };
      }
      default:
        throw new InvalidArgumentError(`unknown multi operation ${JSON.stringify((op as { op?: unknown })?.op)}`);
    }
  }

  #decodeMultiResults(r: JuteReader, ops: readonly MultiOp[]): MultiResult[] {
    const results: MultiResult[] = [];
    const errors: number[] = [];
    for (;;) {
      const h = readMultiHeader(r);
      if (h.done) break;
      switch (h.type) {
        case OpCode.create:
          // 3.8 answers a create2 inside a multi with a plain CreateResponse (path only).
          results.push({ op: 'create', path: this.#fromServer(r.ustring()), stat: null });
          break;
        case OpCode.create2:
        case OpCode.createContainer:
        case OpCode.createTTL:
          results.push({ op: 'create', path: this.#fromServer(r.ustring()), stat: readStat(r) });
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
      throw new MultiFailure(new ZooKeeperError(errorCodeName(code), code, ops[index]?.path, { opIndex: index }));
    }
    return results;
  }
}

/**
 * Thrown out of a multi decode: a multi whose operations failed is a valid
 * reply, so #settle rejects the call with the inner error and keeps the
 * connection, unlike a record that does not parse.
 */
class MultiFailure extends Error {
  constructor(readonly error: ZooKeeperError) {
    super(error.message);
  }
}

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

function checkAcl(acl: readonly ACL[]): void {
  if (!Array.isArray(acl) || acl.length === 0) throw new InvalidArgumentError('acl must be a non-empty array (ZooKeeper answers INVALIDACL otherwise)');
  for (const entry of acl) {
    if (!Number.isInteger(entry?.perms) || typeof entry.id?.scheme !== 'string' || typeof entry.id.id !== 'string') {
      throw new InvalidArgumentError('each ACL entry needs { perms: number, id: { scheme: string, id: string } }');
    }
  }
}

/**
 * The id to put in a 'digest' ACL entry for user/password: user:base64(sha1(user:password)),
 * as DigestAuthenticationProvider.generateDigest computes it.
 */
export function digestAclId(user: string, password: string): string {
  return `${user}:${createHash('sha1').update(`${user}:${password}`).digest('base64')}`;
}

/** 16 random hex digits (the recipes' per-client node guid). */
export function randomGuid(): string {
  return randomBytes(8).toString('hex');
}
