// A stored response, written again to a Node response (Express; Fastify's reply.raw).
import type { ServerResponse } from 'node:http';
import type { StoredResponse } from '../../../index.js';
import { groupedHeaders } from './core.js';

/** Write `stored` (whose body was kept) as the whole response, with `idempotent-replayed: true`. */
export function replayTo(res: ServerResponse, stored: StoredResponse): void {
  if (res.headersSent || res.writableEnded || stored.body === null) return;
  res.statusCode = stored.status;
  for (const [name, values] of groupedHeaders(stored)) res.setHeader(name, values.length === 1 ? values[0]! : values);
  res.setHeader('idempotent-replayed', 'true');
  res.setHeader('content-length', stored.body.byteLength);
  res.end(Buffer.from(stored.body.buffer, stored.body.byteOffset, stored.body.byteLength));
}
