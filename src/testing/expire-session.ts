/**
 * End a live ZooKeeper session from the server's side, now, as a test of
 * lock loss needs it: the server deletes the session's ephemeral nodes (its
 * locks and candidacies), other clients' watches fire, and the client learns
 * on its next contact that its session has expired. Waiting out a session
 * timeout behind a black hole does the same, slowly; this takes a round trip.
 *
 *   const zk = await ZooKeeperClient.connect({ connectString, connector: sessionRecorder() });
 *   const lock = await acquireLock(zk, 'jobs/reindex');
 *   await expireSession(zk);      // lock.signal aborts (reason 'session_expired'); zk.state is 'expired'
 *
 * How (Curator's KillSession does the same): a second connection presents
 * the session's id and password, which makes the server move the session to
 * it (and drop the client's connection), and closes the session there. The
 * password is known only to the client, and fencekeeper's client does not
 * hand it out, so the client must be connected through sessionRecorder(): a
 * connector that reads the id and password from the server's ConnectResponse
 * on their way to the client.
 */
import type { Duplex } from 'node:stream';
import net from 'node:net';
import { ClientClosedError, ConnectionLossError, InvalidArgumentError } from '../errors.js';
import type { Connector, ServerAddress, ZooKeeperClient } from '../index.js';
import { connectTcp } from '../zookeeper/connection.js';
import { FrameParser } from '../zookeeper/frame-parser.js';
import { JuteReader } from '../zookeeper/jute-reader.js';
import { JuteWriter } from '../zookeeper/jute-writer.js';
import { MAX_PACKET_BYTES, OpCode, readConnectResponse, readReplyHeader, writeConnectRequest } from '../zookeeper/protocol.js';

interface RecordedSession {
  readonly password: Uint8Array;
  /** The server the session was last (re)established on. */
  readonly address: ServerAddress;
  readonly timeOutMs: number;
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
    record(stream, address);
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
function record(stream: Duplex, address: ServerAddress): void {
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
          sessions.set(response.sessionId, { password: Uint8Array.from(response.passwd), address, timeOutMs: response.timeOut });
        }
      });
    } catch {
      done = true; // not ours to judge: the client's own parser reports a bad frame
    }
    if (done) stream.off('data', onData);
  };
  stream.on('data', onData);
}

export interface ExpireSessionOptions {
  /** Give up (rejecting) if the session is not ended, and the client has not seen it, within this long. Default: the session timeout + 10 s. */
  readonly timeoutMs?: number;
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
  const recorded = sessions.get(sessionId);
  if (recorded === undefined) {
    throw new InvalidArgumentError(
      `expireSession(): the password of session 0x${sessionId.toString(16)} is not known: connect the client with ` +
        "ZooKeeperClient.connect({ ..., connector: sessionRecorder() }) from 'fencekeeper/testing'",
    );
  }
  const timeoutMs = options.timeoutMs ?? recorded.timeOutMs + 10_000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new InvalidArgumentError(`expireSession(): timeoutMs must be a positive integer, got ${String(timeoutMs)}`);
  const expired = clientExpired(client);
  const deadline = AbortSignal.timeout(timeoutMs);
  try {
    // The client, dropped by the server, reconnects at once with the same
    // session, and a connect that wins the race moves the session away from
    // this connection before its close is read: try again.
    for (let attempt = 1; ; attempt++) {
      const outcome = await closeSession(recorded, sessionId, deadline);
      if (outcome !== 'moved') break;
      if (attempt >= 10) throw new ConnectionLossError(`expireSession(): session 0x${sessionId.toString(16)} was taken back by its client ${attempt} times before it could be closed`);
    }
    sessions.delete(sessionId);
    await Promise.race([expired.promise, aborted(deadline, `expireSession(): session 0x${sessionId.toString(16)} is closed, but the client did not see it expire within ${timeoutMs} ms`)]);
  } finally {
    expired.cancel();
  }
}

/**
 * Present the session on a connection of our own and close it there, in one
 * write: the server reads the closeSession only after it has moved the
 * session to this connection.
 */
function closeSession(session: RecordedSession, sessionId: bigint, signal: AbortSignal): Promise<'closed' | 'expired' | 'moved'> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: session.address.host, port: session.address.port, noDelay: true });
    const parser = new FrameParser(MAX_PACKET_BYTES);
    let connected = false;
    const finish = (outcome: 'closed' | 'expired' | 'moved' | Error): void => {
      signal.removeEventListener('abort', onAbort);
      socket.destroy();
      if (outcome instanceof Error) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = (): void => finish(new ConnectionLossError(`expireSession(): no answer from ${session.address.host}:${session.address.port} in time`));
    signal.addEventListener('abort', onAbort, { once: true });
    socket.on('connect', () => {
      const w = new JuteWriter();
      w.beginFrame();
      writeConnectRequest(w, { lastZxidSeen: 0n, timeOut: session.timeOutMs, sessionId, passwd: session.password });
      w.endFrame();
      w.beginFrame();
      w.int(1).int(OpCode.closeSession);
      w.endFrame();
      socket.write(w.take());
    });
    socket.on('data', (chunk: Buffer) => {
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
    socket.on('close', () => finish('moved'));
    socket.on('error', () => undefined); // 'close' follows
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
