/**
 * ZooKeeper over TLS: the same protocol on a `node:tls` stream, for servers
 * that listen on a `secureClientPort` (ZooKeeper 3.5+, Netty). Plugged in as
 * the client's connector, so everything above the byte stream (framing,
 * sessions, watches, digest auth on top) is unchanged.
 *
 * Host verification is on by default: the server's certificate must chain
 * to `ca` (or the system's roots when no `ca` is given) and name the host
 * dialled (or `servername`). A certificate that fails verification is not a
 * connection loss to retry: the same certificate will fail on the next try,
 * and at the first connect (a wrong `ca`, a wrong name) on every server
 * alike, so the connect fails at once with a TlsError (retryable false). A
 * live session that meets such a server on a reconnect (one member's
 * botched certificate rotation) skips it and tries the others within the
 * session timeout; its losses then carry the TlsError as their cause.
 *
 * So does a server that closes the connection during our first handshake:
 * that is what a plain client port does with a ClientHello (it reads the
 * record as a request of absurd length and hangs up), the common mistake of
 * dialling the clientPort instead of the secureClientPort. A server at its
 * connection limit (maxClientCnxns) hangs up the same way, so once this
 * connector has completed a handshake, the configuration has been shown to
 * work and a hang-up is an ordinary connection loss, retried.
 */
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import { TlsError } from '../../errors.js';
import type { Connector } from './connection.js';

/**
 * TLS to the servers' secureClientPort (PEM): the CA, a client certificate
 * and key, the server name to verify; verification is on.
 */
export interface TlsOptions {
  /** PEM: the CA(s) the server's certificate must chain to. Default: Node's bundled roots. */
  readonly ca?: string | Buffer | readonly (string | Buffer)[];
  /** PEM: our certificate, for servers that require client authentication (ssl.clientAuth=need). */
  readonly cert?: string | Buffer;
  /** PEM: the private key of `cert`. */
  readonly key?: string | Buffer;
  /** The name the server's certificate must carry (SNI too). Default: the host of the address dialled. */
  readonly servername?: string;
  /** Default true. False accepts any certificate: for tests against throwaway servers only. */
  readonly rejectUnauthorized?: boolean;
}

// Errors node:tls / OpenSSL report when the peer's certificate does not verify
// or the peer does not speak TLS at all: nothing a retry can change.
const FINAL_CODES = new Set([
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ERR_SSL_PACKET_LENGTH_TOO_LONG',
  'ERR_SSL_UNKNOWN_PROTOCOL',
  'ERR_SSL_TLSV1_ALERT_UNKNOWN_CA',
  'ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE',
  'ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED',
]);

function finalCode(error: Error): string | undefined {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && FINAL_CODES.has(code) ? code : undefined;
}

// The peer hung up (or reset) after accepting the TCP connection, before the handshake completed.
const HANG_UP_CODES = new Set(['ECONNRESET', 'EPIPE']);

/** A connector that opens each server connection over TLS with `options`. */
export function tlsConnector(options: TlsOptions = {}): Connector {
  const ca = options.ca === undefined ? undefined : Array.isArray(options.ca) ? [...options.ca] : (options.ca as string | Buffer);
  let handshakes = 0;
  return (address, { signal }) =>
    new Promise<Duplex>((resolve, reject) => {
      const socket = tls.connect({
        host: address.host,
        port: address.port,
        ca,
        cert: options.cert,
        key: options.key,
        // SNI carries host names only; an IP address is still checked against the certificate's IP entries.
        servername: options.servername ?? (net.isIP(address.host) === 0 ? address.host : undefined),
        rejectUnauthorized: options.rejectUnauthorized ?? true,
      });
      socket.setNoDelay(true);
      let tcpConnected = false;
      socket.once('connect', () => {
        tcpConnected = true;
      });
      const fail = (error: Error): void => {
        signal.removeEventListener('abort', onAbort);
        socket.destroy();
        const where = `${address.host}:${address.port}`;
        const code = finalCode(error);
        const errno = (error as { code?: unknown }).code;
        if (code !== undefined) {
          reject(new TlsError(`TLS to ${where} failed: ${error.message} (${code})`, { cause: error }));
        } else if (tcpConnected && handshakes === 0 && typeof errno === 'string' && HANG_UP_CODES.has(errno)) {
          reject(
            new TlsError(
              `TLS to ${where} failed: the server hung up during the TLS handshake (${errno}). ` +
                'Is this its secureClientPort? A plain clientPort drops a TLS ClientHello (a server at its maxClientCnxns limit does too)',
              { cause: error },
            ),
          );
        } else {
          reject(error);
        }
      };
      const onAbort = (): void => {
        socket.off('error', fail);
        socket.destroy();
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      socket.once('error', fail);
      socket.once('secureConnect', () => {
        handshakes++;
        signal.removeEventListener('abort', onAbort);
        socket.off('error', fail);
        resolve(socket);
      });
    });
}
