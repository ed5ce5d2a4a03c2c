/**
 * One connection to one ZooKeeper server: the byte stream, the ConnectRequest
 * that opens it, the request pipeline over it and the heartbeat that keeps
 * it alive. It knows nothing of sessions beyond the handshake it is given:
 * the client decides what a ConnectResponse means and what to do when the
 * connection is lost.
 *
 * Requests go out as frames (RequestHeader + record); issued in one tick,
 * they leave in one write. The server answers in the order it received
 * them (ReplyHeader + record), so replies are matched to the oldest request
 * in flight by xid; a reply that does not match breaks the protocol, and the
 * connection is dropped: every request in flight fails with
 * ConnectionLossError (its outcome is unknown). Pings (xid -2), auth replies
 * (xid -4) and watch notifications (xid -1) come outside that order. When
 * idle for a third of the session timeout the connection pings; when nothing
 * arrives for two thirds of it the server is presumed gone (ClientCnxn's
 * rules).
 *
 * Events: 'handshake' (the server's ConnectResponse), 'notification' (a
 * WatcherEvent), 'lost' (the connection is gone; every request it carried
 * has failed). Nothing is emitted after 'lost' or close().
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import { ConnectionLossError, FencekeeperError, InvalidArgumentError, ProtocolError } from '../../errors.js';
import { FrameParser } from './frame-parser.js';
import { JuteReader } from './jute-reader.js';
import { JuteWriter } from './jute-writer.js';
import type { ServerAddress } from './paths.js';
import {
  MAX_PACKET_BYTES,
  OpCode,
  Xid,
  readConnectResponse,
  readReplyHeader,
  readWatcherEvent,
  writeConnectRequest,
  type ConnectRequest,
  type ConnectResponse,
  type WatcherEvent,
} from './protocol.js';

/**
 * Opens the byte stream to one server and resolves once bytes can flow
 * (for TLS: once the handshake has verified the server). A rejection with a
 * FencekeeperError whose `retryable` is false (a certificate that fails
 * verification, say) is final for that server: before any session the
 * client stops at once with that error instead of trying the next server;
 * with a live session it skips that server and keeps trying the others
 * within the session timeout (an expiry that follows carries the error as
 * its cause). Any other rejection is a connection loss like a refused port,
 * and the next server is tried. The signal aborts
 * when the client gives up on this attempt; the stream is then destroyed.
 */
export type Connector = (address: ServerAddress, options: { readonly signal: AbortSignal }) => Duplex | Promise<Duplex>;

/** The default connector: plain TCP, Nagle off (a request must not wait for the next one). */
export const connectTcp: Connector = (address, { signal }) =>
  new Promise<Duplex>((resolve, reject) => {
    const socket = net.connect({ host: address.host, port: address.port, noDelay: true });
    const onAbort = (): void => {
      socket.destroy();
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('error', reject);
    socket.once('connect', () => {
      signal.removeEventListener('abort', onAbort);
      socket.off('error', reject);
      resolve(socket);
    });
  });

/** What the connection needs of a request it carries. */
export interface PendingRequest {
  readonly opcode: number;
  /** Writes the request's record after the header; throwing fails this request alone. */
  encode(w: JuteWriter): void;
  /** The reply arrived: `err` from its header, `r` at its record. Throwing means the record did not parse. */
  answer(err: number, r: JuteReader): void;
  /** No reply will come (the request was refused before sending, or the connection is gone). */
  fail(error: Error): void;
  xid: number;
  /** performance.now() of the write that carried it. */
  sentAt: number;
}

/**
 * What every connection of one session reports into: send times and the
 * largest zxid seen. The session's deadlines are computed from them.
 */
export interface SessionProgress {
  /** performance.now() of the last write on an established connection (or an answered handshake). */
  lastSendAt: number;
  /** performance.now() at which the last request whose reply has arrived was sent. */
  lastAckedSendAt: number;
  lastZxid: bigint;
}

export interface ConnectionOptions {
  readonly address: ServerAddress;
  readonly connector: Connector;
  readonly handshake: ConnectRequest;
  /** How long the connector and the ConnectResponse together may take. */
  readonly handshakeTimeoutMs: number;
  readonly progress: SessionProgress;
}

interface Ping { sentAt: number }

type State = 'idle' | 'connecting' | 'handshaking' | 'open' | 'closed';

// 10 MiB: far above any reply a default server sends (jute.maxbuffer is
// 1 MiB), small enough that a stream of garbage cannot make us allocate much.
const MAX_REPLY_FRAME = 10 * 1024 * 1024;

const ignore = (): void => undefined;

export class Connection extends EventEmitter<{ handshake: [ConnectResponse]; notification: [WatcherEvent]; lost: [error: Error, final: boolean] }> {
  readonly address: ServerAddress;
  readonly #options: ConnectionOptions;
  readonly #progress: SessionProgress;
  readonly #abort = new AbortController();
  #state: State = 'idle';
  #socket: Duplex | null = null;
  readonly #parser = new FrameParser(MAX_REPLY_FRAME);
  readonly #writer = new JuteWriter();
  readonly #reader = new JuteReader(Buffer.alloc(0));
  #nextXid = 1;
  #flushScheduled = false;
  #blocked = false;
  /** Requests written, in reply order; answered ones are cleared from the head. */
  #inflight: (PendingRequest | undefined)[] = [];
  #inflightHead = 0;
  #auths: PendingRequest[] = [];
  #pings: Ping[] = [];
  /** Entries encoded since the last flush: their send time is the flush's. */
  #unsent: { sentAt: number }[] = [];
  #handshakeSentAt = 0;
  #lastRecvAt = 0;
  #attemptTimer: NodeJS.Timeout | null = null;
  #heartbeat: NodeJS.Timeout | null = null;

  constructor(options: ConnectionOptions) {
    super();
    this.address = options.address;
    this.#options = options;
    this.#progress = options.progress;
  }

  /** Handshake done: requests may be sent. */
  get isOpen(): boolean {
    return this.#state === 'open';
  }

  /** performance.now() at which the ConnectRequest was written. */
  get handshakeSentAt(): number {
    return this.#handshakeSentAt;
  }

  /** Connect and write the ConnectRequest; 'handshake' or 'lost' follows. */
  open(): void {
    if (this.#state !== 'idle') return;
    this.#state = 'connecting';
    const { address, handshakeTimeoutMs } = this.#options;
    this.#attemptTimer = setTimeout(() => {
      this.drop(new ConnectionLossError(`${address.host}:${address.port} did not answer the handshake within ${handshakeTimeoutMs} ms`));
    }, handshakeTimeoutMs);
    this.#attemptTimer.unref();
    let stream: Duplex | Promise<Duplex>;
    try {
      stream = this.#options.connector(address, { signal: this.#abort.signal });
    } catch (error) {
      stream = Promise.reject(error);
    }
    Promise.resolve(stream).then(this.#onConnected, this.#onConnectFailed);
  }

  /** Serialize a request into the pending write; it leaves with everything else issued this tick. */
  send(request: PendingRequest): void {
    if (this.#state !== 'open') {
      request.fail(new ConnectionLossError('connection is not open'));
      return;
    }
    const w = this.#writer;
    const opcode = request.opcode;
    request.xid = opcode === OpCode.setWatches ? Xid.setWatches : opcode === OpCode.auth ? Xid.auth : this.#nextXid++;
    if (this.#nextXid > 0x7fffffff) this.#nextXid = 1;
    w.beginFrame();
    w.int(request.xid).int(opcode);
    try {
      request.encode(w);
    } catch (error) {
      w.abortFrame();
      request.fail(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    const length = w.frameLength;
    if (length > MAX_PACKET_BYTES) {
      // The length read before abortFrame: the aborted frame has none.
      w.abortFrame();
      request.fail(new InvalidArgumentError(`request of ${length} bytes exceeds ZooKeeper's packet limit (${MAX_PACKET_BYTES}, jute.maxbuffer)`));
      return;
    }
    w.endFrame();
    // The server answers auth outside the request pipeline, so auth replies
    // are matched among themselves, not against the request queue.
    if (opcode === OpCode.auth) this.#auths.push(request);
    else this.#inflight.push(request);
    this.#unsent.push(request);
    this.#scheduleFlush();
  }

  /** The connection is gone (for whatever reason the caller found): fail what it carries, emit 'lost'. */
  drop(error: Error): void {
    this.#lose(error, false);
  }

  /**
   * End the connection without an event: requests in flight fail with
   * `reason` as given (the owner has already decided what they mean).
   */
  close(reason: Error): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    if (this.#attemptTimer) clearTimeout(this.#attemptTimer);
    if (this.#heartbeat) clearTimeout(this.#heartbeat);
    this.#attemptTimer = this.#heartbeat = null;
    this.#abort.abort(reason);
    const socket = this.#socket;
    this.#socket = null;
    if (socket !== null) {
      socket.off('data', this.#onData);
      socket.off('end', this.#onEnd);
      socket.off('close', this.#onEnd);
      socket.off('error', this.#onError);
      socket.off('drain', this.#onDrain);
      socket.on('error', ignore);
      socket.destroy();
    }
    const inflight = this.#inflight;
    const head = this.#inflightHead;
    const auths = this.#auths;
    this.#inflight = [];
    this.#inflightHead = 0;
    this.#auths = [];
    this.#pings = [];
    this.#unsent = [];
    for (let i = head; i < inflight.length; i++) inflight[i]?.fail(reason);
    for (const auth of auths) auth.fail(reason);
  }

  #lose(error: Error, final: boolean): void {
    if (this.#state === 'closed') return;
    this.close(error instanceof ConnectionLossError ? error : new ConnectionLossError(error.message, { cause: error }));
    this.emit('lost', error, final);
  }

  readonly #onConnected = (socket: Duplex): void => {
    if (this.#state !== 'connecting') {
      socket.on('error', ignore);
      socket.destroy();
      return;
    }
    this.#socket = socket;
    this.#state = 'handshaking';
    socket.on('data', this.#onData);
    // 'end' as well as 'close': a stream that allows half-open connections
    // (any Duplex a connector returns) may never close by itself.
    socket.on('end', this.#onEnd);
    socket.on('close', this.#onEnd);
    socket.on('error', this.#onError);
    const w = this.#writer;
    w.beginFrame();
    writeConnectRequest(w, this.#options.handshake);
    w.endFrame();
    // Not progress.lastSendAt: a ConnectRequest nobody answers must not push
    // the local expiry back, or a client whose servers all accept TCP but
    // never answer (a proxy, a load balancer, a black hole) stays suspended
    // forever. The client counts an answered one.
    this.#handshakeSentAt = performance.now();
    socket.write(w.take());
  };

  readonly #onConnectFailed = (error: unknown): void => {
    if (this.#state !== 'connecting') return;
    const cause = error instanceof Error ? error : new Error(String(error));
    this.#lose(cause, cause instanceof FencekeeperError && !cause.retryable);
  };

  readonly #onData = (chunk: Buffer): void => {
    this.#lastRecvAt = performance.now();
    try {
      this.#parser.parse(chunk, this.#onFrame);
    } catch (error) {
      const cause = error instanceof Error ? error : new Error(String(error));
      this.drop(error instanceof FencekeeperError ? error : new ProtocolError(cause.message, { cause }));
    }
  };

  readonly #onEnd = (): void => {
    // Closed before the ConnectResponse: a server not serving yet (no quorum) does that, and so
    // does a TLS-only port given plain text (it waits for a ClientHello and drops anything else).
    const hint = this.#state === 'handshaking' ? ' before answering the session request (a server not serving yet, or a secure client port: connect with the tls option)' : '';
    this.drop(new ConnectionLossError(`connection to ${this.address.host}:${this.address.port} closed${hint}`));
  };

  readonly #onError = (error: Error): void => {
    this.drop(error);
  };

  readonly #onFrame = (frame: Buffer): void => {
    // A handler can drop this connection (a resumed session that does not
    // match): the frames still left in the chunk must not be applied.
    if (this.#state === 'closed') return;
    // Every reply is decoded before the next frame is handed over, so one reader serves them all.
    const r = this.#reader.reset(frame);
    if (this.#state === 'handshaking') {
      this.#onHandshake(readConnectResponse(r));
      return;
    }
    const header = readReplyHeader(r);
    if (header.xid === Xid.notification) {
      this.emit('notification', readWatcherEvent(r));
      return;
    }
    const progress = this.#progress;
    if (header.zxid > progress.lastZxid) progress.lastZxid = header.zxid;
    if (header.xid === Xid.ping) {
      const ping = this.#pings.shift();
      if (ping === undefined) throw new ProtocolError('ping reply without a ping in flight');
      this.#acked(ping.sentAt);
      return;
    }
    if (header.xid === Xid.auth) {
      const auth = this.#auths.shift();
      if (auth === undefined) throw new ProtocolError('auth reply without an auth in flight');
      auth.answer(header.err, r);
      return;
    }
    const request = this.#inflight[this.#inflightHead];
    if (request === undefined || request.xid !== header.xid) {
      throw new ProtocolError(`reply xid ${header.xid} does not match the oldest request in flight (${request?.xid ?? 'none'})`);
    }
    this.#inflight[this.#inflightHead++] = undefined;
    if (this.#inflightHead > 1024 && this.#inflightHead * 2 > this.#inflight.length) {
      this.#inflight = this.#inflight.slice(this.#inflightHead);
      this.#inflightHead = 0;
    }
    this.#acked(request.sentAt);
    try {
      request.answer(header.err, r);
    } catch (error) {
      // A reply whose record does not parse is a protocol violation: the
      // stream can no longer be trusted, so the request fails as a
      // connection loss (its outcome is unknown) and the connection goes.
      request.fail(new ConnectionLossError('malformed reply from server', { cause: error }));
      throw error;
    }
  };

  #onHandshake(response: ConnectResponse): void {
    if (this.#attemptTimer) clearTimeout(this.#attemptTimer);
    this.#attemptTimer = null;
    this.#state = 'open';
    this.emit('handshake', response);
    // The listener may have dropped the connection (an expired or foreign session).
    if (this.#state === 'open' && response.timeOut > 0) this.#armHeartbeat(response.timeOut);
  }

  #acked(sentAt: number): void {
    if (sentAt > this.#progress.lastAckedSendAt) this.#progress.lastAckedSendAt = sentAt;
  }

  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    process.nextTick(this.#flush);
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const socket = this.#socket;
    if (socket === null || this.#state !== 'open' || this.#blocked || this.#writer.pending === 0) return;
    const now = performance.now();
    for (const entry of this.#unsent) entry.sentAt = now;
    this.#unsent.length = 0;
    this.#progress.lastSendAt = now;
    if (!socket.write(this.#writer.take())) {
      // Respect backpressure: keep serializing into our buffer, write again on drain.
      this.#blocked = true;
      socket.once('drain', this.#onDrain);
    }
  };

  readonly #onDrain = (): void => {
    this.#blocked = false;
    this.#flush();
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

  #armHeartbeat(timeoutMs: number): void {
    const pingEvery = timeoutMs / 3;
    const readTimeout = (timeoutMs * 2) / 3;
    const tick = (): void => {
      this.#heartbeat = null;
      if (this.#state !== 'open') return;
      const now = performance.now();
      if (now - this.#lastRecvAt >= readTimeout) {
        this.drop(new ConnectionLossError(`no reply from server for ${Math.round(now - this.#lastRecvAt)} ms`));
        return;
      }
      const progress = this.#progress;
      if (now - progress.lastSendAt >= pingEvery) this.#sendPing();
      const next = Math.min(progress.lastSendAt + pingEvery, this.#lastRecvAt + readTimeout);
      this.#heartbeat = setTimeout(tick, Math.max(10, next - performance.now()));
      this.#heartbeat.unref();
    };
    this.#heartbeat = setTimeout(tick, pingEvery);
    this.#heartbeat.unref();
  }
}
