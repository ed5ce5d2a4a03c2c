/**
 * End a live ZooKeeper session from the server's side, now, as a test of
 * lock loss needs it: the server deletes the session's ephemeral nodes (its
 * locks and candidacies), other clients' watches fire, and the client learns
 * on its next contact that its session has expired. Waiting out a session
 * timeout behind a black hole does the same, slowly; this takes a round trip.
 *
 *   const zk = await ZooKeeperClient.connect({ connectString });
 *   const lock = await acquireLock(zk, 'jobs/reindex');
 *   await expireSession(zk);   // lock.signal aborts; zk.state is 'expired'
 *
 * How (Curator's KillSession does the same): a second connection presents
 * the session's id and password, which makes the server move the session to
 * it (and drop the client's connection), and closes the session there.
 *
 * The password: a ZooKeeper server does not store one per session, it
 * derives it from the session id (ZooKeeperServer.generatePasswd seeds
 * java.util.Random with the id XOR a fixed constant and draws 16 bytes), and
 * checks a reconnect against the same derivation. So the id, which every
 * client shows, is enough, and any client's session can be ended, whatever
 * connected it. A client connected through sessionRecorder() has its
 * password read from the server's answer instead, with the server it was
 * last on and the way it dialled it. Either way expireSession(zk) needs no
 * options: it dials the client's own servers the client's own way (or the
 * server sessionRecorder() saw it on).
 */
import type { Duplex } from 'node:stream';
import { ClientClosedError, ConnectionLossError, InvalidArgumentError } from '../errors.js';
import type { Connector, ServerAddress, TlsOptions, ZooKeeperClient } from '../sources/zookeeper/index.js';
import { clientInternals } from '../sources/zookeeper/client.js';
import { connectTcp } from '../sources/zookeeper/connection.js';
import { FrameParser } from '../sources/zookeeper/frame-parser.js';
import { JuteReader } from '../sources/zookeeper/jute-reader.js';
import { JuteWriter } from '../sources/zookeeper/jute-writer.js';
import { parseConnectString } from '../sources/zookeeper/paths.js';
import { MAX_PACKET_BYTES, OpCode, readConnectResponse, readReplyHeader, writeConnectRequest } from '../sources/zookeeper/protocol.js';
import { tlsConnector } from '../sources/zookeeper/tls.js';

interface RecordedSession {
  readonly password: Uint8Array;
  /** The server the session was last (re)established on. */
  readonly address: ServerAddress;
  /** How the client dialled it (TLS, a proxy...). */
  readonly connector: Connector;
}

/** By session id. A session's entry is small and replaced on every reconnect. */
const sessions = new Map<bigint, RecordedSession>();

/**
 * A connector (ZooKeeperClient.connect's `connector` option) that records
 * each session's id and password for expireSession(), then gets out of the
 * way. Wraps `inner` (default: plain TCP, as without a connector).
 */
export function sessionRecorder(inner: Connector = connectTcp): Connector {
  if (typeof inner !== 'function') throw new InvalidArgumentError('sessionRecorder(): inner must be a connector function');
  return async (address, options) => {
    const stream = await inner(address, options);
    record(stream, address, inner);
    return stream;
  };
}

/**
 * Watch the first frame the server sends on `stream`, its ConnectResponse.
 * Listening for 'data' puts the stream in flowing mode before the client
 * listens itself, which loses nothing: a ZooKeeper server sends nothing
 * before the ConnectRequest, and the client writes that only once it
 * listens. Both listeners see every chunk; this one leaves after the first frame.
 */
function record(stream: Duplex, address: ServerAddress, connector: Connector): void {
  const parser = new FrameParser(MAX_PACKET_BYTES);
  const onData = (chunk: Buffer): void => {
    let done = false;
    try {
      parser.parse(chunk, (frame) => {
        if (done) return;
        done = true;
        const response = readConnectResponse(new JuteReader(frame));
        // timeOut <= 0: the server refused to resume the session; nothing to record.
        if (response.timeOut > 0) {
          sessions.set(response.sessionId, { password: Uint8Array.from(response.passwd), address, connector });
        }
      });
    } catch {
      done = true; // not ours to judge: the client's own parser reports a bad frame
    }
    if (done) stream.off('data', onData);
  };
  stream.on('data', onData);
}

/**
 * Where the session to expire lives, when the client was not connected with
 * `connector: sessionRecorder()`: the server's connect string (and `tls` for a TLS client).
 */
export interface ExpireSessionOptions {
  /** Give up (rejecting) if the session is not ended, and the client has not seen it, within this long. Default: the session timeout + 10 s. */
  readonly timeoutMs?: number;
  /**
   * The servers to end the session through (the client's connect string, or
   * any server of its ensemble; tried in order). Default: the server
   * sessionRecorder() saw it on, else the client's own servers.
   */
  readonly connectString?: string;
  /** Dial them over TLS (the client's `tls` option), as the client does. */
  readonly tls?: TlsOptions;
  /** Or dial them with this connector (default: the one sessionRecorder() saw, else plain TCP). Not with `tls`. */
  readonly connector?: Connector;
}

/**
 * The password a ZooKeeper server gives session `id` and accepts from it:
 * ZooKeeperServer.generatePasswd, that is new java.util.Random(id ^
 * 0xB3415C00L).nextBytes(new byte[16]), the 48-bit linear congruential
 * generator Java specifies.
 */
export function sessionPassword(id: bigint): Uint8Array {
  const mask = (1n << 48n) - 1n;
  const multiplier = 0x5deece66dn;
  let seed = (id ^ 0xb3415c00n ^ multiplier) & mask;
  const out = new Uint8Array(16);
  for (let i = 0; i < out.length; ) {
    // Random.nextInt(): next(32), the seed's high 32 of 48 bits as a signed int.
    seed = (seed * multiplier + 0xbn) & mask;
    let word = Number(BigInt.asIntN(32, seed >> 16n));
    // Random.nextBytes: each int gives up to four bytes, low byte first.
    for (let n = Math.min(out.length - i, 4); n-- > 0; word >>= 8) out[i++] = word & 0xff;
  }
  return out;
}

interface Target {
  readonly password: Uint8Array;
  readonly addresses: readonly ServerAddress[];
  readonly connector: Connector;
}

function target(client: ZooKeeperClient, sessionId: bigint, options: ExpireSessionOptions): Target {
  if (options.tls !== undefined && options.connector !== undefined) throw new InvalidArgumentError('expireSession(): give tls or connector, not both');
  if (options.connector !== undefined && typeof options.connector !== 'function') throw new InvalidArgumentError('expireSession(): connector must be a connector function');
  if (options.tls !== undefined && (options.tls === null || typeof options.tls !== 'object')) throw new InvalidArgumentError('expireSession(): tls must be an object ({ ca, cert, key, servername })');
  const recorded = sessions.get(sessionId);
  const own = clientInternals.get(client);
  let addresses: readonly ServerAddress[];
  if (options.connectString !== undefined) {
    addresses = parseConnectString(options.connectString).servers;
  } else if (recorded !== undefined) {
    addresses = [recorded.address];
  } else if (own !== undefined) {
    addresses = own.servers;
  } else {
    throw new InvalidArgumentError(
      `expireSession(): which server is session 0x${sessionId.toString(16)} on? Pass { connectString } (the client's, or any server of its ensemble), ` +
        "or connect the client with ZooKeeperClient.connect({ ..., connector: sessionRecorder() }) from 'fencekeeper/testing'",
    );
  }
  const connector = options.connector ?? (options.tls !== undefined ? tlsConnector(options.tls) : (recorded?.connector ?? own?.connector ?? connectTcp));
  return { password: recorded?.password ?? sessionPassword(sessionId), addresses, connector };
}

/**
 * End `client`'s session from the server's side and wait until the client
 * itself has seen it expire (`client.state` is 'expired'). Resolves at once
 * for a client whose session has already expired.
 */
export async function expireSession(client: ZooKeeperClient, options: ExpireSessionOptions = {}): Promise<void> {
  if (client.state === 'expired') return;
  if (client.state === 'closed' || client.closing) throw new ClientClosedError('expireSession(): the client is closed: its session has already ended');
  const sessionId = client.sessionId;
  const where = target(client, sessionId, options);
  const timeoutMs = options.timeoutMs ?? client.sessionTimeoutMs + 10_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new InvalidArgumentError(`expireSession(): timeoutMs must be a positive integer, got ${String(timeoutMs)}`);
  const expired = clientExpired(client);
  const deadline = AbortSignal.timeout(timeoutMs);
  try {
    // The client, dropped by the server, reconnects at once with the same
    // session, and a connect that wins the race moves the session away from
    // this connection before its close is read: try again.
    let outcome: 'closed' | 'expired' | 'moved';
    for (let attempt = 1; ; attempt++) {
      outcome = await closeSessionAnywhere(where, sessionId, client.sessionTimeoutMs, deadline);
      if (outcome !== 'moved') break;
      if (attempt >= 10) throw new ConnectionLossError(`expireSession(): session 0x${sessionId.toString(16)} was taken back by its client ${attempt} times before it could be closed`);
    }
    sessions.delete(sessionId);
    // 'expired': the server refused the session, which it also does to a
    // password it did not issue (a server that derives passwords otherwise).
    const what = outcome === 'closed' ? 'is closed' : 'was refused by the server (expired already, or not its password)';
    await Promise.race([expired.promise, aborted(deadline, `expireSession(): session 0x${sessionId.toString(16)} ${what}, but the client did not see it expire within ${timeoutMs} ms`)]);
  } finally {
    expired.cancel();
  }
}

/** closeSession on the first of the servers that can be reached; the last error if none can. */
async function closeSessionAnywhere(where: Target, sessionId: bigint, timeOutMs: number, signal: AbortSignal): Promise<'closed' | 'expired' | 'moved'> {
  let lastError: Error | undefined;
  for (const address of where.addresses) {
    let stream: Duplex;
    try {
      stream = await where.connector(address, { signal });
    } catch (error) {
      lastError = error instanceof Error ? error : new Error(String(error));
      // A certificate that fails verification fails on every server alike.
      if ((lastError as { retryable?: unknown }).retryable === false) throw lastError;
      continue;
    }
    return closeSession(stream, where.password, sessionId, timeOutMs, address, signal);
  }
  throw new ConnectionLossError(
    `expireSession(): no server of ${where.addresses.map((a) => `${a.host}:${a.port}`).join(',')} could be reached${lastError ? `: ${lastError.message}` : ''}`,
    lastError ? { cause: lastError } : {},
  );
}

/**
 * Present the session on a connection of our own and close it there, in one
 * write: the server reads the closeSession only after it has moved the
 * session to this connection.
 */
function closeSession(
  stream: Duplex,
  password: Uint8Array,
  sessionId: bigint,
  timeOutMs: number,
  address: ServerAddress,
  signal: AbortSignal,
): Promise<'closed' | 'expired' | 'moved'> {
  return new Promise((resolve, reject) => {
    const parser = new FrameParser(MAX_PACKET_BYTES);
    let connected = false;
    let settled = false;
    const finish = (outcome: 'closed' | 'expired' | 'moved' | Error): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      stream.destroy();
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = (): void => finish(new ConnectionLossError(`expireSession(): no answer from ${address.host}:${address.port} in time`));
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    stream.on('data', (chunk: Buffer) => {
      try {
        parser.parse(chunk, (frame) => {
          const r = new JuteReader(frame);
          if (!connected) {
            connected = true;
            // timeOut <= 0: the session had already expired.
            if (readConnectResponse(r).timeOut <= 0) finish('expired');
            return;
          }
          if (readReplyHeader(r).xid === 1) finish('closed');
        });
      } catch (error) {
        finish(error instanceof Error ? error : new Error(String(error)));
      }
    });
    // Closed before our close was answered: the client took its session back.
    stream.on('close', () => finish('moved'));
    stream.on('end', () => finish('moved'));
    stream.on('error', () => undefined); // 'close' follows
    const w = new JuteWriter();
    w.beginFrame();
    writeConnectRequest(w, { lastZxidSeen: 0n, timeOut: timeOutMs, sessionId, passwd: password });
    w.endFrame();
    w.beginFrame();
    w.int(1).int(OpCode.closeSession);
    w.endFrame();
    stream.write(w.take());
  });
}

function clientExpired(client: ZooKeeperClient): { promise: Promise<void>; cancel: () => void } {
  let onState: ((state: string) => void) | undefined;
  const promise = new Promise<void>((resolve, reject) => {
    onState = (state) => {
      if (state === 'expired') resolve();
      else if (state === 'closed') reject(new ClientClosedError('expireSession(): the client was closed before it saw its session expire'));
    };
    client.on('state', onState);
  });
  promise.catch(() => undefined);
  return { promise, cancel: () => client.off('state', onState!) };
}

function aborted(signal: AbortSignal, message: string): Promise<never> {
  return new Promise((_resolve, reject) => {
    const fail = (): void => reject(new ConnectionLossError(message));
    if (signal.aborted) fail();
    else signal.addEventListener('abort', fail, { once: true });
  });
}
