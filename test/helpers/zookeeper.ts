// ZooKeeper in tests: clients closed after each test, and the server's own
// view through its four-letter words (srvr, wchc, cons).
import net from 'node:net';
import { ZooKeeperClient, type ConnectOptions } from '../../src/sources/zookeeper/client.js';

/** The clients a test file opened, closed together after each test. */
export class ClientPool {
  readonly #clients: ZooKeeperClient[] = [];

  /** A client on `target` (a connect string, with `sessionTimeoutMs`, or whole ConnectOptions). */
  async connect(target: string | ConnectOptions, sessionTimeoutMs = 4000): Promise<ZooKeeperClient> {
    const options = typeof target === 'string' ? { connectString: target, sessionTimeoutMs } : target;
    const zk = await ZooKeeperClient.connect(options);
    this.#clients.push(zk);
    return zk;
  }

  async many(n: number, connectString: string, sessionTimeoutMs = 4000): Promise<ZooKeeperClient[]> {
    return Promise.all(Array.from({ length: n }, () => this.connect(connectString, sessionTimeoutMs)));
  }

  async closeAll(): Promise<void> {
    await Promise.allSettled(this.#clients.splice(0).map((zk) => zk.close()));
  }
}

/** Send a four-letter word to 'host:port' and return the server's whole answer. */
export function fourLetterWord(hostPort: string, word: string): Promise<string> {
  const at = hostPort.lastIndexOf(':');
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)) });
    let text = '';
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(word));
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(text));
    socket.setTimeout(5000, () => socket.destroy(new Error(`${word} to ${hostPort} timed out`)));
  });
}
