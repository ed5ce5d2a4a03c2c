/**
 * The public ZooKeeper client: one session, kept alive across connections.
 *
 * The story of a session, as ClientCnxn tells it and as this file follows it:
 * connect to a server and send ConnectRequest (session id 0 the first time);
 * the ConnectResponse gives the session id, its password and the negotiated
 * timeout. Requests then flow over that connection (connection.ts). On a
 * lost connection every request in flight fails with ConnectionLossError
 * (its outcome is unknown), and the client reconnects to the next server
 * with the same session id and password, re-sends its auth, and re-arms its
 * watches with setWatches so no change made during the switch is missed.
 * Requests issued while no connection is up wait and go out after the
 * reconnect. A server that answers a resumed session with timeout 0 says it
 * has expired: that is final. A server the connector refuses for good (a
 * certificate that does not verify) ends the first connect at once, but a
 * live session only skips it: the others may still take the session back.
 * While no server has it, the last connection error is kept, and the losses
 * (the local expiry, the holdings' LockLostError) carry it as their cause.
 *
 * For fencing, the client keeps one more number: the monotonic send time of
 * the last request whose reply has arrived. The server heard from us no
 * earlier than that, so the session cannot expire before it + timeout; a
 * lock holder that stops by that deadline has stopped before the server can
 * hand its lock to anyone else, even if it was paused (a long GC, a
 * SIGSTOP) and never saw the session go.
 */
import diagnostics from 'node:diagnostics_channel';
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { debuglog } from 'node:util';
import { CHANNELS, publishSessionState } from '../../diagnostics.js';
import { ClientClosedError, ConnectionLossError, InvalidArgumentError, ProtocolError, SessionExpiredError } from '../../errors.js';
import { Connection, connectTcp, type Connector, type SessionProgress } from './connection.js';
import { tlsConnector, type TlsOptions } from './tls.js';
import { Chroot, parseConnectString, type ServerAddress } from './paths.js';
import { EventType, type ACL, type ConnectResponse, type Stat, type WatcherEvent } from './protocol.js';
import {
  authRequest,
  closeSessionRequest,
  createRequest,
  deleteRequest,
  existsRequest,
  getAclRequest,
  getChildrenListingRequest,
  getChildrenNamesRequest,
  getChildrenRequest,
  getDataRequest,
  getEphemeralsRequest,
  multiRequest,
  setAclRequest,
  setDataRequest,
  setWatchesRequests,
  syncRequest,
  type AuthInfo,
  type CreateOptions,
  type MultiOp,
  type MultiResult,
  type Request,
  validateAcl,
} from './requests.js';
import { WatchRegistry, type Watcher } from './watches.js';
import { Call } from './call.js';
import type { ChildListing } from './child-listing.js';

export type { AuthInfo, CreateOptions, MultiOp, MultiResult } from './requests.js';
export type { Connector } from './connection.js';
export { digestAclId } from './requests.js';

const debug = debuglog('fencekeeper');
/** Every watch notification delivered, for observers (tests count herd wake-ups with it). */
const watchChannel = diagnostics.channel(CHANNELS.zookeeperWatch);
const stateChannel = diagnostics.channel(CHANNELS.zookeeperState);

/** A ZooKeeperClient's connection state, as published on `fencekeeper:zookeeper:state`. */
export type ClientState = 'connecting' | 'connected' | 'suspended' | 'expired' | 'closed';

/**
 * What ZooKeeperClient.connect takes: the connect string (`h1:2181,h2:2181/chroot`
 * or `zookeeper://...`), the session timeout, TLS, digest auth, a default ACL,
 * and the connector that opens the byte stream to each server.
 */
export interface ConnectOptions {
  /** 'h1:2181,h2:2181[/chroot]', or the same as a URL: 'zookeeper://h1:2181,h2:2181[/chroot]' (hosts and a chroot only) */
  readonly connectString: string;
  /** Requested session timeout; the server bounds it to [2, 20] x its tickTime. Default 10000. */
  readonly sessionTimeoutMs?: number;
  readonly auth?: readonly AuthInfo[];
  /** How long connect() keeps trying servers before it rejects. Default: the session timeout. */
  readonly connectTimeoutMs?: number;
  /** Opens the byte stream to a server (default: plain TCP). See Connector for how its errors count. */
  readonly connector?: Connector;
  /** Speak TLS to the servers' secure client port (their `secureClientPort`), verifying the host against `ca`; a certificate that fails it ends the first connect (TLS_FAILED). Not together with `connector`. */
  readonly tls?: TlsOptions;
  /**
   * The ACL the lock and election recipes give each lock's container and its
   * queue nodes when an acquire names none, as Curator's ACLProvider (the
   * shared roots above them, and 'jobs' of a nested 'jobs/reindex', are made
   * open). Default: none (open to everyone).
   */
  readonly defaultAcl?: readonly ACL[];
}

/** Whether a read also leaves a one-shot watch on the node, called on its next change. */
export interface WatchOptions {
  /** Called at most once, with the first event that triggers this watch (ZooKeeper's one-shot watches). */
  readonly watch?: Watcher;
}

const NO_PASSWORD = new Uint8Array(16);

/**
 * For fencekeeper/testing's expireSession (not exported from the package):
 * the servers a client dials and how, so a test can end its session from
 * the server's side without being told where the client is.
 */
export const clientInternals = new WeakMap<
  ZooKeeperClient,
  {
    readonly servers: readonly ServerAddress[];
    readonly connector: Connector;
    readonly auth: readonly AuthInfo[];
    /** Why no server has the session now (see #disconnectedBy): the cause the holdings' losses carry. */
    readonly disconnectedBy: () => Error | null;
  }
>();
const ignore = (): void => undefined;

/** 'state': every state change. 'closing': close() was called (the session is ending). */
export class ZooKeeperClient extends EventEmitter<{ state: [ClientState]; closing: [] }> {
  readonly #servers: readonly ServerAddress[];
  readonly #chroot: Chroot;
  readonly #requestedTimeoutMs: number;
  readonly #auth: readonly AuthInfo[];
  readonly #connector: Connector;
  readonly #defaultAcl: readonly ACL[] | undefined;
  readonly #watches = new WatchRegistry();
  readonly #progress: SessionProgress = { lastSendAt: 0, lastAckedSendAt: 0, lastZxid: 0n };

  #state: ClientState = 'connecting';
  #sessionId = 0n;
  #password: Uint8Array = NO_PASSWORD;
  #timeoutMs: number;
  #connection: Connection | null = null;
  /** Requests waiting for a connection (issued while connecting or suspended). */
  #queued: Call<unknown>[] = [];
  #hostIndex = 0;
  #attemptsThisRound = 0;
  #retryTimer: NodeJS.Timeout | null = null;
  #expiryTimer: NodeJS.Timeout | null = null;
  #lastError: Error | null = null;
  /** A final error (a certificate that does not verify) met since the session lost its connection. */
  #finalError: Error | null = null;
  #closing = false;

  private constructor(options: ConnectOptions, servers: readonly ServerAddress[], chroot: string) {
    super();
    this.#servers = servers;
    this.#chroot = new Chroot(chroot);
    this.#requestedTimeoutMs = options.sessionTimeoutMs ?? 10_000;
    this.#timeoutMs = this.#requestedTimeoutMs;
    this.#auth = Object.freeze([...(options.auth ?? [])]);
    this.#connector = options.connector ?? (options.tls !== undefined ? tlsConnector(options.tls) : connectTcp);
    this.#defaultAcl = options.defaultAcl === undefined ? undefined : Object.freeze([...options.defaultAcl]);
    clientInternals.set(this, { servers: this.#servers, connector: this.#connector, auth: this.#auth, disconnectedBy: () => this.#disconnectedBy() });
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
    if (options.connector !== undefined && typeof options.connector !== 'function') {
      throw new InvalidArgumentError('connector must be a function (address, { signal }) => stream');
    }
    if (options.tls !== undefined && (options.tls === null || typeof options.tls !== 'object')) {
      throw new InvalidArgumentError('tls must be an object ({ ca, cert, key, servername })');
    }
    if (options.tls !== undefined && options.connector !== undefined) {
      throw new InvalidArgumentError('give tls or connector, not both (a connector opens the stream itself)');
    }
    if (options.defaultAcl !== undefined) validateAcl(options.defaultAcl, 'defaultAcl');
    const connectTimeout = options.connectTimeoutMs ?? timeout;
    const client = new ZooKeeperClient(options, target.servers, target.chroot);
    await client.#start(connectTimeout);
    return client;
  }

  /** The session id the server assigned (0n before the first connection). */
  get sessionId(): bigint {
    return this.#sessionId;
  }

  /** ConnectOptions.defaultAcl: what the recipes create their nodes with when an acquire names no ACL. */
  get defaultAcl(): readonly ACL[] | undefined {
    return this.#defaultAcl;
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
    return this.#chroot.prefix;
  }

  /**
   * performance.now() at which the last request whose reply has arrived was
   * sent. The server has heard from this session at or after that instant.
   */
  get lastAckedSendTime(): number {
    return this.#progress.lastAckedSendAt;
  }

  /** The earliest instant (performance.now() timebase) the server may expire this session. */
  get sessionDeadline(): number {
    return this.#progress.lastAckedSendAt + this.#timeoutMs;
  }

  /** The largest zxid this client has seen in a reply. */
  get lastZxid(): bigint {
    return this.#progress.lastZxid;
  }

  // ---------------------------------------------------------------- operations

  /** Create a node (create2: the reply carries its Stat, so its czxid costs no extra round trip). */
  create(path: string, data?: Uint8Array | string | null, options: CreateOptions = {}): Promise<{ path: string; stat: Stat }> {
    return this.#submit(createRequest, path, data, options);
  }

  /** Delete a node; version -1 (the default) matches any version. */
  delete(path: string, version = -1): Promise<void> {
    return this.#submit(deleteRequest, path, version);
  }

  /** The node's Stat, or null if it does not exist. A watch on a missing node fires when it is created. */
  exists(path: string, options: WatchOptions = {}): Promise<Stat | null> {
    return this.#submit(existsRequest, path, options.watch);
  }

  /** Reads a node's data and Stat; `watch` leaves a one-shot watch on its next change. ZK_NONODE if it does not exist. */
  getData(path: string, options: WatchOptions = {}): Promise<{ data: Uint8Array; stat: Stat }> {
    return this.#submit(getDataRequest, path, options.watch);
  }

  /** Writes a node's data if its version is `version` (-1: any); resolves to its new Stat. ZK_BADVERSION on a mismatch. */
  setData(path: string, data: Uint8Array | string | null, version = -1): Promise<Stat> {
    return this.#submit(setDataRequest, path, data, version);
  }

  /** The node's children (names, unordered). */
  getChildren(path: string, options: WatchOptions = {}): Promise<string[]> {
    return this.#submit(getChildrenNamesRequest, path, options.watch);
  }

  /** getChildren2: the children and the parent's Stat in one reply. */
  getChildrenWithStat(path: string, options: WatchOptions = {}): Promise<{ children: string[]; stat: Stat }> {
    return this.#submit(getChildrenRequest, path, options.watch);
  }

  /**
   * getChildren2 with the names kept as their bytes, decoded on demand, and
   * the parent's czxid: for a caller that reads few of many names (a waiter
   * joining a deep lock queue reads its predecessor's and the sequences).
   */
  getChildrenListing(path: string, options: WatchOptions = {}): Promise<ChildListing> {
    return this.#submit(getChildrenListingRequest, path, options.watch);
  }

  /** The paths of this session's ephemeral nodes under `prefix` (default: all). */
  getEphemerals(prefix = '/'): Promise<string[]> {
    return this.#submit(getEphemeralsRequest, prefix);
  }

  /** Reads a node's ACL and Stat. */
  getACL(path: string): Promise<{ acl: ACL[]; stat: Stat }> {
    return this.#submit(getAclRequest, path);
  }

  /** Sets a node's ACL if its ACL version is `aclVersion` (-1: any); resolves to its new Stat. */
  setACL(path: string, acl: readonly ACL[], aclVersion = -1): Promise<Stat> {
    return this.#submit(setAclRequest, path, acl, aclVersion);
  }

  /** Wait until the server this client talks to has caught up with the leader (for read-after-write across clients). */
  sync(path = '/'): Promise<void> {
    return this.#submit(syncRequest, path);
  }

  /**
   * Apply several operations atomically. A failure rejects with the failing
   * operation's ZooKeeperError (opIndex set); none of the operations took effect.
   */
  multi(ops: readonly MultiOp[]): Promise<MultiResult[]> {
    return this.#submit(multiRequest, ops);
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
    // others until the server expires the session. Answered or lost, the
    // session is over for us.
    if (this.#state === 'connected' || this.#state === 'suspended') {
      const bye = this.#call(closeSessionRequest()).then(ignore, ignore);
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

  /** `await using zk = await ZooKeeperClient.connect(...)`: closes the session (as close()) when the block is left. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ---------------------------------------------------------------- requests

  /**
   * Build the request (its argument checks come first: a bad call fails
   * with InvalidArgumentError whatever the session's state), then send it.
   * Not an async function: every operation would pay for another promise
   * and its ticks on top of the request's own.
   */
  #submit<A extends unknown[], T>(build: (chroot: Chroot, ...args: A) => Request<T>, ...args: A): Promise<T> {
    let request: Request<T>;
    try {
      request = build(this.#chroot, ...args);
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.#state === 'expired') return Promise.reject(new SessionExpiredError());
    if (this.#state === 'closed' || this.#closing) return Promise.reject(new ClientClosedError());
    return this.#call(request);
  }

  /** Send now if a connection is up, else when the next one is. */
  #call<T>(request: Request<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const call = new Call(request, this.#watches, resolve, reject);
      const connection = this.#connection;
      if (connection !== null && connection.isOpen) connection.send(call);
      else this.#queued.push(call as Call<unknown>);
    });
  }

  // ---------------------------------------------------------------- connections

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
    if (this.#state === 'closed' || this.#state === 'expired' || this.#connection !== null) return;
    if (this.#attemptsThisRound >= this.#servers.length) {
      // Tried every server once: wait a little before the next round, so a
      // refused port does not become a busy loop. Not unref'd, like the
      // expiry timer: between attempts nothing else of ours keeps the
      // process alive, and a caller awaiting a queued request must not see
      // the process exit under it. Both are cleared when the client ends.
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
    const connection = new Connection({
      address: server,
      connector: this.#connector,
      handshake: {
        lastZxidSeen: this.#progress.lastZxid,
        timeOut: this.#requestedTimeoutMs,
        sessionId: this.#sessionId,
        passwd: this.#password,
      },
      // ClientCnxn gives each server sessionTimeout / serverCount to answer.
      handshakeTimeoutMs: Math.max(250, Math.floor(this.#timeoutMs / this.#servers.length)),
      progress: this.#progress,
    });
    this.#connection = connection;
    connection.on('handshake', (response) => this.#onHandshake(connection, response));
    connection.on('notification', (event) => this.#onNotification(event));
    connection.on('lost', (error, final) => this.#onLost(connection, error, final));
    connection.open();
  }

  #onHandshake(connection: Connection, response: ConnectResponse): void {
    if (connection !== this.#connection) return;
    if (response.timeOut <= 0) {
      // ClientCnxn.onConnected: a non-positive timeout is the server's word
      // that the session we asked to resume no longer exists.
      this.#terminate('expired', new SessionExpiredError(`session 0x${this.#sessionId.toString(16)} expired (server said so on reconnect)`));
      return;
    }
    const resumed = this.#sessionId !== 0n;
    if (resumed && response.sessionId !== this.#sessionId) {
      connection.drop(new ProtocolError(`server resumed session 0x${response.sessionId.toString(16)}, asked for 0x${this.#sessionId.toString(16)}`));
      return;
    }
    this.#sessionId = response.sessionId;
    this.#password = response.passwd;
    this.#timeoutMs = response.timeOut;
    // The answered ConnectRequest counts as heard from us, for both clocks.
    const progress = this.#progress;
    if (connection.handshakeSentAt > progress.lastAckedSendAt) progress.lastAckedSendAt = connection.handshakeSentAt;
    if (connection.handshakeSentAt > progress.lastSendAt) progress.lastSendAt = connection.handshakeSentAt;
    this.#attemptsThisRound = 0;
    this.#lastError = this.#finalError = null;
    if (this.#expiryTimer) clearTimeout(this.#expiryTimer);
    this.#expiryTimer = null;
    debug('zookeeper: session 0x%s %s, timeout %d ms', response.sessionId.toString(16), resumed ? 'resumed' : 'established', response.timeOut);

    // Prime the connection as ClientCnxn does: watches first, then auth, then
    // whatever the application queued while we were away, in one write.
    if (this.#watches.size > 0) {
      const paths = { data: this.#watches.paths('data'), exist: this.#watches.paths('exist'), child: this.#watches.paths('child') };
      for (const request of setWatchesRequests(this.#chroot, progress.lastZxid, paths)) {
        this.#call(request).catch((error: Error) => debug('zookeeper: setWatches failed: %s', error.message));
      }
    }
    const auths = this.#auth.map((a) => this.#call(authRequest(a)));
    const queued = this.#queued;
    this.#queued = [];
    for (const call of queued) connection.send(call);

    const announce = (): void => {
      if (connection === this.#connection) this.#setState('connected');
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

  #onNotification(event: WatcherEvent): void {
    if (event.type === EventType.none) return; // connection-state events; our states come from the connection
    const path = this.#chroot.fromServer(event.path);
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

  /** The connection is gone (closed, errored, timed out, or spoke nonsense); its requests have failed. */
  #onLost(connection: Connection, error: Error, final: boolean): void {
    if (connection !== this.#connection) return;
    this.#connection = null;
    this.#lastError = error;
    debug('zookeeper: connection lost: %s', error.message);
    if (final) {
      // The connector says retrying this server cannot help (a certificate
      // that fails verification). Before any session: a configuration error,
      // reported at once (connect() rejects with it). With a live session:
      // one member may be bad (a botched certificate rotation) while the
      // others are fine, so skip it and go on trying them within the session
      // timeout; if none takes the session back, the losses carry this error.
      if (this.#sessionId === 0n) {
        this.#terminate('closed', error);
        return;
      }
      this.#finalError = error;
    }
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
      const left = this.#progress.lastSendAt + this.#timeoutMs - performance.now();
      if (left <= 0) {
        const cause = this.#disconnectedBy();
        this.#terminate(
          'expired',
          new SessionExpiredError(
            `session 0x${this.#sessionId.toString(16)} expired: no server reachable for the session timeout (${this.#timeoutMs} ms)${cause ? `; last error: ${cause.message}` : ''}`,
            cause ? { cause } : {},
          ),
        );
        return;
      }
      this.#expiryTimer = setTimeout(check, left + 1);
    };
    check();
  }

  /**
   * Why no server has the session now: null while connected; otherwise the
   * final error met since the connection was lost (a member whose
   * certificate does not verify tells more than the refusals of the others),
   * else the last connection error.
   */
  #disconnectedBy(): Error | null {
    return this.#state === 'connected' ? null : (this.#finalError ?? this.#lastError);
  }

  /** Final states: every request waiting or in flight fails with `error`, every timer stops. */
  #terminate(state: 'closed' | 'expired', error: Error): void {
    if (this.#state === 'closed' || this.#state === 'expired') return;
    this.#closing = true;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    if (this.#expiryTimer) clearTimeout(this.#expiryTimer);
    this.#retryTimer = this.#expiryTimer = null;
    const connection = this.#connection;
    this.#connection = null;
    connection?.close(error);
    const queued = this.#queued;
    this.#queued = [];
    for (const call of queued) call.fail(error);
    this.#watches.clear();
    this.#setState(state);
  }

  #setState(state: ClientState): void {
    if (this.#state === state && state !== 'connected') return;
    const previous = this.#state;
    this.#state = state;
    if (stateChannel.hasSubscribers) stateChannel.publish({ sessionId: this.#sessionId, previous, state });
    if (previous !== state) {
      publishSessionState('zookeeper', `0x${this.#sessionId.toString(16)}`, previous, state);
      this.emit('state', state);
    }
  }
}
