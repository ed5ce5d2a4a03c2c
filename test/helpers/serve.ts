// An HTTP app served on a port of its own (127.0.0.1, port 0) until close(),
// which drops the kept-alive connections too. No vitest here: the compare
// and fault scripts serve their resources with it outside a test worker.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Express } from 'express';

export interface Served {
  server: http.Server;
  port: number;
  close(): Promise<void>;
}

export async function serve(app: Express | http.RequestListener): Promise<Served> {
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
